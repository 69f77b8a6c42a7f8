"""Prompt lookup's kernel (drafters/lookup.py): the continuation of the earlier occurrence
of the last n tokens whose copy has run longest, with its numpy reference. Each also says
where that continuation was found (its origin), so that a match in the text being written
can be told from one in the prompt (the auto drafter prices them apart)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..config import RUN_CAP
from .jit import kernel_or


@njit(cache=True, nogil=True)
def lookup_match(tokens, max_ngram, min_ngram, k, run_cap, out):
    """tokens: int32[n] (prompt + output), out: int32[>= k] -> (tokens set in out, the
    matched n-gram's n; 0 = none, the copy's run, the origin: the position in tokens of the
    first one proposed; -1 = none).
    For n from max_ngram down, among the earlier occurrences of the last n tokens the one
    whose copy has run longest: the n-gram extended backwards while the text before it
    equals the text before the occurrence, up to max(n, run_cap) tokens; ties go to the most
    recent. O(len * max_ngram + occurrences * run_cap) at worst; stops early at a full run."""
    n = tokens.shape[0]
    for size in range(min(max_ngram, n - 1), min_ngram - 1, -1):
        tail = n - size
        best_end = -1
        best_run = -1
        for start in range(tail - 1, -1, -1):
            same = True
            for i in range(size):
                if tokens[start + i] != tokens[tail + i]:
                    same = False
                    break
            if not same:
                continue
            end = start + size  # the match point: what follows is proposed
            run = size
            while run < run_cap and end > run and tokens[end - run - 1] == tokens[n - run - 1]:
                run += 1
            if run > best_run:
                best_end = end
                best_run = run
                if run >= run_cap or run == end:
                    break  # no earlier occurrence can run longer
        if best_end >= 0:
            m = min(k, n - best_end)
            for i in range(m):
                out[i] = tokens[best_end + i]
            return m, size, best_run, best_end
    return 0, 0, 0, -1


def lookup_reference(tokens: np.ndarray, max_ngram: int, min_ngram: int, k: int,
                     run_cap: int = RUN_CAP) -> tuple[np.ndarray, int, int, int]:
    """numpy version of lookup_match (tests; the fallback until kernels load): compare the
    last n tokens with every earlier window of n at once, take the longest-running match.
    tokens: int32[n] -> (continuation int32[<= k], the matched n-gram's n or 0, the run,
    the continuation's origin in tokens or -1)."""
    tokens = np.asarray(tokens, np.int32)
    n = len(tokens)
    for size in range(min(max_ngram, n - 1), min_ngram - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:n - 1], size)
        starts = np.flatnonzero((windows == tokens[n - size:]).all(axis=1))
        if len(starts):
            best_end, best_run = 0, -1
            for start in starts[::-1]:  # the most recent first: it wins ties
                source_end = int(start) + size  # the match point: what follows is proposed
                span = max(size, min(run_cap, source_end))  # a run never exceeds its source
                before = tokens[source_end - span:source_end][::-1] != tokens[n - span:][::-1]
                run = int(np.argmax(before)) if before.any() else span
                if run > best_run:
                    best_end, best_run = source_end, run
                    if run >= run_cap or run == source_end:
                        break  # no earlier occurrence can run longer
            return tokens[best_end:best_end + k].copy(), size, best_run, best_end
    return np.zeros(0, np.int32), 0, 0, -1


def _lookup_kernel(tokens: np.ndarray, max_ngram: int, min_ngram: int, k: int,
                   out: np.ndarray) -> tuple[int, int, int, int]:
    m, size, run, origin = lookup_match(tokens, max_ngram, min_ngram, k, RUN_CAP, out)
    return int(m), int(size), int(run), int(origin)


def _lookup_numpy(tokens: np.ndarray, max_ngram: int, min_ngram: int, k: int,
                  out: np.ndarray) -> tuple[int, int, int, int]:
    found, size, run, origin = lookup_reference(tokens, max_ngram, min_ngram, k)
    out[:len(found)] = found
    return len(found), size, run, origin


def lookup_any(tokens: np.ndarray, max_ngram: int, min_ngram: int, k: int,
               out: np.ndarray) -> tuple[int, int, int, int]:
    """lookup_match when the kernels are loaded, else its numpy version (same answer).
    tokens: int32[n], out: int32[>= k] -> (tokens set in out, matched n; 0 = none, run,
    origin; -1 = none)."""
    return kernel_or(_lookup_kernel, _lookup_numpy)(tokens, max_ngram, min_ngram, k, out)
