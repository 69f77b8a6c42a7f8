"""Prompt lookup: the numba kernel and its numpy version (the fallback while kernels load)
equal the obvious definition; hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_local.drafters import LookupDrafter, lookup_match, lookup_reference
from lsd_local.errors import ParameterError


def lookup_obvious(tokens: list[int], max_ngram: int, min_ngram: int,
                   k: int) -> tuple[list[int], int]:
    """The definition in plain Python: for n from max_ngram down, the latest earlier start
    whose n tokens equal the last n; what follows it, up to k tokens."""
    n = len(tokens)
    for size in range(min(max_ngram, n - 1), min_ngram - 1, -1):
        starts = [s for s in range(n - size) if tokens[s:s + size] == tokens[n - size:]]
        if starts:
            start = max(starts) + size
            return tokens[start:start + k], size
    return [], 0


def run_kernel(tokens, max_ngram, min_ngram, k):
    out = np.zeros(max(k, 1), np.int32)
    m = lookup_match(np.asarray(tokens, np.int32), max_ngram, min_ngram, k, out)[0]
    return out[:m].tolist()


def test_most_recent_occurrence_wins():
    #            0  1  2  3  4  5  6  7  8  9
    tokens = [1, 2, 3, 9, 1, 2, 4, 5, 1, 2]
    assert run_kernel(tokens, 2, 1, 3) == [4, 5, 1]


def test_longer_ngram_preferred():
    tokens = [7, 2, 8, 5, 2, 9, 9, 5, 2]  # "5 2" occurs at 3; "2" alone most recently at 4
    assert run_kernel(tokens, 2, 1, 2) == [9, 9]
    assert run_kernel(tokens, 1, 1, 2) == [9, 9]  # most recent "2" is at 4 -> 9 9


def test_no_match_and_short_history():
    assert run_kernel([1, 2, 3], 3, 1, 4) == []
    assert run_kernel([5], 3, 1, 4) == []
    assert run_kernel([], 3, 1, 4) == []


def test_continuation_may_run_into_the_tail():
    assert run_kernel([4, 4, 4], 2, 1, 5) == [4]


@settings(max_examples=400, deadline=None)
@given(tokens=st.lists(st.integers(0, 6), min_size=0, max_size=80),
       max_ngram=st.integers(1, 5), k=st.integers(1, 64), data=st.data())
def test_kernel_matches_reference(tokens, max_ngram, k, data):
    min_ngram = data.draw(st.integers(1, max_ngram))
    arr = np.array(tokens, np.int32)
    expected, expected_n = lookup_reference(arr, max_ngram, min_ngram, k)
    assert (expected.tolist(), expected_n) == lookup_obvious(tokens, max_ngram, min_ngram, k)
    got = run_kernel(arr, max_ngram, min_ngram, k)
    assert got == expected.tolist()
    assert len(got) <= k
    out = np.zeros(max(k, 1), np.int32)
    m, n = lookup_match(arr, max_ngram, min_ngram, k, out)
    assert (out[:m].tolist(), n) == (expected.tolist(), expected_n)
    assert (n == 0) == (m == 0)  # a match always has a continuation


def test_drafter_returns_draft_and_validates():
    drafter = LookupDrafter(max_ngram=3, min_ngram=1)
    draft = drafter.propose(np.array([1, 2, 3, 1, 2], np.int32), 4)
    assert draft.tokens.tolist() == [3, 1, 2]
    assert draft.probs is None
    assert drafter.last_match == 2  # "1 2" matched; the 3-gram "3 1 2" did not
    assert len(drafter.propose(np.array([1, 2, 3, 4], np.int32), 2)) == 0
    assert drafter.last_match == 0
    assert len(drafter.propose(np.array([1, 2], np.int32), 0)) == 0
    with pytest.raises(ParameterError, match="min_ngram"):
        LookupDrafter(max_ngram=2, min_ngram=3)
