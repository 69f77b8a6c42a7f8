"""Verification rules: fast kernels equal their numpy references; hand-made cases pin semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_local.errors import ParameterError
from lsd_local.kernels.rows import (
    row_entropy,
    row_entropy_reference,
    row_top_share,
    row_top_share_reference,
)
from lsd_local.verify import asd, asd_reference, default_window, fly, fly_reference, strict
from lsd_local.verify._strict import strict_greedy, strict_reference


def random_block(rng: np.random.Generator, k: int, v: int, p_match: float,
                 ties: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """logits float32[K+1, V] and a draft int32[K] that matches the argmax with p_match."""
    scale = rng.choice([0.5, 2.0, 8.0])
    logits = (rng.standard_normal((k + 1, v)) * scale).astype(np.float32)
    if ties:  # quantize so that equal maxima are common
        logits = np.round(logits).astype(np.float32)
    target = np.argmax(logits, axis=1)
    draft = rng.integers(0, v, size=k).astype(np.int32)
    keep = rng.random(k) < p_match
    draft[keep] = target[:-1][keep]
    return logits, draft


def block_from_targets(targets: list[int], v: int = 8, spread: float = 4.0) -> np.ndarray:
    """Rows whose argmax is targets[i], with a chosen margin (hand-made cases)."""
    logits = np.zeros((len(targets), v), np.float32)
    for i, t in enumerate(targets):
        logits[i, t] = spread
    return logits


CASES = [(k, v, p, ties) for k in (1, 2, 3, 5, 8, 16) for v in (2, 5, 50, 300)
         for p in (0.0, 0.5, 0.9, 1.0) for ties in (False, True)]


@pytest.mark.parametrize("k,v,p_match,ties", CASES)
def test_strict_matches_reference(k, v, p_match, ties):
    rng = np.random.default_rng(k * 1000 + v + int(p_match * 10) + ties)
    for _ in range(25):
        logits, draft = random_block(rng, k, v, p_match, ties)
        verdict = strict(logits, draft)
        assert (verdict.n_accept, verdict.next_token) == strict_reference(logits, draft)
        assert verdict.n_loose == 0


@pytest.mark.parametrize("k,v,p_match,ties", CASES)
@pytest.mark.parametrize("entropy", ["topk", "normalized"])
def test_fly_matches_reference(k, v, p_match, ties, entropy):
    rng = np.random.default_rng(k * 7 + v + int(p_match * 10) + ties)
    for _ in range(15):
        logits, draft = random_block(rng, k, v, p_match, ties)
        theta = float(rng.choice([0.0, 0.05, 0.3, 0.6, math.inf]))
        window = int(rng.integers(1, k + 2))
        top_k = int(rng.integers(1, 5))
        verdict = fly(logits, draft, theta=theta, window=window, entropy_top_k=top_k,
                      entropy=entropy)
        n, nxt, loose = fly_reference(logits, draft, theta, window, top_k, entropy == "normalized")
        assert (verdict.n_accept, verdict.next_token) == (n, nxt)
        assert np.array_equal(verdict.loose[:n], loose[:n])


@pytest.mark.parametrize("k,v,p_match,ties", CASES)
def test_asd_matches_reference(k, v, p_match, ties):
    rng = np.random.default_rng(k * 13 + v + int(p_match * 10) + ties)
    for _ in range(15):
        logits, draft = random_block(rng, k, v, p_match, ties)
        budget = float(rng.choice([0.0, 0.5, 3.0, 20.0]))
        spent = float(rng.uniform(0, budget)) if budget else 0.0
        gate = float(rng.choice([0.0, 0.2, 1.0, 5.0]))
        cap = int(rng.integers(0, 4))
        verdict = asd(logits, draft, spent=spent, gate=gate, max_exceptions=cap, budget=budget)
        n, nxt, added, loose = asd_reference(logits, draft, spent, gate, cap, budget)
        assert (verdict.n_accept, verdict.next_token) == (n, nxt)
        assert verdict.regret_added == pytest.approx(added, abs=1e-9)
        assert np.array_equal(verdict.loose[:n], loose[:n])


@pytest.mark.parametrize("ties", [False, True])
def test_loose_rules_reduce_to_strict(ties):
    """FLy with theta=inf or W >= K, ASD with B=0 or M=0: exactly strict, ties included."""
    rng = np.random.default_rng(5)
    for _ in range(500):
        k = int(rng.integers(1, 10))
        logits, draft = random_block(rng, k, int(rng.integers(2, 40)), 0.6, ties)
        expected = strict_reference(logits, draft)
        for verdict in (fly(logits, draft, theta=math.inf),
                        fly(logits, draft, theta=0.0, window=k),
                        asd(logits, draft, budget=0.0, gate=100.0, max_exceptions=5),
                        asd(logits, draft, budget=100.0, gate=100.0, max_exceptions=0)):
            assert (verdict.n_accept, verdict.next_token) == expected
            assert verdict.n_loose == 0


def test_tie_is_a_mismatch_for_strict():
    logits = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 5.0]], np.float32)
    verdict = strict(logits, np.array([1], np.int32))  # argmax picks index 0 on the tie
    assert (verdict.n_accept, verdict.next_token) == (0, 0)


@settings(max_examples=300, deadline=None)
@given(k=st.integers(1, 64), v=st.integers(2, 64), seed=st.integers(0, 2**32 - 1),
       extreme=st.booleans())
def test_kernels_agree_on_random_shapes(k, v, seed, extreme):
    rng = np.random.default_rng(seed)
    logits, draft = random_block(rng, k, v, 0.7, ties=not extreme)
    if extreme:
        logits = np.clip(logits * 1e3, -1e4, 1e4).astype(np.float32)
    s = strict(logits, draft)
    assert (s.n_accept, s.next_token) == strict_reference(logits, draft)
    f = fly(logits, draft, theta=0.0, window=2)
    assert (f.n_accept, f.next_token) == fly_reference(logits, draft, 0.0, 2, 3, False)[:2]
    a = asd(logits, draft, budget=1e5, gate=1e5, max_exceptions=3)
    assert (a.n_accept, a.next_token) == asd_reference(logits, draft, 0.0, 1e5, 3, 1e5)[:2]
    for verdict in (s, f, a):
        assert 0 <= verdict.n_accept <= k and 0 <= verdict.next_token < v


@settings(max_examples=400, deadline=None)
@given(k=st.integers(1, 64), v=st.integers(1, 300), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([0.0, 1e-3, 1.0, 50.0, 1e4]), ties=st.booleans(),
       p_match=st.floats(0.0, 1.0), theta=st.sampled_from([0.0, 0.05, 0.6, 2.0, math.inf]),
       window=st.integers(1, 70), top_k=st.integers(1, 6), normalized=st.booleans(),
       gate=st.sampled_from([0.0, 0.5, 2.0, 1e9]), max_exceptions=st.integers(0, 5),
       budget=st.sampled_from([0.0, 1.0, 6.0, 1e9]), spent=st.floats(0.0, 10.0))
def test_kernels_agree_with_references_over_all_parameters(
        k, v, seed, scale, ties, p_match, theta, window, top_k, normalized, gate,
        max_exceptions, budget, spent):
    """Fuzz: shapes, vocabularies of 1..300, logits up to +-1e4 (no NaN/inf), ties, every
    parameter; fast kernels equal their references (loose flags and ledger included)."""
    rng = np.random.default_rng(seed)
    logits = np.clip(rng.standard_normal((k + 1, v)) * scale, -1e4, 1e4).astype(np.float32)
    if ties:
        logits = np.round(logits).astype(np.float32)
    targets = np.argmax(logits, axis=1)
    draft = rng.integers(0, v, size=k).astype(np.int32)
    keep = rng.random(k) < p_match
    draft[keep] = targets[:-1][keep]
    entropy = "normalized" if normalized else "topk"
    f = fly(logits, draft, theta=theta, window=window, entropy_top_k=top_k, entropy=entropy)
    n, nxt, loose = fly_reference(logits, draft, theta, window, top_k, normalized)
    assert (f.n_accept, f.next_token) == (n, nxt) and np.array_equal(f.loose, loose)
    spent = min(spent, budget)
    a = asd(logits, draft, spent=spent, gate=gate, max_exceptions=max_exceptions,
            budget=budget)
    n, nxt, added, loose = asd_reference(logits, draft, spent, gate, max_exceptions, budget)
    assert (a.n_accept, a.next_token) == (n, nxt) and np.array_equal(a.loose, loose)
    assert a.regret_added == pytest.approx(added, rel=1e-9, abs=1e-9)
    for verdict in (f, a, strict(logits, draft)):
        assert 0 <= verdict.n_accept <= k and 0 <= verdict.next_token < v
        assert verdict.n_loose <= verdict.n_accept


# --- hand-made cases -----------------------------------------------------------------------

def test_strict_all_match_gives_bonus():
    logits = block_from_targets([3, 1, 4, 5])
    verdict = strict(logits, np.array([3, 1, 4], np.int32))
    assert (verdict.n_accept, verdict.next_token) == (3, 5)


def test_strict_first_mismatch_gives_correction():
    logits = block_from_targets([3, 1, 4, 5])
    verdict = strict(logits, np.array([3, 2, 4], np.int32))
    assert (verdict.n_accept, verdict.next_token) == (1, 1)


def flat_then_peaked(targets: list[int], flat_rows: set[int], v: int = 8) -> np.ndarray:
    """Rows with the given argmax; rows in flat_rows are nearly uniform (high entropy)."""
    logits = block_from_targets(targets, v, spread=6.0)
    for r in flat_rows:
        logits[r] = 0.0
        logits[r, targets[r]] = 0.01
    return logits


def test_fly_defers_high_entropy_mismatch_followed_by_window_matches():
    # K=5, W=3: mismatch at j=1 on a flat row, then d2..d4 match -> all of d1..d4 kept.
    logits = flat_then_peaked([0, 2, 3, 4, 5, 6], flat_rows={0})
    draft = np.array([1, 2, 3, 4, 7], np.int32)
    verdict = fly(logits, draft, theta=0.3, window=3)
    assert (verdict.n_accept, verdict.next_token) == (4, 5)
    assert verdict.loose.tolist()[:4] == [1, 0, 0, 0]
    assert verdict.n_loose == 1


def test_fly_rejects_when_window_has_a_later_mismatch():
    logits = flat_then_peaked([0, 2, 3, 4, 5, 6], flat_rows={0})
    draft = np.array([1, 2, 7, 4, 5], np.int32)  # d3 mismatches inside the window of d1
    verdict = fly(logits, draft, theta=0.3, window=3)
    assert (verdict.n_accept, verdict.next_token) == (0, 0)


def test_fly_rejects_low_entropy_mismatch():
    logits = block_from_targets([0, 2, 3, 4, 5, 6], spread=20.0)  # confident target
    draft = np.array([1, 2, 3, 4, 5], np.int32)
    assert fly(logits, draft, theta=0.3, window=3).n_accept == 0


def test_fly_rejects_mismatch_whose_window_passes_the_block_end():
    logits = flat_then_peaked([0, 2, 3, 4, 5, 6], flat_rows={3})
    draft = np.array([0, 2, 3, 9 % 8, 5], np.int32)  # mismatch at j=4, j+W = 7 > K = 5
    verdict = fly(logits, draft, theta=0.3, window=3)
    assert (verdict.n_accept, verdict.next_token) == (3, 4)


def test_fly_default_window():
    """min(cap, K - 1), at least 1; the cap is the tuned default 4, also for the raw fly()."""
    assert [default_window(k) for k in (1, 2, 4, 8, 16)] == [1, 1, 3, 4, 4]
    assert [default_window(k, cap=6) for k in (4, 8, 16)] == [3, 6, 6]
    # K = 8: a flat-row mismatch at j = 1, a confident one at j = 6
    logits = flat_then_peaked([0, 2, 3, 4, 5, 6, 7, 1, 3], flat_rows={0}, v=9)
    draft = np.array([1, 2, 3, 4, 5, 8, 7, 1], np.int32)
    assert fly(logits, draft, theta=0.3).n_accept == 5  # W = 4: d2..d5 match, d1 kept
    assert fly(logits, draft, theta=0.3, window=6).n_accept == 0  # d6 inside the window


def test_asd_exception_cap_and_ledger_across_rounds():
    # Rows: target 0 with a small margin over the draft's token 1 (regret 0.5 each).
    logits = np.zeros((5, 4), np.float32)
    logits[:, 0] = 1.0
    logits[:, 1] = 0.5
    draft = np.array([1, 1, 1, 1], np.int32)
    first = asd(logits, draft, spent=0.0, gate=1.0, max_exceptions=2, budget=1.5)
    assert (first.n_accept, first.next_token) == (2, 0)  # capped at M = 2 exceptions
    assert first.regret_added == pytest.approx(1.0)
    second = asd(logits, draft, spent=first.regret_added, gate=1.0, max_exceptions=2,
                 budget=1.5)
    assert second.n_accept == 1  # only 0.5 of the budget is left
    third = asd(logits, draft, spent=1.5, gate=1.0, max_exceptions=2, budget=1.5)
    assert third.n_accept == 0


def test_asd_gate_scales_with_remaining_block():
    # regret 2.0 at every position; q[j] = K - j + 1 = 4, 3, 2, 1 -> r/q = .5, .67, 1, 2
    logits = np.zeros((5, 4), np.float32)
    logits[:, 0] = 2.0
    draft = np.array([1, 1, 1, 1], np.int32)
    verdict = asd(logits, draft, gate=0.7, max_exceptions=4, budget=100.0)
    assert verdict.n_accept == 2
    assert verdict.regret_added == pytest.approx(4.0)


def test_row_entropy_matches_reference():
    rng = np.random.default_rng(1)
    for _ in range(200):
        row = (rng.standard_normal(int(rng.integers(2, 500))) * rng.choice([0.1, 1, 10])) \
            .astype(np.float32)
        for top_k in (1, 3, 7):
            for normalized in (False, True):
                fast = row_entropy(row, row.max(), top_k, normalized)
                assert fast == pytest.approx(row_entropy_reference(row, top_k, normalized),
                                             rel=1e-9, abs=1e-12)


def test_row_top_share_is_the_softmax_over_the_top_k():
    """llama.cpp's draft p: the top-1 probability among the top_k logits, renormalized."""
    row = np.array([0.0, 2.0, 1.0, -1.0], np.float32)
    token, p = row_top_share(row, 2)
    assert token == 1
    assert p == pytest.approx(np.exp(2) / (np.exp(2) + np.exp(1)), rel=1e-12)
    assert row_top_share(row, 4)[1] == pytest.approx(
        np.exp(2) / (1 + np.exp(2) + np.exp(1) + np.exp(-1)), rel=1e-12)
    assert row_top_share(row, 1) == (1, 1.0)
    assert row_top_share(row, 10)[1] == pytest.approx(row_top_share(row, 4)[1], rel=1e-12)


