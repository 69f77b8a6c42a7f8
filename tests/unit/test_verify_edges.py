"""What real inputs contain: -inf rows (grammar masks), NaN, ties, empty drafts, a spent budget,
tokens the sampler excludes. Fast kernels equal their numpy references on all of it, and no
NaN ever opens a gate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fakes import TableGrammar
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_local.config import RuleConfig, SamplerSettings
from lsd_local.kernels.rows import row_entropy, row_entropy_reference
from lsd_local.verify import asd, asd_reference, fly, fly_reference, strict, strict_reference
from lsd_local.verify.constrain import prepare_block
from lsd_local.verify.sampling import sampling_probs, speculative_sample
from lsd_local.verify.verifier import Verifier

# --- inputs as they arrive ------------------------------------------------------------------


def real_block(rng: np.random.Generator, k: int, v: int, *, p_match: float, ties: bool,
               p_masked: float, p_nan: float) -> tuple[np.ndarray, np.ndarray]:
    """logits float32[K+1, V] with ties, -inf entries (a grammar's forbidden tokens, never a
    whole row) and NaN; draft int32[K] matching np.argmax with probability p_match."""
    logits = (rng.standard_normal((k + 1, v)) * rng.choice([0.5, 3.0, 20.0])).astype(np.float32)
    if ties:
        logits = np.round(logits).astype(np.float32)
    masked = rng.random((k + 1, v)) < p_masked
    masked[np.arange(k + 1), rng.integers(0, v, k + 1)] = False  # every row keeps one token
    logits[masked] = -np.inf
    logits[rng.random((k + 1, v)) < p_nan] = np.nan
    target = np.argmax(logits, axis=1)
    draft = rng.integers(0, v, size=k).astype(np.int32)
    keep = rng.random(k) < p_match
    draft[keep] = target[:-1][keep]
    return logits, draft


@settings(max_examples=500, deadline=None)
@given(k=st.integers(0, 24), v=st.integers(1, 200), seed=st.integers(0, 2**32 - 1),
       ties=st.booleans(), p_masked=st.sampled_from([0.0, 0.3, 0.95]),
       p_nan=st.sampled_from([0.0, 0.0, 0.01]), p_match=st.floats(0.0, 1.0),
       theta=st.sampled_from([0.0, 0.3, 0.6, math.inf]), window=st.integers(1, 26),
       top_k=st.integers(1, 5), normalized=st.booleans(),
       gate=st.sampled_from([0.0, 2.0, 1e9]), max_exceptions=st.integers(0, 4),
       budget=st.sampled_from([0.0, 6.0, 1e9]), spent_share=st.sampled_from([0.0, 0.5, 1.0]))
def test_kernels_equal_references_on_masked_rows_nan_and_ties(
        k, v, seed, ties, p_masked, p_nan, p_match, theta, window, top_k, normalized, gate,
        max_exceptions, budget, spent_share):
    rng = np.random.default_rng(seed)
    logits, draft = real_block(rng, k, v, p_match=p_match, ties=ties, p_masked=p_masked,
                               p_nan=p_nan)
    s = strict(logits, draft)
    assert (s.n_accept, s.next_token) == strict_reference(logits, draft)
    f = fly(logits, draft, theta=theta, window=window, entropy_top_k=top_k,
            entropy="normalized" if normalized else "topk")
    n, nxt, loose = fly_reference(logits, draft, theta, window, top_k, normalized)
    assert (f.n_accept, f.next_token) == (n, nxt) and np.array_equal(f.loose, loose)
    spent = budget * spent_share if math.isfinite(budget) else 0.0
    a = asd(logits, draft, spent=spent, gate=gate, max_exceptions=max_exceptions, budget=budget)
    n, nxt, added, loose = asd_reference(logits, draft, spent, gate, max_exceptions, budget)
    assert (a.n_accept, a.next_token) == (n, nxt) and np.array_equal(a.loose, loose)
    assert a.regret_added == pytest.approx(added, rel=1e-9, abs=1e-9)
    if not np.isnan(logits).any():  # NaN regret or entropy never keeps a mismatch
        return
    for verdict in (f, a):
        for j in np.flatnonzero(verdict.loose[:verdict.n_accept]):
            assert not np.isnan(logits[j]).any()


@pytest.mark.parametrize("normalized", [False, True])
def test_entropy_of_a_masked_row_is_finite_and_equals_the_reference(normalized):
    rng = np.random.default_rng(3)
    for _ in range(200):
        row = rng.standard_normal(int(rng.integers(2, 300))).astype(np.float32)
        row[rng.random(len(row)) < 0.7] = -np.inf
        row[int(rng.integers(len(row)))] = 1.0
        h = row_entropy(row, row.max(), 3, normalized)
        assert math.isfinite(h) and h >= 0
        assert h == pytest.approx(row_entropy_reference(row, 3, normalized), rel=1e-9,
                                  abs=1e-12)


# --- the gates a NaN used to open -------------------------------------------------------------


def masked_mismatch_block() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row 0: token 0 is the best but forbidden; token 1 is the allowed argmax; the draft's
    token 2 is allowed but 20 logits worse. Rows 1..4 agree with the draft."""
    v = 6
    logits = np.zeros((5, v), np.float32)
    logits[0] = [30.0, 25.0, 5.0, 1.0, 1.0, 1.0]
    draft = np.array([2, 3, 4, 5], np.int32)
    for j, token in enumerate(draft[1:], start=1):
        logits[j, token] = 9.0
    logits[4, 1] = 9.0
    table = np.ones((1, v), bool)
    table[0, 0] = False
    return logits, draft, table


