"""Sequences of one llama.cpp context, and the batch that carries their tokens.

A `Model` loaded with `n_seq` sequences has one `Slot` per sequence: its own cached positions,
its own truncation and saved state, over the context's shared weights and (unified) KV buffer.
A slot looks like a whole Model to the code above (a generation, a drafter, the state cache
take either). `decode_blocks` evaluates blocks of several slots in one `llama_decode`: what
lets `lsd serve` verify the drafts of several requests in one pass.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp as ll
import numpy as np

from ..errors import ContextOverflowError, IncompatibleModelsError
from .logits import check_finite


class DecodeRefused(RuntimeError):
    """llama_decode returned an error code (a full KV cache, say): no token of the batch
    stays cached, so its blocks may be tried again (each alone). Other failures of a decode
    (NaN logits) come after its tokens were cached: trying them again would add them twice."""


@dataclass(frozen=True)
class SeqState:
    """A saved cache: the tokens it held (int32[n]) and llama.cpp's bytes (uint8[size])."""

    tokens: np.ndarray
    data: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + self.tokens.nbytes)


class TokenBatch:
    """One reusable llama_batch of up to `capacity` tokens, written with numpy. Each token's
    sequence is set by pointing its seq_id entry at a constant holding that id (one vectorized
    write, not a ctypes write per token); `free` puts llama.cpp's own pointers back first."""

    def __init__(self, capacity: int, n_seq: int) -> None:
        self.capacity = capacity
        self.raw = ll.llama_batch_init(capacity, 0, 1)
        self.tokens = np.ctypeslib.as_array(self.raw.token, shape=(capacity,))
        self.pos = np.ctypeslib.as_array(self.raw.pos, shape=(capacity,))
        self.out = np.ctypeslib.as_array(self.raw.logits, shape=(capacity,))
        np.ctypeslib.as_array(self.raw.n_seq_id, shape=(capacity,))[:] = 1
        pointers = ctypes.cast(self.raw.seq_id, ctypes.POINTER(ctypes.c_uint64))
        self._seq_pointers = np.ctypeslib.as_array(pointers, shape=(capacity,))
        self._own_pointers = self._seq_pointers.copy()  # llama_batch_free frees these
        self._seq_values = np.arange(max(n_seq, 1), dtype=np.int32)  # the ids pointed at
        self._seq_addresses = (self._seq_values.ctypes.data
                               + 4 * np.arange(len(self._seq_values), dtype=np.uint64))
        self._seq_pointers[:] = self._seq_addresses[0]
        self.positions = np.arange(capacity, dtype=np.int32)

    def set_sequences(self, lo: int, hi: int, seq_id: int) -> None:
        """Tokens lo..hi-1 belong to sequence `seq_id`."""
        self._seq_pointers[lo:hi] = self._seq_addresses[seq_id]

    def free(self) -> None:
        self._seq_pointers[:] = self._own_pointers
        ll.llama_batch_free(self.raw)


