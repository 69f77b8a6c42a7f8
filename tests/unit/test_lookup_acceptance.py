"""Lookup acceptance by copy run, request family and generation
(lsd_local.drafters.auto.lookup_acceptance): hand-made evidence, the arithmetic against its
definition, and what survives a restore."""

from __future__ import annotations

import numpy as np
import pytest

from lsd_local.drafters.auto import lookup_acceptance as la
from lsd_local.drafters.auto.lookup_acceptance import RunAcceptanceModel

EDGES = (0, 4, 8, 12, 16, 24, 32, 48)


def model() -> RunAcceptanceModel:
    return RunAcceptanceModel(EDGES, long_from=12, prior_short=0.5, prior_long=0.9)


def test_a_draft_position_is_learned_at_its_run():
    """A draft made after a run of 10: positions 1, 2 accepted (runs 10, 11: bucket 8-11),
    position 3 rejected (run 12: bucket 12-15); nothing later was tried."""
    acc = model()
    acc.update(10, 6, 2)
    assert acc.tried.tolist() == [0, 0, 2, 1, 0, 0, 0, 0]
    assert acc.accepted.tolist() == [0, 0, 2, 0, 0, 0, 0, 0]
    assert acc.request_tried.tolist() == acc.tried.tolist()  # this generation's too
    acc.update(10, 3, 3, offset=2)  # the same draft's positions 3..5 later scored right
    assert acc.accepted[3] == pytest.approx(3.0)  # runs 12, 13, 14 (nothing there to decay)
    assert acc.tried[3] == pytest.approx(la.LONG_TERM_DECAY * 1 + 3)
    assert acc.buckets(10, 8).tolist() == [2, 2, 3, 3, 3, 3, 4, 4]
    assert acc.buckets(47, 3).tolist() == [6, 7, 7]  # the last bucket holds every longer run


def test_expected_accepted_is_the_sum_of_reach_probabilities():
    acc = model()
    rng = np.random.default_rng(4)
    for _ in range(60):
        n = int(rng.integers(1, 20))
        acc.update(int(rng.integers(4, 60)), n, int(rng.integers(0, n + 1)))
    for run in (4, 11, 12, 30, 70):
        p = acc.probabilities(run, 25)
        expected = acc.expected_accepted(run, 25)
        assert expected[0] == 0.0
        for k in range(1, 26):
            assert expected[k] == pytest.approx(sum(np.prod(p[:j]) for j in range(1, k + 1)))
        rates = acc.rates()
        assert p.tolist() == rates[acc.buckets(run, 25)].tolist()


def test_a_long_running_copy_is_told_from_a_fresh_one():
    """Copies that break soon after they start and rarely once they run: a bucket model
    learns both (a per-position model would average them)."""
    acc = model()
    for _ in range(200):
        acc.update(12, 6, 3)  # fresh copies: right 3 times, then wrong
        acc.update(60, 32, 32)  # long-running ones: right all along
    assert acc.probabilities(12, 4) == pytest.approx([0.75] * 4, abs=0.02)  # 3 of 4 right
    assert acc.probabilities(60, 3).min() > 0.98
    # 16 positions from run 12 must first survive runs 12..15 (0.75^4 ~ 0.32)
    assert acc.expected_accepted(60, 16)[-1] > 15 and acc.expected_accepted(12, 16)[-1] < 6


def test_untested_buckets_take_their_groups_rate_and_priors_without_evidence():
    acc = model()
    np.testing.assert_allclose(acc.rates(), [0.5, 0.5, 0.5, 0.9, 0.9, 0.9, 0.9, 0.9])
    for _ in range(50):
        acc.update(16, 8, 8)  # long runs 16..23: always right
    rates = acc.rates()
    assert rates[4] > 0.95 and rates[7] > 0.95  # 48+ untested: the group's pooled rate
    assert rates[0] == rates[1] == rates[2] == pytest.approx(0.5)  # short group untouched


def test_the_generation_shows_within_a_few_proposals():
    """Long-term: copies never break. This generation: they break at once. Its own evidence
    takes over after a few proposals, and a new generation starts from the long term."""
    acc = model()
    for _ in range(300):
        acc.update(20, 16, 16)
    acc.begin()
    before = acc.probabilities(20, 1)[0]
    for _ in range(5):
        acc.update(20, 16, 0)
    assert before > 0.98 and acc.probabilities(20, 1)[0] < 0.7
    acc.begin()
    assert acc.probabilities(20, 1)[0] > 0.95