@pytest.mark.parametrize("theta", [0.6, math.inf])
@pytest.mark.parametrize("entropy", ["topk", "normalized"])
def test_grammar_masked_mismatch_is_not_kept_by_fly(theta, entropy):
    logits, draft, table = masked_mismatch_block()
    block = logits.copy()
    n = prepare_block(TableGrammar(table), block, draft, 3, False)
    assert n == 4 and block[0, 0] == -np.inf  # the grammar path really masked row 0
    verifier = Verifier(RuleConfig(rule="fly", theta=theta, window=2, entropy=entropy), None)
    verdict = verifier.verify(block[:n + 1], draft[:n], None, np.random.default_rng(0))
    assert (verdict.n_accept, verdict.next_token) == (0, 1)


def test_strict_sampling_never_reads_entropy():
    """A token with p_target ~ 2e-9 in a masked row: strict sampling keeps it (almost) never,
    whatever entropy mode the rule config carries."""
    logits, draft, _ = masked_mismatch_block()
    logits[0, 0] = -np.inf
    sampler = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    assert sampling_probs(logits[0], sampler)[2] < 3e-9
    verifier = Verifier(RuleConfig(rule="strict", entropy="normalized", window=1), sampler)
    rng = np.random.default_rng(0)
    kept = sum(verifier.verify(logits, draft, None, rng).n_accept > 0 for _ in range(2000))
    assert kept == 0


def test_fly_sampling_never_defers_a_token_the_sampler_excludes():
    """top_k = 1 leaves p_target(d) = 0 for every token but the argmax: FLy at theta 0 with
    matching windows must still reject it (vLLM requires p_target > 0 and p_draft > 0)."""
    logits = np.zeros((4, 5), np.float32)
    logits[0] = [1.0, 0.9, 0.0, 0.0, 0.0]  # flat: high entropy
    logits[1, 2] = logits[2, 3] = logits[3, 4] = 8.0
    draft = np.array([1, 2, 3], np.int32)
    rng = np.random.default_rng(0)
    top1 = SamplerSettings(temperature=1.0, top_k=1, top_p=1.0, min_p=0.0)
    for _ in range(300):
        n, nxt, _ = speculative_sample(logits, draft, None, top1, rng, theta=0.0, window=2)
        assert (n, nxt) == (0, 0)
    wide = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    deferred = sum(speculative_sample(logits, draft, None, wide, rng, theta=0.0,
                                      window=2)[2][0] for _ in range(300))
    assert deferred > 0  # without the exclusion the same block is deferred


def tie_block() -> tuple[np.ndarray, np.ndarray]:
    logits = np.zeros((4, 3), np.float32)
    logits[:, 0] = logits[:, 1] = 1.0  # argmax 0; draft token 1 ties it (regret 0)
    return logits, np.array([1, 1, 1], np.int32)


