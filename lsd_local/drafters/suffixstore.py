"""SuffixIndex: the suffix index as an object (kernels/suffix.py holds its kernels), and its
file: what it holds survives the process under lsd's cache dir, one file per vocabulary.

The file holds user text (past prompts' ends and answers, as token ids): it is created mode
0600, written whole to a temporary file and renamed into place (two processes saving at
once: the last one wins, neither corrupts it), ignored with a notice when it cannot be read
or is damaged, never loaded or written with LSD_NO_STATE / `--fresh`, and deleted by
`lsd rm --cache`.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import numpy as np

from ..config import RUN_CAP, SUFFIX_PROMPT_TAIL, SUFFIX_TOKENS, lsd_cache_dir
from ..kernels.jit import kernel_or
from ..kernels.suffix import HASH_N, MAX_CANDIDATES, SEP, index_add, index_find, masked_hashes

MAGIC = b"lsd-suffix-1\n"  # then: the vocabulary key (ASCII, one line), int32 tokens


def suffix_dir() -> Path:
    """Where suffix indexes are kept between processes."""
    return lsd_cache_dir() / "suffix"


class SuffixIndex:
    """Past requests' text, searchable by the end of the current context. `capacity`: tokens
    kept (the oldest go first); `vocab_key`: the vocabulary its tokens belong to. Engines in
    several threads may share one (its kernels release the GIL: a lock keeps it whole)."""

    def __init__(self, capacity: int = SUFFIX_TOKENS, vocab_key: str = "") -> None:
        self.capacity = max(int(capacity), 2 * HASH_N)
        self.vocab_key = vocab_key
        self.ring = np.zeros(self.capacity, np.int32)
        self.chain = np.full(self.capacity, -1, np.int64)
        self.table = np.full(1 << (self.capacity - 1).bit_length(), -1, np.int64)
        self.total = 0  # tokens ever added (SEPs included)
        self.changed = False  # added to since loaded or saved
        self.path: Path | None = None  # where it is kept between processes (None: nowhere)
        self._out = np.zeros(64, np.int32)
        self._lock = threading.RLock()

    @property
    def nbytes(self) -> int:
        """Memory held, fixed by the capacity."""
        return self.ring.nbytes + self.chain.nbytes + self.table.nbytes

    @property
    def n_tokens(self) -> int:
        """Tokens held now (at most the capacity)."""
        return min(self.total, self.capacity)

    def add(self, tokens: np.ndarray) -> None:
        """Keep a document (int32[m]): later queries may continue from any part of it."""
        doc = np.ascontiguousarray(tokens, np.int32)
        if len(doc) >= self.capacity:
            doc = doc[-(self.capacity - 1):]
        add = kernel_or(index_add, index_add.py_func)  # (the same code, slower)
        with self._lock:
            self.total = int(add(self.ring, self.chain, self.table, self.total, doc, HASH_N))
            self.changed = True

    def add_request(self, history: np.ndarray, n_prompt: int) -> None:
        """A finished request: its answer with the last SUFFIX_PROMPT_TAIL prompt tokens
        (where answers start: a chat template's assistant header, a tool-call opener)."""
        if len(history) > n_prompt:
            self.add(history[max(0, n_prompt - SUFFIX_PROMPT_TAIL):])

    def find(self, context: np.ndarray, k: int, min_n: int) -> tuple[np.ndarray, int]:
        """(int32[<= k] what followed the longest-running match of the context's end, its
        run); nothing for a match shorter than min_n (at least HASH_N) tokens."""
        if k <= 0 or self.total == 0:
            return np.zeros(0, np.int32), 0
        find = kernel_or(index_find, index_find.py_func)
        context = np.ascontiguousarray(context, np.int32)
        with self._lock:
            if len(self._out) < k:
                self._out = np.zeros(k, np.int32)
            m, run = find(self.ring, self.chain, self.table, self.total, context, HASH_N,
                          max(min_n, HASH_N), k, RUN_CAP, MAX_CANDIDATES, self._out)
            return self._out[:int(m)].copy(), int(run)

    def clear(self) -> None:
        """Forget everything (the file, if any, stays until saved or removed)."""
        with self._lock:
            self.chain.fill(-1)
            self.table.fill(-1)
            self.total = 0
            self.changed = True

    def live_tokens(self) -> np.ndarray:
        """int32[n_tokens]: what is held, oldest first (SEP between documents)."""
        with self._lock:
            start = self.total - self.n_tokens
            return np.roll(self.ring, -(start % self.capacity))[:self.n_tokens].copy() \
                if self.total > self.capacity else self.ring[:self.total].copy()

    def save(self, path: Path) -> None:
        """Write what is held to `path` (0600, atomically; OSError when it cannot)."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".suffix-", dir=path.parent)  # (mode 0600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + self.vocab_key.encode("ascii") + b"\n")
                f.write(self.live_tokens().astype("<i4").tobytes())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        self.changed = False

    def load(self, path: Path, n_vocab: int, notify=None) -> bool:
        """Add what `path` holds (True), or nothing when it is missing; a damaged file, or
        one of another vocabulary, is ignored and `notify` hears why (False)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as exc:
            return _ignored(notify, path, f"it cannot be read ({exc.strerror})")
        tokens = _parse(data, self.vocab_key, n_vocab)
        if isinstance(tokens, str):
            return _ignored(notify, path, tokens)
        self.add_all(_documents(tokens))
        self.changed = False
        return True

    def add_all(self, docs: list[np.ndarray]) -> None:
        """add() each document (int32[m] each), at once when the index is empty and they
        fit: a file's million tokens through add()'s Python path (numba's kernels not
        loaded yet, as after an upgrade) would take ~10 s."""
        stream = np.concatenate([np.r_[SEP, doc] for doc in docs]).astype(np.int32) \
            if docs else np.zeros(0, np.int32)
        with self._lock:
            if self.total or len(stream) > self.capacity or not len(stream):
                for doc in docs:
                    self.add(doc)
            else:
                self._build(stream)

    def _build(self, stream: np.ndarray) -> None:
        """Fill the empty index with stream (int32[n <= capacity]: SEP, document, SEP, ...)."""
        n = len(stream)
        self.ring[:n] = stream
        self.chain[:n] = -1
        # the positions whose last HASH_N tokens lie in one document, and their hashes
        ends = np.arange(HASH_N - 1, n)
        windows = np.stack([stream[ends - HASH_N + 1 + i] for i in range(HASH_N)], axis=1)
        whole = (windows != SEP).all(axis=1)
        ends = ends[whole]
        hashes = masked_hashes(windows[whole].astype(np.int64), len(self.table) - 1)
        order = np.lexsort((ends, hashes))  # by hash, then position
        ends, hashes = ends[order], hashes[order]
        same = hashes[1:] == hashes[:-1]  # each position chains to the one before it
        self.chain[ends[1:][same]] = ends[:-1][same]
        last = np.r_[~same, True]
        self.table[hashes[last]] = ends[last]
        self.total = n
        self.changed = True


def _parse(data: bytes, vocab_key: str, n_vocab: int) -> np.ndarray | str:
    """The file's tokens, or why they cannot be used."""
    header = MAGIC + vocab_key.encode("ascii") + b"\n"
    if not data.startswith(MAGIC):
        return "it is not a suffix index (or is damaged)"
    if not data.startswith(header):
        return "it belongs to another vocabulary"
    body = data[len(header):]
    if len(body) % 4:
        return "it is damaged (cut short)"
    tokens = np.frombuffer(body, "<i4").astype(np.int32)
    if len(tokens) and (tokens.max() >= n_vocab or tokens.min() < SEP):
        return "it is damaged (tokens outside the vocabulary)"
    return tokens


def _documents(tokens: np.ndarray) -> list[np.ndarray]:
    """The documents between SEPs (a first one cut by the ring's wrap included)."""
    pieces = np.split(tokens, np.flatnonzero(tokens == SEP))
    return [doc for doc in (piece[piece != SEP] for piece in pieces) if len(doc)]


def _ignored(notify, path: Path, why: str) -> bool:
    if notify is not None:
        notify(f"ignoring the suffix index {path}: {why}")
    return False