def test_families_are_learned_apart_and_a_new_one_starts_from_all():
    acc = model()
    for _ in range(20):
        acc.begin("code")
        for _ in range(10):
            acc.update(12, 16, 16)  # code: copies run on
        acc.begin("prose")
        for _ in range(10):
            acc.update(12, 16, 1)  # prose: copies break after one token
    acc.begin("code")
    code = acc.probabilities(12, 1)[0]
    acc.begin("prose")
    prose = acc.probabilities(12, 1)[0]
    acc.begin("chat")  # never seen: all requests' rate
    unseen = acc.probabilities(12, 1)[0]
    acc.begin(None)
    unnamed = acc.probabilities(12, 1)[0]
    assert code > 0.95 and prose < 0.6 and prose < unseen < code
    assert unseen == pytest.approx(unnamed)


def test_the_least_recently_used_family_goes_first(monkeypatch):
    monkeypatch.setattr(la, "MAX_FAMILIES", 3)
    acc = model()
    for name in ("a", "b", "c", "a", "d"):
        acc.begin(name)
        acc.update(12, 4, 4)
    assert list(acc.families) == ["c", "a", "d"]


def test_state_round_trip_scaled_to_at_most_max_tries():
    acc = model()
    for family in ("x", "y"):
        acc.begin(family)
        for _ in range(30):
            acc.update(8, 10, 7)
    saved = acc.counts()
    other = model()
    other.restore(saved, max_tries=50.0)
    assert other.tried.sum() == pytest.approx(50.0)
    np.testing.assert_allclose(other.accepted / other.tried.sum(), acc.accepted / acc.tried.sum())
    assert list(other.families) == ["x", "y"]
    for name in ("x", "y"):
        tried, original = other.families[name][1], acc.families[name][1]
        assert tried.sum() == pytest.approx(50.0)
        np.testing.assert_allclose(tried / 50.0, original / original.sum())
    roomy = model()
    roomy.restore(saved, max_tries=1e9)  # never scaled up
    np.testing.assert_allclose(roomy.tried, acc.tried)


@pytest.mark.parametrize("bad", [
    {"accepted": [1.0] * 3, "tried": [1.0] * 3},  # another shape
    {"accepted": [float("nan")] * len(EDGES), "tried": [1.0] * len(EDGES)},
    {"accepted": [-1.0] * len(EDGES), "tried": [1.0] * len(EDGES)},
    {"accepted": "many", "tried": None},
    {"accepted": [[1.0]], "tried": [[1.0]]},
    {"accepted": [10 ** 400] * len(EDGES), "tried": [1] * len(EDGES)},  # JSON allows it
    {"accepted": [1.0, [2.0]] + [1.0] * (len(EDGES) - 2), "tried": [1.0] * len(EDGES)},
])
def test_a_bad_saved_level_is_ignored(bad):
    acc = model()
    acc.update(12, 4, 4)
    before = acc.tried.copy()
    acc.restore(bad, 50.0)
    acc.restore({"families": {"f": bad, "g": "not a level"}}, 50.0)
    acc.restore({"families": ["not", "a", "dict"]}, 50.0)
    np.testing.assert_array_equal(acc.tried, before)
    assert not acc.families
    good = {"accepted": [2.0] * len(EDGES), "tried": [1.0] * len(EDGES)}
    acc.restore({"families": {"f": good}}, 50.0)  # accepts above tries are cut to the tries
    assert (acc.families["f"][0] <= acc.families["f"][1]).all()


def test_bucket_counts_by_table_equal_the_definition():
    """update() counts runs per bucket from a table (runs below RUN_TABLE) or by interval
    overlap (beyond): both equal counting each run's bucket one by one."""
    acc = model()
    rng = np.random.default_rng(7)
    starts, lengths = rng.integers(0, 2 * la.RUN_TABLE, 300), rng.integers(0, 40, 300)
    for first, n in [(0, 0), (0, 1), (3, 9), (la.RUN_TABLE - 5, 10), (la.RUN_TABLE, 3),
                     *zip(starts, lengths, strict=True)]:
        expected = np.bincount(acc.buckets_slow(int(first), int(n)), minlength=len(EDGES))
        np.testing.assert_array_equal(acc._counts(int(first), int(n)), expected)
        np.testing.assert_array_equal(acc.buckets(int(first), int(n)),
                                      acc.buckets_slow(int(first), int(n)))


def test_edges_must_ascend_from_zero():
    for edges in [(), (1, 4), (0, 4, 4), (0, 8, 4)]:
        with pytest.raises(ValueError, match="ascend from 0"):
            RunAcceptanceModel(edges, 12, 0.5, 0.9)