def test_spent_asd_budget_accepts_no_tie():
    logits, draft = tie_block()
    fresh = asd(logits, draft, spent=0.0, gate=2.0, max_exceptions=2, budget=6.0)
    assert fresh.n_accept == 2  # ties are free exceptions while the budget lasts
    for spent in (6.0, 7.5):
        verdict = Verifier(RuleConfig(rule="asd", budget=6.0), None)
        verdict.regret_spent = spent
        got = verdict.verify(logits, draft, None, np.random.default_rng(0))
        assert (got.n_accept, got.next_token) == strict_reference(logits, draft)


# --- empty drafts (every plain step) ----------------------------------------------------------


def test_empty_draft_under_every_rule():
    rng = np.random.default_rng(4)
    draft = np.zeros(0, np.int32)
    for _ in range(50):
        logits = rng.standard_normal((1, 30)).astype(np.float32)
        expected = (0, int(np.argmax(logits[0])))
        for verdict in (strict(logits, draft), fly(logits, draft, theta=0.0),
                        fly(logits, draft, theta=0.0, window=1, entropy="normalized"),
                        asd(logits, draft, gate=1e9, budget=1e9)):
            assert (verdict.n_accept, verdict.next_token) == expected
            assert verdict.loose.shape == (0,) and verdict.regret_added == 0.0


# --- speculative sampling: a slow reference and its distributions ---------------------------


def sampling_probs_reference(row: np.ndarray, s: SamplerSettings) -> np.ndarray:
    """The sampler chain written out: stable sort, top-k, softmax, top-p, min-p, temperature."""
    logits = row.astype(np.float64)
    order = sorted(range(len(logits)), key=lambda i: -logits[i])
    if 0 < s.top_k < len(order):
        order = order[:s.top_k]
    p = np.exp(logits[order] - logits[order[0]])
    p /= p.sum()
    n = len(order)
    if s.top_p < 1.0:
        total = 0.0
        for i, pi in enumerate(p):
            total += pi
            if total >= s.top_p:
                n = min(n, i + 1)
                break
    if s.min_p > 0.0:
        n = min(n, max(1, sum(1 for pi in p if pi >= s.min_p * p[0])))
    kept = logits[order[:n]] / s.temperature
    q = np.exp(kept - kept[0])
    out = np.zeros(len(logits))
    out[order[:n]] = q / q.sum()
    return out


def draw_reference(p: np.ndarray, u: float) -> int:
    """Inverse CDF: the first token whose running sum passes u times the total."""
    x = u * np.cumsum(p)[-1]
    running = 0.0
    for token, pi in enumerate(p):
        running += pi
        if running > x:
            return token
    return len(p) - 1


def speculative_sample_reference(logits, draft, draft_probs, s, rng, theta, window, top_k,
                                 normalized):
    """logits float32[K+1, V], draft int32[K], draft_probs float64[K, V] or None. K uniforms
    for the tests, then one for the next token: the same random numbers in the same order."""
    k = len(draft)
    p = [sampling_probs_reference(logits[i], s) for i in range(k + 1)]
    uniforms = [rng.random() for _ in range(k)]
    p_draft = [1.0 if draft_probs is None else draft_probs[j][draft[j]] for j in range(k)]
    ratio = [p[j][draft[j]] / p_draft[j] if p_draft[j] > 0 else
             (math.inf if p[j][draft[j]] > 0 else 0.0) for j in range(k)]
    ok = [uniforms[j] < ratio[j] for j in range(k)]
    n, loose = 0, np.zeros(k, np.uint8)
    for j in range(k):
        if not ok[j]:
            window_ok = j + 1 + window <= k and all(ok[j + 1:j + 1 + window])
            entropy = row_entropy_reference(logits[j], top_k, normalized)
            if not (window_ok and p[j][draft[j]] > 0 and entropy >= theta):
                break
            loose[j] = 1
        n = j + 1
    if n == k:
        return n, draw_reference(p[k], rng.random()), loose
    if draft_probs is None:
        residual = p[n].copy()
        residual[draft[n]] = 0.0
    else:
        residual = np.maximum(p[n] - draft_probs[n], 0.0)
    if residual.sum() == 0:
        residual = p[n]
    return n, draw_reference(residual, rng.random()), loose


