"""Prompt lookup decoding (Saxena 2023): propose what followed an earlier occurrence of the
last n tokens, trying n = max_ngram down to min_ngram; of several, the one whose copy has run
longest (the most recent among equals), and say how long (the auto drafter learns by it)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..config import MAX_NGRAM, MIN_NGRAM, RUN_CAP, SamplerSettings
from ..errors import check
from ..kernels.jit import kernels_ready
from ..verify.constrain import allowed_prefix
from .base import EMPTY_DRAFT, Draft, Drafter

TEXT_BYTES_PER_RUN = 4  # a text match's length in bytes -> a run in tokens, roughly


@njit(cache=True, nogil=True)
def lookup_match(tokens, max_ngram, min_ngram, k, run_cap, out):
    """tokens: int32[n] (prompt + output), out: int32[>= k] -> (tokens set in out, the
    matched n-gram's n; 0 = none, the copy's run).
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
            return m, size, best_run
    return 0, 0, 0


def lookup_reference(tokens: np.ndarray, max_ngram: int, min_ngram: int, k: int,
                     run_cap: int = RUN_CAP) -> tuple[np.ndarray, int, int]:
    """numpy version of lookup_match (tests; the fallback until kernels load): compare the
    last n tokens with every earlier window of n at once, take the longest-running match.
    tokens: int32[n] -> (continuation int32[<= k], the matched n-gram's n or 0, the run)."""
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
            return tokens[best_end:best_end + k].copy(), size, best_run
    return np.zeros(0, np.int32), 0, 0


def lookup_any(tokens: np.ndarray, max_ngram: int, min_ngram: int, k: int,
               out: np.ndarray) -> tuple[int, int, int]:
    """lookup_match when the kernels are loaded, else its numpy version (same answer).
    tokens: int32[n], out: int32[>= k] -> (tokens set in out, matched n; 0 = none, run)."""
    if kernels_ready():
        m, size, run = lookup_match(tokens, max_ngram, min_ngram, k, RUN_CAP, out)
        return int(m), int(size), int(run)
    found, size, run = lookup_reference(tokens, max_ngram, min_ngram, k)
    out[:len(found)] = found
    return len(found), size, run


class LookupDrafter(Drafter):
    """Drafts from the context itself; no model, no probabilities (p_d is one-hot)."""

    name = "lookup"

    def __init__(self, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM,
                 index=None, text=None) -> None:
        check(max_ngram >= 1, "max_ngram", f"{max_ngram} (must be >= 1)")
        check(1 <= min_ngram <= max_ngram, "min_ngram", f"{min_ngram} (must be 1..max_ngram)")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.index = index  # suffixstore.SuffixIndex over past requests, or None
        self.text = text  # textlookup.TextLookup (where no token n-gram matches), or None
        self._out = np.zeros(64, np.int32)

    def propose(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                rng: np.random.Generator | None = None, grammar=None) -> Draft:
        if k <= 0:
            return EMPTY_DRAFT
        if len(self._out) < k:
            self._out = np.zeros(k, np.int32)
        m, _, run = lookup_any(history, self.max_ngram, self.min_ngram, k, self._out)
        tokens, source = self._out[:m], ""
        if self.index is not None:  # past requests: taken when their match runs longer
            found, found_run = self.index.find(history, k, self.min_ngram)
            if len(found) and found_run > run:
                tokens, run, source = found, found_run, "suffix"
        if not len(tokens) and self.text is not None:  # the same text as other tokens?
            tokens, size = self.text.find(history, k)
            run, source = size // TEXT_BYTES_PER_RUN, "text"
        m = len(tokens)
        if grammar is not None and m:  # a shorter block costs less to verify
            m = allowed_prefix(grammar, tokens)
        return Draft(tokens[:m].copy(), run=run, source=source)

    def end(self, history: np.ndarray, n_prompt: int | None = None) -> None:
        """Keep the request's answer (with its prompt's end) in the suffix index."""
        if self.index is not None and n_prompt is not None:
            self.index.add_request(history, n_prompt)

    def use_suffix_index(self, index) -> None:
        self.index = index