def test_row_top_share_reads_the_columns_that_hold_the_top_values():
    """A 6400-entry row (the kernel's [64, 100] view): the 10 largest values all in one
    column, the 11th in another; and one top value in each of 10 columns. The share is over
    exactly the 10 largest, the 11th left out."""
    row = np.zeros(6400, np.float32)
    row[7::100][:10] = np.arange(10, 20)  # column 7 holds 10..19
    row[42] = 9.5  # the 11th largest, column 42
    top = np.arange(10, 20, dtype=np.float64)
    token, p = row_top_share(row, 10)
    assert token == 7 + 9 * 100
    assert p == pytest.approx(1.0 / np.exp(top - 19).sum(), rel=1e-12)
    spread = np.zeros(6405, np.float32)  # [64, 100] and 5 values after the view
    spread[np.arange(10) * 100 + np.arange(10)] = np.arange(10, 20)  # columns 0..9
    spread[6403] = 9.5  # in the tail: read too, and left out of the top 10
    assert row_top_share(spread, 10) == (909, pytest.approx(1.0 / np.exp(top - 19).sum()))
    assert row_top_share(spread, 11)[1] == pytest.approx(
        1.0 / (np.exp(top - 19).sum() + np.exp(9.5 - 19)))


def random_share_row(rng: np.random.Generator) -> np.ndarray:
    """float32[V] rows as drafters meet them: real vocabulary sizes and sizes around the
    kernel's 64 slices, flat and peaked spreads, ties, -inf (grammar) rows, NaN, +inf, and
    a top-k spread over few or many columns."""
    n = int(rng.choice([1, 5, 63, 64, 65, 640, 641, 1000, 49152, 151936, 151937]))
    row = (rng.normal(size=n) * rng.choice([0.1, 3.0, 30.0])).astype(np.float32)
    if rng.random() < 0.3:
        row = np.round(row).astype(np.float32)  # many ties at the top
    if rng.random() < 0.3:
        row[rng.random(n) < rng.choice([0.5, 0.999, 1.0])] = -np.inf
    if rng.random() < 0.2:
        row[rng.integers(n, size=int(rng.integers(1, 4)))] = np.nan
    if rng.random() < 0.05:
        row[int(rng.integers(n))] = np.inf
    if rng.random() < 0.2:  # the top values in one column of the kernel's [64, n // 64] view
        cols = max(1, n // 64)
        row[int(rng.integers(cols))::cols][:12] = 50.0 + rng.random(min(12, n))
    return row


def test_row_top_share_matches_the_reference_on_random_rows():
    """The kernel gives the reference's token and probability (to rounding) on 600 rows."""
    rng = np.random.default_rng(9)
    for _ in range(600):
        row = random_share_row(rng)
        top_k = int(rng.choice([0, 1, 2, 10, 100]))
        token, p = row_top_share(row, top_k)
        with np.errstate(invalid="ignore"):
            ref_token, ref_p = row_top_share_reference(row, top_k)
        assert token == ref_token
        if np.isnan(ref_p):
            assert np.isnan(p)
        else:
            assert p == pytest.approx(ref_p, rel=1e-12)


@pytest.mark.parametrize("call,name", [
    (lambda lg, d: fly(lg, d, theta=-0.1), "theta"),
    (lambda lg, d: fly(lg, d, window=0), "window"),
    (lambda lg, d: fly(lg, d, entropy_top_k=0), "top_k"),
    (lambda lg, d: fly(lg, d, entropy="bogus"), "entropy"),
    (lambda lg, d: asd(lg, d, budget=-1.0), "budget"),
    (lambda lg, d: asd(lg, d, gate=-1.0), "gate"),
    (lambda lg, d: asd(lg, d, max_exceptions=-1), "max_exceptions"),
    (lambda lg, d: asd(lg, d, spent=9.0, budget=1.0), "spent"),
])
def test_invalid_parameters_are_named(call, name):
    logits, draft = random_block(np.random.default_rng(0), 3, 5, 0.5)
    with pytest.raises(ParameterError, match=name):
        call(logits, draft)


def test_shape_errors():
    with pytest.raises(ValueError, match="K\\+1"):
        strict(np.zeros((3, 4), np.float32), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="vocabulary"):
        strict(np.zeros((2, 4), np.float32), np.array([9], np.int32))


def test_argmaxes_return_the_first_nan_and_the_first_tie():
    """The verifiers' argmax is numpy's: the first NaN, else the first maximum (what the
    references assume), whatever the row's length (numpy's SIMD loops differ with it) and
    wherever the NaN or the tie sits. A draft model's greedy token is the first maximum
    with NaN skipped (a NaN is never a token worth drafting)."""
    for row, first, drafted in (([0.0, np.nan, 2.0], 1, 2), ([np.nan, 5.0], 0, 1),
                                ([1.0, 3.0, np.nan, np.nan], 2, 1), ([2.0, 1.0, 2.0], 0, 0)):
        row = np.array(row, np.float32)
        assert int(row.argmax()) == first
        assert row_top_share(row, 10)[0] == drafted
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(1, 70000))
        row = np.round(rng.normal(size=n)).astype(np.float32)  # many ties at the top
        if rng.random() < 0.3:
            row[rng.integers(n, size=int(rng.integers(1, 4)))] = np.nan
        if rng.random() < 0.3:
            row[rng.integers(n)] = -np.inf
        nan_at = np.flatnonzero(np.isnan(row))
        first = int(nan_at[0]) if len(nan_at) else int(np.flatnonzero(row == np.nanmax(row))[0])
        assert int(row.argmax()) == first
        assert row_top_share(row, 10)[0] == int(np.argmax(np.where(np.isnan(row), -np.inf, row)))
        assert strict_greedy(row[None, :], np.zeros(0, np.int32)) == (0, first)