SAMPLERS = [SamplerSettings(0.8, 0, 1.0, 0.0), SamplerSettings(1.0, 3, 1.0, 0.0),
            SamplerSettings(0.7, 0, 0.8, 0.05), SamplerSettings(1.3, 2, 0.9, 0.1)]


@settings(max_examples=300, deadline=None)
@given(k=st.integers(0, 8), v=st.integers(2, 12), seed=st.integers(0, 2**32 - 1),
       sampler=st.sampled_from(SAMPLERS), sampled_draft=st.booleans(), ties=st.booleans(),
       theta=st.sampled_from([0.0, 0.3, math.inf]), window=st.integers(1, 4),
       normalized=st.booleans())
def test_speculative_sample_equals_its_reference(k, v, seed, sampler, sampled_draft, ties,
                                                 theta, window, normalized):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((k + 1, v)) * 2).astype(np.float32)
    if ties:
        logits = np.round(logits).astype(np.float32)
    draft_probs = None
    if sampled_draft:
        draft_probs = rng.dirichlet(np.ones(v), size=k)
        draft = np.array([rng.choice(v, p=row) for row in draft_probs], np.int32)
    else:
        draft = rng.integers(0, v, size=k).astype(np.int32)
    for row in logits:
        assert np.allclose(sampling_probs(row, sampler), sampling_probs_reference(row, sampler),
                           atol=1e-12)
    fast = speculative_sample(logits, draft, draft_probs, sampler, np.random.default_rng(seed),
                              theta=theta, window=window, entropy_top_k=3,
                              normalized=normalized)
    ref = speculative_sample_reference(logits, draft, draft_probs, sampler,
                                       np.random.default_rng(seed), theta, window, 3,
                                       normalized)
    assert fast[:2] == ref[:2] and np.array_equal(fast[2], ref[2])


CHI2_CRIT_DF5_P001 = 20.52  # chi-square critical value, 5 degrees of freedom, p = 0.001
WIDE = SamplerSettings(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)
# the target's logits per position (they do not depend on the earlier tokens here)
POSITIONS = np.array([[1.0, 0.2, -0.5, 2.0, 0.0, 0.7],
                      [0.3, 1.5, 0.1, -1.0, 0.9, 0.0],
                      [2.0, 0.0, 0.0, 0.5, 0.5, 1.0],
                      [0.0, 0.4, 1.1, 0.2, -0.3, 0.8]], np.float32)
DRAFT_LOGITS = np.array([[0.0, 1.0, 0.5, 0.0, 1.2, -0.3],
                         [0.2, 0.1, 0.0, 0.9, 0.0, 0.4],
                         [1.0, 0.0, 0.3, 0.0, 0.1, 0.2]], np.float32)


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    assert counts[expected == 0].sum() == 0, "a token with zero target probability came out"
    mask = expected > 0
    return float(((counts[mask] - expected[mask]) ** 2 / expected[mask]).sum())


def generate_two(rng: np.random.Generator, k: int, sampled: bool) -> list[int]:
    """Rounds of speculative sampling until two tokens are committed."""
    q = np.stack([sampling_probs(r, WIDE) for r in DRAFT_LOGITS])
    out: list[int] = []
    while len(out) < 2:
        pos = len(out)
        if sampled:
            draft = np.array([rng.choice(6, p=q[pos + i]) for i in range(k)], np.int32)
            probs = q[pos:pos + k]
        else:
            draft, probs = np.array([3, 1, 0][pos:pos + k], np.int32), None
        n, nxt, _ = speculative_sample(POSITIONS[pos:pos + k + 1], draft, probs, WIDE, rng)
        out += draft[:n].tolist() + [nxt]
    return out


@pytest.mark.parametrize("sampled", [False, True])
def test_second_position_follows_the_target(sampled):
    rng = np.random.default_rng(7)
    counts = np.zeros(6)
    for _ in range(12000):
        counts[generate_two(rng, 2, sampled)[1]] += 1
    assert chi_square(counts, sampling_probs(POSITIONS[1], WIDE)) < CHI2_CRIT_DF5_P001


