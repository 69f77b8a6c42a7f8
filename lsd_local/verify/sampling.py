"""Speculative sampling for temperature > 0 (Leviathan et al. 2023; Chen et al. 2023).

Draft token d[j] is kept with probability min(1, p_t(d) / p_d(d)); at the first rejection the
next token is drawn from the normalized residual max(0, p_t - p_d), after a full block from
p_t of the last row. A drafter without probabilities (prompt lookup) has p_d = one-hot. The
output distribution equals the target's. FLy may defer a rejection (see kernels/fly.py) when
the next W positions pass their own test; then the output is no longer exactly the
target's.
"""

from __future__ import annotations

import math

import numpy as np

from ..config import FLY_ENTROPY_TOP_K, SamplerSettings
from ..kernels.rows import entropy, top_entries


def sampling_probs(row: np.ndarray, s: SamplerSettings) -> np.ndarray:
    """row: float32[V] logits -> float64[V] probabilities after the sampler chain."""
    logits = row.astype(np.float64)
    v = logits.shape[0]
    # descending, ties by id (as a stable sort): the same top-k set whatever the tie
    keep = (top_entries(row, s.top_k) if 0 < s.top_k < v
            else np.argsort(-logits, kind="stable"))
    kept = logits[keep]
    p = np.exp(kept - kept[0])
    p /= p.sum()
    n_keep = len(keep)
    if s.top_p < 1.0:
        n_keep = min(n_keep, int(np.searchsorted(np.cumsum(p), s.top_p)) + 1)
    if s.min_p > 0.0:
        n_keep = min(n_keep, max(1, int(np.count_nonzero(p >= s.min_p * p[0]))))
    kept = kept[:n_keep] / s.temperature
    q = np.exp(kept - kept[0])
    out = np.zeros(v, np.float64)
    out[keep[:n_keep]] = q / q.sum()
    return out


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from the (possibly unnormalized) distribution p: float64[V]."""
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def _residual(p_target: np.ndarray, draft_row: np.ndarray | None, token: int) -> np.ndarray:
    if draft_row is None:
        residual = p_target.copy()
        residual[token] = 0.0
    else:
        residual = np.maximum(p_target - draft_row, 0.0)
    return residual if residual.sum() > 0.0 else p_target


def accept_tests(target_probs: np.ndarray, draft: np.ndarray, draft_probs: np.ndarray | None,
                 uniforms: np.ndarray) -> np.ndarray:
    """Per-position acceptance: u < p_t(d) / p_d(d). target_probs float64[K+1, V],
    draft int32[K], draft_probs float64[K, V] or None (one-hot), uniforms float64[K]."""
    k = len(draft)
    p_t = target_probs[np.arange(k), draft]
    p_d = np.ones(k) if draft_probs is None else draft_probs[np.arange(k), draft]
    return uniforms * p_d < p_t


def speculative_sample(logits: np.ndarray, draft: np.ndarray, draft_probs: np.ndarray | None,
                       settings: SamplerSettings, rng: np.random.Generator, *,
                       theta: float = np.inf, window: int = 1,
                       entropy_top_k: int = FLY_ENTROPY_TOP_K,
                       normalized: bool = False) -> tuple[int, int, np.ndarray]:
    """logits float32[K+1, V], draft int32[K], draft_probs float64[K, V] or None.
    Returns (n_accept, next_token, loose uint8[K]); theta < inf turns FLy deferral on.
    Consumes K uniforms for the tests, then one for the next token."""
    k = len(draft)
    target_probs = np.stack([sampling_probs(logits[i], settings) for i in range(k + 1)])
    accepted = accept_tests(target_probs, draft, draft_probs, rng.random(k))
    loose = np.zeros(k, np.uint8)
    n_accept = 0
    for j in range(1, k + 1):
        if accepted[j - 1]:
            n_accept = j
            continue
        if not _may_defer(logits, target_probs, draft, accepted, j, theta, window,
                          entropy_top_k, normalized):
            break
        loose[j - 1] = 1
        n_accept = j
    if n_accept == k:
        return n_accept, draw(target_probs[k], rng), loose
    draft_row = None if draft_probs is None else draft_probs[n_accept]
    residual = _residual(target_probs[n_accept], draft_row, int(draft[n_accept]))
    return n_accept, draw(residual, rng), loose


def _may_defer(logits: np.ndarray, target_probs: np.ndarray, draft: np.ndarray,
               accepted: np.ndarray, j: int, theta: float, window: int, entropy_top_k: int,
               normalized: bool) -> bool:  # logits float32[K+1, V], target_probs float64[K+1, V]
    """FLy under sampling: a rejected d[j] (1-based) is kept when the next `window` positions
    passed their tests, the target's sampler could produce d[j] (p_t > 0, as vLLM requires:
    never a token the user's top-k/top-p/min-p excludes; vLLM's p_d > 0 holds for every
    rejected token, since p_d = 0 passes the test u * p_d < p_t unless p_t = 0 too) and the
    target's entropy there is >= theta. theta = inf (strict) never reads the entropy, and a
    NaN entropy never passes."""
    if math.isinf(theta) or j + window > len(draft) or not accepted[j:j + window].all():
        return False
    if not target_probs[j - 1, int(draft[j - 1])] > 0.0:
        return False
    row = logits[j - 1]
    return bool(entropy(row, entropy_top_k, normalized) >= theta)
