"""Prompt lookup: the numba kernel equals the obvious reference; hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_local.drafters import LookupDrafter, lookup_kernel, lookup_reference
from lsd_local.drafters.lookup import lookup_match
from lsd_local.errors import ParameterError


def run_kernel(tokens, max_ngram, min_ngram, k):
    out = np.zeros(max(k, 1), np.int32)
    m = lookup_kernel(np.asarray(tokens, np.int32), max_ngram, min_ngram, k, out)
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