@pytest.mark.parametrize("sampled", [False, True])
def test_bonus_token_follows_the_target(sampled):
    rng = np.random.default_rng(8)
    q = np.stack([sampling_probs(r, WIDE) for r in DRAFT_LOGITS[:2]])
    counts = np.zeros(6)
    while counts.sum() < 8000:
        draft = (np.array([rng.choice(6, p=row) for row in q], np.int32) if sampled
                 else np.array([3, 1], np.int32))
        n, nxt, _ = speculative_sample(POSITIONS[:3], draft, q if sampled else None, WIDE, rng)
        if n == 2:
            counts[nxt] += 1
    assert chi_square(counts, sampling_probs(POSITIONS[2], WIDE)) < CHI2_CRIT_DF5_P001


def test_empty_draft_sampling_follows_the_target():
    rng = np.random.default_rng(9)
    counts = np.zeros(6)
    for _ in range(10000):
        n, nxt, loose = speculative_sample(POSITIONS[:1], np.zeros(0, np.int32), None, WIDE,
                                           rng)
        assert n == 0 and loose.shape == (0,)
        counts[nxt] += 1
    assert chi_square(counts, sampling_probs(POSITIONS[0], WIDE)) < CHI2_CRIT_DF5_P001


# --- FLy's window: vLLM's semantics, pinned -----------------------------------------------------


def window_block(k: int, mismatch_at: int, later_mismatch: int | None = None):
    """K draft tokens that match the target except at 1-based position `mismatch_at` (on a
    flat row) and, optionally, at `later_mismatch` (on a confident row)."""
    v = 12
    targets = list(range(1, k + 2))
    logits = np.zeros((k + 1, v), np.float32)
    for i, t in enumerate(targets):
        logits[i, t] = 12.0
    logits[mismatch_at - 1] = 0.0
    logits[mismatch_at - 1, targets[mismatch_at - 1]] = 0.01
    draft = np.array(targets[:k], np.int32)
    draft[mismatch_at - 1] = 0
    if later_mismatch is not None:
        draft[later_mismatch - 1] = 0
    return logits, draft


@pytest.mark.parametrize("k,window,mismatch_at,later,kept", [
    (5, 4, 1, None, 5),   # j + W = 5 <= K: d2..d5 all match -> kept (AMD's win_len 4 would not)
    (5, 4, 2, None, 1),   # j + W = 6 > K: the window runs past the block -> rejected
    (5, 3, 2, None, 5),   # j + W = 5: kept; the window may touch the last draft token
    (4, 6, 1, None, 0),   # K < W: FLy rejects, like strict (AMD switches FLy off entirely)
    (6, 2, 2, 4, 1),      # a mismatch inside the window -> rejected
    (6, 2, 2, 5, 4),      # the second mismatch lies after the window: d2 kept, d5 judged alone
])
def test_fly_window_follows_vllm(k, window, mismatch_at, later, kept):
    logits, draft = window_block(k, mismatch_at, later)
    verdict = fly(logits, draft, theta=0.3, window=window)
    assert verdict.n_accept == kept
    assert fly_reference(logits, draft, 0.3, window, 3, False)[0] == kept


def test_a_plain_step_takes_the_argmax_under_every_rule_like_the_references():
    """The verifier's shortcut for an empty greedy draft equals each rule's numpy reference,
    on rows with ties, -inf (grammar masks) and NaN."""
    from lsd_local.config import RuleConfig
    from lsd_local.verify import asd_reference, fly_reference, strict_reference
    from lsd_local.verify.verifier import Verifier

    rng = np.random.default_rng(7)
    empty = np.zeros(0, np.int32)
    for case in range(300):
        row = rng.integers(-3, 4, (1, 64)).astype(np.float32)  # many ties
        if case % 3 == 0:
            row[0, rng.integers(0, 64, 20)] = -np.inf
        if case % 7 == 0:
            row[0, rng.integers(0, 64)] = np.nan
        expected = strict_reference(row, empty)
        assert fly_reference(row, empty, 0.6, 1, 3, False)[:2] == expected
        assert asd_reference(row, empty, 0.0, 2.0, 2, 6.0)[:2] == expected
        for rule in ("strict", "fly", "asd"):
            verdict = Verifier(RuleConfig(rule=rule), None).verify(row, empty, None, rng)
            assert (verdict.n_accept, verdict.next_token) == expected, (rule, case)
