"""Prompt lookup decoding (Saxena 2023): propose what followed the most recent earlier
occurrence of the last n tokens, trying n = max_ngram down to min_ngram."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..config import MAX_NGRAM, MIN_NGRAM, SamplerSettings
from ..errors import check
from ..jit import kernels_ready
from ..verify.constrain import allowed_prefix
from .base import EMPTY_DRAFT, Draft, Drafter


@njit(cache=True, nogil=True)
def lookup_match(tokens, max_ngram, min_ngram, k, out):
    """tokens: int32[n] (prompt + output), out: int32[>= k] -> (tokens set in out, the
    matched n-gram's n; 0 = none).
    O(n * max_ngram) at worst; scans backwards so the most recent occurrence wins."""
    n = tokens.shape[0]
    for size in range(min(max_ngram, n - 1), min_ngram - 1, -1):
        tail = n - size
        for start in range(tail - 1, -1, -1):
            same = True
            for i in range(size):
                if tokens[start + i] != tokens[tail + i]:
                    same = False
                    break
            if same:
                m = min(k, n - (start + size))
                for i in range(m):
                    out[i] = tokens[start + size + i]
                return m, size
    return 0, 0


def lookup_reference(tokens: np.ndarray, max_ngram: int, min_ngram: int,
                     k: int) -> tuple[np.ndarray, int]:
    """numpy version of lookup_match (tests; the fallback until kernels load): compare the
    last n tokens with every earlier window of n at once, take the latest match.
    tokens: int32[n] -> (continuation int32[<= k], the matched n-gram's n or 0)."""
    tokens = np.asarray(tokens, np.int32)
    n = len(tokens)
    for size in range(min(max_ngram, n - 1), min_ngram - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:n - 1], size)
        starts = np.flatnonzero((windows == tokens[n - size:]).all(axis=1))
        if len(starts):
            start = int(starts[-1]) + size
            return tokens[start:start + k].copy(), size
    return np.zeros(0, np.int32), 0


def lookup_any(tokens: np.ndarray, max_ngram: int, min_ngram: int, k: int,
               out: np.ndarray) -> tuple[int, int]:
    """lookup_match when the kernels are loaded, else its numpy version (same answer).
    tokens: int32[n], out: int32[>= k] -> (tokens set in out, matched n; 0 = none)."""
    if kernels_ready():
        m, size = lookup_match(tokens, max_ngram, min_ngram, k, out)
        return int(m), int(size)
    found, size = lookup_reference(tokens, max_ngram, min_ngram, k)
    out[:len(found)] = found
    return len(found), size


class LookupDrafter(Drafter):
    """Drafts from the context itself; no model, no probabilities (p_d is one-hot)."""

    name = "lookup"

    def __init__(self, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> None:
        check(max_ngram >= 1, "max_ngram", f"{max_ngram} (must be >= 1)")
        check(1 <= min_ngram <= max_ngram, "min_ngram", f"{min_ngram} (must be 1..max_ngram)")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._out = np.zeros(64, np.int32)
        self.last_match = 0  # n of the n-gram behind the last proposal (0: none)

    def propose(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                rng: np.random.Generator | None = None, grammar=None) -> Draft:
        self.last_match = 0
        if k <= 0:
            return EMPTY_DRAFT
        if len(self._out) < k:
            self._out = np.zeros(k, np.int32)
        m, self.last_match = lookup_any(history, self.max_ngram, self.min_ngram, k,
                                        self._out)
        if grammar is not None and m:  # a shorter block costs less to verify
            m = allowed_prefix(grammar, self._out[:m])
        return Draft(self._out[:m].copy())
