"""Prompt lookup: the numba kernel and its numpy version (the fallback while kernels load)
equal the obvious definition (continuation, matched n-gram, run); hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_local.config import RUN_CAP
from lsd_local.drafters import LookupDrafter, lookup_match, lookup_reference
from lsd_local.errors import ParameterError


def lookup_obvious(tokens: list[int], max_ngram: int, min_ngram: int, k: int,
                   run_cap: int = RUN_CAP) -> tuple[list[int], int, int, int]:
    """The definition in plain Python: for n from max_ngram down, the earlier occurrences of
    the last n tokens; each one's run is how many tokens before its end equal the tokens
    before the end of the text (at most max(n, run_cap)); the longest run wins, the latest
    occurrence among equals. What follows it, up to k tokens; its n; its run; where what
    follows it starts (-1: no match)."""
    n = len(tokens)

    def run(end: int, size: int) -> int:
        length = 0
        while length < end and tokens[end - length - 1] == tokens[n - length - 1]:
            length += 1
        return min(length, max(size, run_cap))

    for size in range(min(max_ngram, n - 1), min_ngram - 1, -1):
        ends = [s + size for s in range(n - size) if tokens[s:s + size] == tokens[n - size:]]
        if ends:
            best = max(ends, key=lambda end: (run(end, size), end))  # noqa: B023 - used here
            return tokens[best:best + k], size, run(best, size), best
    return [], 0, 0, -1


def run_kernel(tokens, max_ngram, min_ngram, k, run_cap=RUN_CAP):
    out = np.zeros(max(k, 1), np.int32)
    m = lookup_match(np.asarray(tokens, np.int32), max_ngram, min_ngram, k, run_cap, out)[0]
    return out[:m].tolist()


def test_most_recent_occurrence_wins():
    #            0  1  2  3  4  5  6  7  8  9
    tokens = [1, 2, 3, 9, 1, 2, 4, 5, 1, 2]
    assert run_kernel(tokens, 2, 1, 3) == [4, 5, 1]


def test_longer_ngram_preferred():
    tokens = [7, 2, 8, 5, 2, 9, 9, 5, 2]  # "5 2" occurs at 3; "2" alone most recently at 4
    assert run_kernel(tokens, 2, 1, 2) == [9, 9]
    # n = 1: the "2" at 4 follows a 5 as the last one does (run 2), the one at 1 does not
    assert run_kernel(tokens, 1, 1, 2) == [9, 9]


def test_no_match_and_short_history():
    assert run_kernel([1, 2, 3], 3, 1, 4) == []
    assert run_kernel([5], 3, 1, 4) == []
    assert run_kernel([], 3, 1, 4) == []


def test_continuation_may_run_into_the_tail():
    assert run_kernel([4, 4, 4], 2, 1, 5) == [4]


def test_the_occurrence_whose_copy_has_run_longest_wins():
    """The text copies 1 2 3 4 5 6 7 (from position 0); "5 6 7" also occurs later after
    other tokens. The later occurrence only matches the 3-gram, the first one continues the
    copy: its continuation is proposed, with a run of 7."""
    copy = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    tokens = copy + [0, 5, 6, 7, 30, 31] + [0] + copy[:7]
    out = np.zeros(4, np.int32)
    m, size, run, origin = lookup_match(np.asarray(tokens, np.int32), 3, 1, 4, RUN_CAP, out)
    assert (out[:m].tolist(), size, run, origin) == ([8, 9, 0, 5], 3, 7, 7)
    found, size, run, origin = lookup_reference(np.asarray(tokens, np.int32), 3, 1, 4)
    assert (found.tolist(), size, run, origin) == ([8, 9, 0, 5], 3, 7, 7)


def test_the_run_is_capped_and_never_shorter_than_the_match():
    tokens = np.asarray(list(range(40)) + list(range(40)), np.int32)  # a 40-token copy
    out = np.zeros(4, np.int32)
    assert lookup_match(tokens, 3, 1, 4, 256, out)[1:3] == (3, 40)
    assert lookup_match(tokens, 3, 1, 4, 10, out)[1:3] == (3, 10)
    assert lookup_match(tokens, 3, 1, 4, 2, out)[1:3] == (3, 3)  # the n-gram itself
    assert lookup_reference(tokens, 3, 1, 4, 10)[1:3] == (3, 10)


@settings(max_examples=600, deadline=None)
@given(tokens=st.lists(st.integers(0, 4), min_size=0, max_size=90),
       max_ngram=st.integers(1, 5), k=st.integers(1, 64), run_cap=st.integers(1, 40),
       data=st.data())
def test_kernel_matches_reference(tokens, max_ngram, k, run_cap, data):
    min_ngram = data.draw(st.integers(1, max_ngram))
    arr = np.array(tokens, np.int32)
    expected, expected_n, expected_run, origin = lookup_reference(arr, max_ngram, min_ngram, k,
                                                                  run_cap)
    assert (expected.tolist(), expected_n, expected_run, origin) == \
        lookup_obvious(tokens, max_ngram, min_ngram, k, run_cap)
    out = np.zeros(max(k, 1), np.int32)
    m, size, run, kernel_origin = lookup_match(arr, max_ngram, min_ngram, k, run_cap, out)
    assert (out[:m].tolist(), size, run, kernel_origin) == \
        (expected.tolist(), expected_n, expected_run, origin)
    assert run_kernel(arr, max_ngram, min_ngram, k, run_cap) == expected.tolist()
    assert m <= k
    assert (size == 0) == (m == 0) == (origin == -1)  # a match always has a continuation
    assert size == run == 0 or size <= run <= max(size, run_cap)
    assert origin == -1 or arr[origin:origin + m].tolist() == out[:m].tolist()


def test_drafter_returns_draft_and_validates():
    drafter = LookupDrafter(max_ngram=3, min_ngram=1)
    draft = drafter.propose(np.array([1, 2, 3, 1, 2], np.int32), 4)
    assert draft.tokens.tolist() == [3, 1, 2]
    assert draft.probs is None
    assert draft.run == 2  # "1 2" matched (the 3-gram "3 1 2" did not), run back no further
    assert draft.origin == 2  # where its continuation was found
    copy = drafter.propose(np.array([5, 1, 2, 3, 9, 5, 1, 2], np.int32), 4)
    assert copy.tokens.tolist() == [3, 9, 5, 1] and copy.run == 3  # "5 1 2" ran back to 5
    assert copy.origin == 3
    none = drafter.propose(np.array([1, 2, 3, 4], np.int32), 2)
    assert len(none) == 0 and none.run == 0 and none.origin == -1
    assert len(drafter.propose(np.array([1, 2], np.int32), 0)) == 0
    with pytest.raises(ParameterError, match="min_ngram"):
        LookupDrafter(max_ngram=2, min_ngram=3)


def test_a_draft_ends_at_the_first_token_that_ends_the_generation():
    """Tokens after an end-of-generation token are never committed (the loop ends the
    generation there under every rule): lookup drafts up to and including it, not past."""
    passage = [10, 11, 12, 13, 14, 15, 99, 20, 21, 22]  # 99 ends a generation
    history = np.array(passage + [1, 2] + passage[:6], np.int32)
    plain = LookupDrafter(max_ngram=6, min_ngram=6).propose(history, 8)
    stopped = LookupDrafter(max_ngram=6, min_ngram=6, is_stop=lambda t: t == 99).propose(
        history, 8)
    assert plain.tokens.tolist() == [99, 20, 21, 22, 1, 2, 10, 11]
    assert stopped.tokens.tolist() == [99] and stopped.run == plain.run
    never = LookupDrafter(max_ngram=6, min_ngram=6, is_stop=lambda t: False).propose(history, 8)
    assert never.tokens.tolist() == plain.tokens.tolist()


def test_the_end_of_generation_cut_holds_under_a_grammar():
    """A finished grammar may allow what follows an end token (llama.cpp's accepts the end
    and stays put): the grammar's cut must not lengthen the draft again."""

    class AllowsAll:  # the grammar state interface allowed_prefix uses
        def clone(self):
            return self

        def allows(self, token):
            return True

        def accept(self, token, checked=False):
            pass

        def close(self):
            pass

    passage = [10, 11, 12, 13, 14, 15, 99, 20, 21, 22]
    history = np.array(passage + [1, 2] + passage[:6], np.int32)
    drafter = LookupDrafter(max_ngram=6, min_ngram=6, is_stop=lambda t: t == 99)
    assert drafter.propose(history, 8, grammar=AllowsAll()).tokens.tolist() == [99]


def test_matches_outside_the_history_have_no_origin():
    """A proposal from past requests (the suffix index) or from text lookup was not found
    at a position of the history: its origin is -1, whatever token lookup found."""

    class Index:
        def find(self, history, k, min_ngram):
            return np.array([40, 41, 42], np.int32), 50  # runs longer than the context's

    class Text:
        def find(self, history, k):
            return np.array([60, 61], np.int32), 12

    history = np.array([5, 1, 2, 3, 9, 5, 1, 2], np.int32)
    suffix = LookupDrafter(max_ngram=3, min_ngram=1, index=Index()).propose(history, 4)
    assert suffix.source == "suffix" and suffix.tokens.tolist() == [40, 41, 42]
    assert suffix.origin == -1
    text = LookupDrafter(max_ngram=3, min_ngram=3, text=Text()).propose(
        np.array([1, 2, 3, 4], np.int32), 4)
    assert text.source == "text" and text.origin == -1
