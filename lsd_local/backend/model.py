"""Models: load a GGUF file, tokenize, decode with explicit positions, truncate the cache.

A `Model` owns one llama_model, one llama_context (sequence 0) and one reusable llama_batch.
Positions are explicit: `decode(tokens, start_pos, n_logit_rows)` appends tokens at
`start_pos..` (which must equal the number of cached positions) and `truncate(n)` removes every
cached position >= n. Logits are requested only for the trailing `n_logit_rows` tokens and
returned as a zero-copy float32 view that stays valid until the next `decode`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as ll
import numpy as np

from ..config import LoadOptions
from ..errors import (
    ContextOverflowError,
    IncompatibleModelsError,
    ModelLoadError,
    check,
)
from .cpu_probe import RepackDecision, repack_decision
from .devices import device_array, list_devices, offload_layers, select_devices
from .gguf_check import check_gguf
from .logits import LogitsView, check_finite
from .vocab import Vocab

SPLIT_MODE_IDS = {"none": 0, "layer": 1, "row": 2}  # llama_split_mode
GGUF_MAGIC = b"GGUF"


class _LogSink:
    """Collects llama.cpp's log lines so that load failures can quote the reason."""

    def __init__(self) -> None:
        self.verbose = False
        self.recent: deque[str] = deque(maxlen=20)
        self.callback = ll.llama_log_callback(self._on_log)  # kept alive by this object

    def _on_log(self, level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        line = text.decode("utf-8", errors="replace")
        if level in (3, 4):  # GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR
            self.recent.append(line.strip())
        if self.verbose:
            print(line, end="", file=sys.stderr)


_log_sink: _LogSink | None = None  # installed on first load, never at import


def _install_log_sink(verbose: bool) -> _LogSink:
    global _log_sink
    if _log_sink is None:
        logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL)
        ll.llama_backend_init()
        _log_sink = _LogSink()
        ll.llama_log_set(_log_sink.callback, ctypes.c_void_p(0))
    _log_sink.verbose = verbose
    return _log_sink


def physical_cores() -> int:
    """Number of physical CPU cores (llama.cpp's default thread count), from sysfs when possible."""
    siblings = set()
    for cpu in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/thread_siblings_list"):
        try:
            siblings.add(cpu.read_text().strip())
        except OSError:
            continue
    return len(siblings) or os.cpu_count() or 1


def recurrent_message(model: Model) -> str:
    """What a recurrent/hybrid model cannot do, said the same way wherever it matters."""
    return (f"{model.path.name} is a recurrent/hybrid model whose cache cannot drop rejected "
            "tokens")


@dataclass(frozen=True)
class SeqState:
    """A saved cache: the tokens it held (int32[n]) and llama.cpp's bytes (uint8[size])."""

    tokens: np.ndarray
    data: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + self.tokens.nbytes)


def _check_gguf_file(path: Path) -> None:
    if not path.exists():
        raise ModelLoadError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelLoadError(f"model path is a directory, not a .gguf file: {path}")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelLoadError(f"cannot read model file {path}: {exc.strerror}") from None
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF file (bad magic {magic!r}): {path}")


