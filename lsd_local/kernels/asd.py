"""ASD (Feng et al. 2026, approximate speculative decoding): a per-request regret budget.

At draft position j the regret of keeping d[j] is r[j] = z[y*] - z[d[j]] (raw logits). A
mismatch is an allowed exception iff r[j] / q[j] <= gate, with q[j] = K - j + 1. The kept
prefix is the longest one whose exceptions are allowed, number at most max_exceptions, and
whose total regret fits in budget - spent. budget == 0, max_exceptions == 0 or a spent budget
(spent >= budget) is strict, ties included (a tie is a mismatch with zero regret, so it needs
those switches, not the sum). Every test is written so that a NaN regret fails it.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def asd_kernel(logits, targets, draft, spent, gate, max_exceptions, budget, loose):
    """logits: float32[K+1, V], targets: int64[K+1] (np.argmax of each row, taken by the
    caller with numpy's SIMD argmax), draft: int32[K], loose: uint8[K] (out).
    Returns (n_accept, next_token, regret_added)."""
    k = draft.shape[0]
    loose[:] = 0
    allow = budget > 0.0 and max_exceptions > 0 and spent < budget
    n_accept = 0
    regret = 0.0
    n_exceptions = 0
    for j in range(1, k + 1):
        row = logits[j - 1]
        target = targets[j - 1]
        if target == draft[j - 1]:
            n_accept = j
            continue
        r = np.float64(row[target]) - np.float64(row[draft[j - 1]])
        if (not allow or not r / (k - j + 1) <= gate or n_exceptions + 1 > max_exceptions
                or not regret + r <= budget - spent):
            break
        regret += r
        n_exceptions += 1
        loose[j - 1] = 1
        n_accept = j
    return n_accept, targets[n_accept], regret


def asd_reference(logits: np.ndarray, draft: np.ndarray, spent: float, gate: float,
                  max_exceptions: int, budget: float) -> tuple[int, int, float, np.ndarray]:
    """numpy reference with the paper's cumulative sums over the whole block.
    logits: float32[K+1, V], draft: int32[K] -> (n_accept, next, regret_added, loose uint8[K])."""
    k = len(draft)
    z = logits.astype(np.float64)
    target = np.argmax(z, axis=1)
    match = target[:-1] == draft
    rows = np.arange(k)
    regret = z[rows, target[:-1]] - z[rows, draft]
    regret[match] = 0.0
    q = k - np.arange(1, k + 1) + 1
    allowed = match | ((regret / q <= gate) & (budget > 0) & (max_exceptions > 0)
                       & (spent < budget))
    exceptions = np.cumsum(~match)
    cumulative = np.cumsum(regret)
    feasible = np.cumsum(~allowed) == 0
    feasible &= exceptions <= max_exceptions
    feasible &= cumulative <= budget - spent
    infeasible = np.flatnonzero(~feasible)
    n_accept = int(infeasible[0]) if len(infeasible) else k
    added = float(cumulative[n_accept - 1]) if n_accept else 0.0
    loose = np.zeros(k, np.uint8)
    loose[:n_accept] = ~match[:n_accept]
    return n_accept, int(target[n_accept]), added, loose


def asd_run(logits: np.ndarray, draft: np.ndarray, spent: float, gate: float,
            max_exceptions: int, budget: float) -> tuple[int, int, float, np.ndarray]:
    """asd_kernel as asd_reference is called: logits float32[K+1, V], draft int32[K] ->
    (n_accept, next_token, regret added, loose uint8[K])."""
    loose = np.zeros(len(draft), np.uint8)
    n_accept, next_token, added = asd_kernel(logits, logits.argmax(axis=1), draft, spent, gate,
                                             max_exceptions, budget, loose)
    return int(n_accept), int(next_token), float(added), loose
