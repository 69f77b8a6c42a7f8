"""Speculative sampling is lossless: committed tokens follow the target's distribution."""

from __future__ import annotations

import numpy as np
import pytest

from lsd_local.config import SamplerSettings
from lsd_local.verify.sampling import sampling_probs, speculative_sample

CHI2_CRIT_DF5_P001 = 20.52  # chi-square critical value, 5 degrees of freedom, p = 0.001
FULL = SamplerSettings(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0)


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    mask = expected > 0
    assert counts[~mask].sum() == 0, "a token with zero target probability was drawn"
    return float(((counts[mask] - expected[mask]) ** 2 / expected[mask]).sum())


def first_token_counts(logits, draft_fn, settings, n, seed=0):
    rng = np.random.default_rng(seed)
    counts = np.zeros(logits.shape[1])
    for _ in range(n):
        draft, draft_probs = draft_fn(rng)
        n_accept, nxt, _ = speculative_sample(logits, draft, draft_probs, settings, rng)
        counts[draft[0] if n_accept else nxt] += 1
    return counts


LOGITS = np.array([[1.0, 0.2, -0.5, 2.0, 0.0, 0.7],
                   [0.3, 1.5, 0.1, -1.0, 0.9, 0.0],
                   [2.0, 0.0, 0.0, 0.5, 0.5, 1.0]], np.float32)


def test_one_hot_draft_is_lossless():
    """Prompt lookup proposes a fixed token (p_d one-hot)."""
    draft = np.array([3, 1], np.int32)
    counts = first_token_counts(LOGITS, lambda rng: (draft, None), FULL, 20000)
    assert chi_square(counts, sampling_probs(LOGITS[0], FULL)) < CHI2_CRIT_DF5_P001


@pytest.mark.parametrize("settings", [FULL, SamplerSettings(1.0, 3, 1.0, 0.0),
                                      SamplerSettings(0.7, 0, 0.8, 0.05)])
def test_sampled_draft_is_lossless(settings):
    """A draft model samples from its own (different) distribution q."""
    draft_logits = np.array([[0.0, 1.0, 0.5, 0.0, 1.2, -0.3],
                             [0.2, 0.1, 0.0, 0.9, 0.0, 0.4]], np.float32)
    q = np.stack([sampling_probs(r, settings) for r in draft_logits])

    def draft_fn(rng):
        tokens = np.array([rng.choice(6, p=q[0]), rng.choice(6, p=q[1])], np.int32)
        return tokens, q

    counts = first_token_counts(LOGITS, draft_fn, settings, 20000, seed=1)
    assert chi_square(counts, sampling_probs(LOGITS[0], settings)) < CHI2_CRIT_DF5_P001


def test_a_wrong_distribution_is_detected():
    """The chi-square check can fail: counts from the draft's distribution are rejected."""
    rng = np.random.default_rng(2)
    wrong = sampling_probs(LOGITS[1], FULL)
    counts = np.bincount(rng.choice(6, size=20000, p=wrong), minlength=6).astype(float)
    assert chi_square(counts, sampling_probs(LOGITS[0], FULL)) > CHI2_CRIT_DF5_P001


def test_sampling_probs_chain():
    row = np.log(np.array([0.5, 0.3, 0.15, 0.05])).astype(np.float32)
    assert np.allclose(sampling_probs(row, SamplerSettings(1.0, 0, 1.0, 0.0)),
                       [0.5, 0.3, 0.15, 0.05], atol=1e-6)
    top2 = sampling_probs(row, SamplerSettings(1.0, 2, 1.0, 0.0))
    assert np.allclose(top2, [0.625, 0.375, 0, 0], atol=1e-6)
    top_p = sampling_probs(row, SamplerSettings(1.0, 0, 0.8, 0.0))  # 0.5 + 0.3 reaches 0.8
    assert np.count_nonzero(top_p) == 2
    min_p = sampling_probs(row, SamplerSettings(1.0, 0, 1.0, 0.2))  # keeps p >= 0.1
    assert np.count_nonzero(min_p) == 3
    cold = sampling_probs(row, SamplerSettings(0.5, 0, 1.0, 0.0))
    assert cold[0] == pytest.approx(0.25 / (0.25 + 0.09 + 0.0225 + 0.0025))


def test_same_seed_same_result():
    draft = np.array([3, 1], np.int32)
    a = [speculative_sample(LOGITS, draft, None, FULL, np.random.default_rng(9))[:2]
         for _ in range(3)]
    assert a[0] == a[1] == a[2]