class Model:
    """One GGUF model with its own context and KV cache (sequence 0)."""

    def __init__(self, path: Path, model_p, ctx_p, opts: LoadOptions) -> None:
        self.path = path
        self.options = opts
        self._model = model_p
        self._ctx = ctx_p
        self.vocab = Vocab(ll.llama_model_get_vocab(model_p))  # lives as long as model_p
        self._memory = ll.llama_get_memory(ctx_p)
        self.n_vocab: int = self.vocab.n_tokens
        self.n_ctx: int = ll.llama_n_ctx(ctx_p)
        self.n_batch: int = ll.llama_n_batch(ctx_p)
        self.placement = "CPU"  # where its layers went (Model.load says)
        self.repack = RepackDecision(True)  # llama.cpp's extra buffer types (Model.load says)
        self.n_cached = 0  # positions 0..n_cached-1 are in the KV cache
        # the most logit rows one decode has asked for: llama.cpp's logits buffer has grown
        # to hold them (a decode asking more grows it again, a one-time cost)
        self.most_logit_rows = 0
        # called after each llama_decode (every prefill chunk, every round): a watchdog in
        # another process learns that the model is not stuck inside C (lsd serve)
        self.on_decoded: Callable[[], None] | None = None
        self._cached_tokens = np.zeros(self.n_ctx, np.int32)  # the token at each position
        self.supports_truncate = not (ll.llama_model_is_recurrent(model_p)
                                      or ll.llama_model_is_hybrid(model_p))
        self._batch = ll.llama_batch_init(self.n_batch, 0, 1)
        self._batch_tokens = np.ctypeslib.as_array(self._batch.token, shape=(self.n_batch,))
        self._batch_pos = np.ctypeslib.as_array(self._batch.pos, shape=(self.n_batch,))
        self._batch_out = np.ctypeslib.as_array(self._batch.logits, shape=(self.n_batch,))
        np.ctypeslib.as_array(self._batch.n_seq_id, shape=(self.n_batch,))[:] = 1
        for i in range(self.n_batch):
            self._batch.seq_id[i][0] = 0
        self._positions = np.arange(self.n_batch, dtype=np.int32)
        self._logits = LogitsView(ctx_p, self.n_batch, self.n_vocab)

    @classmethod
    def load(cls, path: str | os.PathLike, opts: LoadOptions | None = None) -> Model:
        """Load a GGUF file; raise ModelLoadError with llama.cpp's reason when it fails."""
        opts = opts or LoadOptions()
        path = Path(path).expanduser()
        _check_gguf_file(path)
        check_gguf(path)  # damage llama.cpp would abort the process on
        sink = _install_log_sink(opts.verbose)
        sink.recent.clear()
        params, placement = _model_params(opts)
        model_p = ll.llama_model_load_from_file(os.fsencode(path), params)
        if not model_p:
            reason = "; ".join(sink.recent) or "llama.cpp gave no reason"
            raise ModelLoadError(f"cannot load {path.name}: {reason}")
        ctx_p = ll.llama_init_from_model(model_p, _context_params(opts))
        if not ctx_p:
            ll.llama_model_free(model_p)
            reason = "; ".join(sink.recent) or "out of memory?"
            raise ModelLoadError(f"cannot create a context for {path.name}: {reason}")
        model = cls(path, model_p, ctx_p, opts)
        model.placement = placement.describe(ll.llama_model_n_layer(model_p))
        model.repack = repack_decision(opts.no_repack, build_identity())
        return model

    def chat_template(self) -> str | None:
        """The GGUF's default chat template (Jinja text), if it ships one."""
        raw = ll.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    @property
    def n_params(self) -> int:
        return int(ll.llama_model_n_params(self._model))

    # --- evaluation --------------------------------------------------------------------------

    def decode(self, tokens: Sequence[int] | np.ndarray, start_pos: int,
               n_logit_rows: int) -> np.ndarray:
        """Evaluate `tokens` at positions start_pos.. and return logits of the last rows.

        Returns a zero-copy view float32[n_logit_rows, n_vocab] into llama.cpp's output buffer;
        row i predicts the token after tokens[len(tokens) - n_logit_rows + i]. The view is
        overwritten by the next decode. Inputs longer than n_batch are split into chunks.
        """
        n = len(tokens)
        if start_pos != self.n_cached:
            raise RuntimeError(f"decode at position {start_pos} but {self.n_cached} are cached")
        if start_pos + n > self.n_ctx:
            raise ContextOverflowError(
                f"{start_pos + n} tokens do not fit the context of {self.n_ctx}")
        if n_logit_rows > min(self.n_batch, n):
            raise ValueError(f"{n_logit_rows} logit rows for {n} tokens (n_batch "
                             f"{self.n_batch})")
        if n == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        tokens = np.asarray(tokens, dtype=np.int32)
        # The last chunk holds every requested row (n_logit_rows <= n_batch); earlier chunks
        # fill the cache without outputs.
        last_start = max(0, n - self.n_batch)
        for lo in range(0, last_start, self.n_batch):
            hi = min(lo + self.n_batch, last_start)
            self._decode_chunk(tokens[lo:hi], start_pos + lo, 0)
        self._decode_chunk(tokens[last_start:], start_pos + last_start, n_logit_rows)
        self.most_logit_rows = max(self.most_logit_rows, n_logit_rows)
        if n_logit_rows == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        logits = self._logits.rows(n_logit_rows)
        check_finite(logits, self.path.name)
        return logits

    def _decode_chunk(self, tokens: np.ndarray, start_pos: int, n_out: int) -> None:
        # Everything is written before llama_decode: what runs after it finds the CPU caches
        # full of weights, and each Python object touched there costs a miss.
        n = len(tokens)
        self._batch_tokens[:n] = tokens
        np.add(self._positions[:n], start_pos, out=self._batch_pos[:n])
        self._batch_out[:n - n_out] = 0
        self._batch_out[n - n_out:n] = 1
        self._batch.n_tokens = n
        self._cached_tokens[start_pos:start_pos + n] = tokens  # read only below n_cached
        rc = ll.llama_decode(self._ctx, self._batch)
        if rc != 0:
            self.truncate(start_pos)  # a failed decode may leave part of the batch cached
            raise RuntimeError(f"llama_decode failed with code {rc} at position {start_pos}")
        self.n_cached = start_pos + n
        if self.on_decoded is not None:
            self.on_decoded()

    @property
    def cached_tokens(self) -> np.ndarray:
        """int32[n_cached]: the tokens whose keys and values are in the cache (a view)."""
        return self._cached_tokens[:self.n_cached]

    def reuse_prefix(self, tokens: np.ndarray, limit: int) -> int:
        """Truncate the cache to its longest common prefix with `tokens` (at most `limit`
        positions) and return that length: what a new request need not evaluate again."""
        cached = self.cached_tokens
        m = min(len(cached), len(tokens), limit)
        differ = np.flatnonzero(cached[:m] != tokens[:m])
        keep = int(differ[0]) if len(differ) else m
        if not self.supports_truncate and keep < self.n_cached:
            keep = 0  # a recurrent state cannot be rewound, only dropped whole
        self.truncate(keep)
        return keep

    def truncate(self, n: int) -> None:
        """Remove every cached position >= n (always asks llama.cpp, so that a cache left ahead
        of `n_cached` by an interrupted decode is cleaned too)."""
        if not ll.llama_memory_seq_rm(self._memory, 0, n, -1):
            raise IncompatibleModelsError(f"{recurrent_message(self)} (positions {n}..)")
        self.n_cached = min(self.n_cached, n)

    def state_nbytes(self) -> int:
        """Bytes `save_state` would copy now (llama.cpp's exact size)."""
        return int(ll.llama_state_seq_get_size(self._ctx, 0))

    def save_state(self) -> SeqState:
        """A copy of the cache (keys and values of every cached position, sequence 0) and of
        the tokens it holds, for `restore_state`: a conversation set aside in RAM."""
        size = ll.llama_state_seq_get_size(self._ctx, 0)
        data = np.empty(size, np.uint8)
        written = ll.llama_state_seq_get_data(
            self._ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size, 0)
        if written != size:
            raise RuntimeError(f"{self.path.name}: llama.cpp saved {written} of {size} bytes")
        return SeqState(self.cached_tokens.copy(), data)

    def restore_state(self, state: SeqState) -> None:
        """Replace the cache with one `save_state` took from this model (llama.cpp drops the
        sequence's old cells first)."""
        data = state.data
        read = ll.llama_state_seq_set_data(
            self._ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), len(data), 0)
        if read != len(data):
            self.truncate(0)  # what a failed read leaves is nothing to rely on
            raise RuntimeError(f"{self.path.name}: llama.cpp restored {read} of {len(data)} "
                               "bytes of a saved state")
        n = len(state.tokens)
        self._cached_tokens[:n] = state.tokens
        self.n_cached = n

    def close(self) -> None:
        """Free the context, batch and model (idempotent)."""
        if self._ctx:
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit llama_cpp may be gone
            self.close()