class Slot:
    """One sequence of a Model's context (positions 0..n_cached-1 cached). Everything not
    per sequence (vocab, n_vocab, n_batch, path, on_decoded, ...) is the model's. `n_ctx` is
    the most this sequence may hold."""

    def __init__(self, model, seq_id: int) -> None:
        self.model = model
        self.seq_id = seq_id
        self.n_cached = 0
        self._cached_tokens = np.zeros(model.n_ctx, np.int32)  # the token at each position

    def __getattr__(self, name: str):
        return getattr(self.model, name)  # (only reached for what a slot does not own)

    @property
    def most_logit_rows(self) -> int:
        return self.model.most_logit_rows  # (llama.cpp's logits buffer is the context's)

    @property
    def cached_tokens(self) -> np.ndarray:
        """int32[n_cached]: the tokens whose keys and values are in the cache (a view)."""
        return self._cached_tokens[:self.n_cached]

    def decode(self, tokens: Sequence[int] | np.ndarray, start_pos: int,
               n_logit_rows: int) -> np.ndarray:
        """Evaluate `tokens` at positions start_pos.. and return logits of the last rows.

        Returns a zero-copy view float32[n_logit_rows, n_vocab] into llama.cpp's output buffer;
        row i predicts the token after tokens[len(tokens) - n_logit_rows + i]. The view is
        overwritten by the next decode of any slot of this model. Inputs longer than n_batch
        are split into chunks.
        """
        n = len(tokens)
        self._check_block(n, start_pos, n_logit_rows)
        if n == 0:
            return np.empty((0, self.model.n_vocab), dtype=np.float32)
        tokens = np.asarray(tokens, dtype=np.int32)
        n_batch = self.model.n_batch
        # The last chunk holds every requested row (n_logit_rows <= n_batch); earlier chunks
        # fill the cache without outputs.
        last_start = max(0, n - n_batch)
        for lo in range(0, last_start, n_batch):
            hi = min(lo + n_batch, last_start)
            decode_blocks(self.model, [(self, tokens[lo:hi], 0)])
        return decode_blocks(self.model, [(self, tokens[last_start:], n_logit_rows)])[0]

    def _check_block(self, n: int, start_pos: int, n_logit_rows: int) -> None:
        if start_pos != self.n_cached:
            raise RuntimeError(f"decode at position {start_pos} but {self.n_cached} are cached")
        if start_pos + n > self.n_ctx:
            raise ContextOverflowError(
                f"{start_pos + n} tokens do not fit the context of {self.n_ctx}")
        if n_logit_rows > min(self.model.n_batch, n):
            raise ValueError(f"{n_logit_rows} logit rows for {n} tokens (n_batch "
                             f"{self.model.n_batch})")

    def reuse_prefix(self, tokens: np.ndarray, limit: int) -> int:
        """Truncate the cache to its longest common prefix with `tokens` (at most `limit`
        positions) and return that length: what a new request need not evaluate again."""
        cached = self.cached_tokens
        m = min(len(cached), len(tokens), limit)
        differ = np.flatnonzero(cached[:m] != tokens[:m])
        keep = int(differ[0]) if len(differ) else m
        if not self.model.supports_truncate and keep < self.n_cached:
            keep = 0  # a recurrent state cannot be rewound, only dropped whole
        self.truncate(keep)
        return keep

    def truncate(self, n: int) -> None:
        """Remove every cached position >= n (always asks llama.cpp, so that a cache left ahead
        of `n_cached` by an interrupted decode is cleaned too)."""
        _check_open(self.model)
        if not ll.llama_memory_seq_rm(self.model.memory, self.seq_id, n, -1):
            raise IncompatibleModelsError(
                f"{self.model.path.name} is a recurrent/hybrid model whose cache cannot drop "
                f"rejected tokens (positions {n}..)")
        self.n_cached = min(self.n_cached, n)

    def state_nbytes(self) -> int:
        """Bytes `save_state` would copy now (llama.cpp's exact size)."""
        return int(ll.llama_state_seq_get_size(self.model.ctx, self.seq_id))

    def save_state(self) -> SeqState:
        """A copy of this sequence's cache (keys and values of every cached position) and of
        the tokens it holds, for `restore_state`: a conversation set aside in RAM."""
        size = ll.llama_state_seq_get_size(self.model.ctx, self.seq_id)
        data = np.empty(size, np.uint8)
        written = ll.llama_state_seq_get_data(
            self.model.ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size,
            self.seq_id)
        if written != size:
            raise RuntimeError(f"{self.model.path.name}: llama.cpp saved {written} of {size} "
                               "bytes")
        return SeqState(self.cached_tokens.copy(), data)

    def restore_state(self, state: SeqState) -> None:
        """Replace this sequence's cache with one `save_state` took from a slot of this model
        (llama.cpp drops the sequence's old cells first)."""
        data = state.data
        read = ll.llama_state_seq_set_data(
            self.model.ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), len(data),
            self.seq_id)
        if read != len(data):
            self.truncate(0)  # what a failed read leaves is nothing to rely on
            raise RuntimeError(f"{self.model.path.name}: llama.cpp restored {read} of "
                               f"{len(data)} bytes of a saved state")
        n = len(state.tokens)
        self._cached_tokens[:n] = state.tokens
        self.n_cached = n


def decode_blocks(model, blocks: list[tuple[Slot, np.ndarray, int]]) -> list[np.ndarray]:
    """One llama_decode for blocks of several slots of `model`: each (slot, tokens int32[n],
    n_logit_rows) appends its tokens at that slot's n_cached and gets its last n_logit_rows
    rows back (float32[rows, n_vocab] views, valid until the model's next decode). The
    blocks' tokens together fit n_batch; the slots differ."""
    _check_open(model)
    batch, n, n_rows = model.batch, 0, 0
    for slot, tokens, n_out in blocks:
        m = len(tokens)
        slot._check_block(m, slot.n_cached, n_out)
        batch.tokens[n:n + m] = tokens
        np.add(batch.positions[:m], slot.n_cached, out=batch.pos[n:n + m])
        batch.set_sequences(n, n + m, slot.seq_id)
        batch.out[n:n + m - n_out] = 0
        batch.out[n + m - n_out:n + m] = 1
        slot._cached_tokens[slot.n_cached:slot.n_cached + m] = tokens  # read below n_cached
        n, n_rows = n + m, n_rows + n_out
    batch.raw.n_tokens = n
    rc = ll.llama_decode(model.ctx, batch.raw)
    if rc != 0:
        for slot, _, _ in blocks:  # a failed decode may leave part of the batch cached
            slot.truncate(slot.n_cached)
        raise DecodeRefused(f"llama_decode failed with code {rc} ({n} tokens, {len(blocks)} "
                           "sequences)")
    for slot, tokens, _ in blocks:
        slot.n_cached += len(tokens)
    model.most_logit_rows = max(model.most_logit_rows, n_rows)
    if model.on_decoded is not None:
        model.on_decoded()
    if n_rows == 0:
        return [np.empty((0, model.n_vocab), np.float32) for _ in blocks]
    rows = model.logits.rows(n_rows)
    check_finite(rows, model.path.name)
    views, at = [], 0
    for _, _, n_out in blocks:
        views.append(rows[at:at + n_out])
        at += n_out
    return views


def _check_open(model) -> None:
    if not model.ctx:  # its context and batch are freed: touching them would crash
        raise RuntimeError(f"{model.path.name} is closed")