@dataclass(frozen=True)
class Placement:
    """Where llama.cpp was told to put a model's layers."""

    n_gpu_layers: int  # llama.cpp's value: -1 = all
    devices: tuple[str, ...]  # the devices that take layers, by name

    def describe(self, n_layer: int) -> str:
        """One line: "CPU", or how many layers go to which devices."""
        if self.n_gpu_layers == 0 or not self.devices:
            return "CPU"
        n_blocks = n_layer + 1  # llama.cpp counts the output layer as one more
        layers = n_blocks if self.n_gpu_layers < 0 else min(self.n_gpu_layers, n_blocks)
        where = ", ".join(self.devices)
        rest = "" if layers == n_blocks else f" (the other {n_blocks - layers} on the CPU)"
        return f"{layers}/{n_blocks} layers on {where}{rest}"


def _model_params(opts: LoadOptions):
    """llama_model_params for `opts`, and where that puts the layers."""
    params = ll.llama_model_default_params()
    n_gpu_layers, devices = opts.n_gpu_layers, ()
    if opts.devices is not None or not isinstance(n_gpu_layers, int) or n_gpu_layers != 0:
        available = list_devices()
        allowed = select_devices(opts.devices, available)
        n_gpu_layers = offload_layers(n_gpu_layers, allowed, available)
        pool = available if allowed is None else allowed
        devices = tuple(d.name for d in pool if d.takes_layers)
        array = device_array(allowed)
        if array is not None:
            params.devices = ctypes.cast(array, ctypes.c_void_p)
            params._devices_ref = array  # keep the array alive as long as params
    params.n_gpu_layers = n_gpu_layers
    params.use_extra_bufts = repack_decision(opts.no_repack, build_identity()).use_extra_bufts
    params.main_gpu = opts.main_gpu
    params.split_mode = SPLIT_MODE_IDS[opts.split_mode]
    if opts.tensor_split:
        # llama.cpp reads llama_max_devices() floats from this pointer: pad with zeros
        n_max = ll.llama_max_devices()
        check(len(opts.tensor_split) <= n_max, "tensor_split",
              f"{len(opts.tensor_split)} values (this build splits over {n_max} at most)")
        arr = (ctypes.c_float * n_max)(*opts.tensor_split)
        params.tensor_split = ctypes.cast(arr, ctypes.POINTER(ctypes.c_float))
        params._tensor_split_ref = arr  # keep the array alive as long as params
    return params, Placement(n_gpu_layers, devices)


def _context_params(opts: LoadOptions):
    params = ll.llama_context_default_params()
    threads = opts.n_threads or physical_cores()
    params.n_ctx = opts.n_ctx
    params.n_batch = opts.n_batch
    params.n_ubatch = opts.n_batch
    params.n_seq_max = 1
    params.n_threads = threads
    params.n_threads_batch = threads
    params.no_perf = True
    return params


def build_identity() -> str:
    """This llama.cpp build: llama-cpp-python's version and the backends and CPU features
    llama.cpp reports (learned timings are only valid for the same build)."""
    info = ll.llama_print_system_info()
    return f"{ll.__version__} {info.decode(errors='replace') if info else ''}".strip()
