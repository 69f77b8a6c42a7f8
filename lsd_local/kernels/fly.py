"""FLy (Li et al., arXiv 2511.22972): an entropy gate plus a deferred window.

A mismatch at draft position j (1-based) is accepted iff the target's top-k entropy at that
row is >= theta, the window fits in the block (j + W <= K), and the next W draft tokens all
match the target's argmax (the target went on with the draft instead of correcting it).
This is vLLM's rule (`fly_window_size` = W); AMD's reference code differs (see
`default_window`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .rows import row_entropy, row_entropy_reference


@njit(cache=True, nogil=True)
def fly_kernel(logits, targets, draft, theta, window, top_k, normalized, loose):
    """logits: float32[K+1, V], targets: int64[K+1] (np.argmax of each row: numpy's SIMD
    argmax beats a scalar loop, so the caller takes it for every row), draft: int32[K],
    loose: uint8[K] (out: 1 = accepted mismatch). Returns (n_accept, next_token). Only rows
    whose entropy the gate needs are read here."""
    k = draft.shape[0]
    loose[:] = 0
    n_accept = 0
    for j in range(1, k + 1):
        target = targets[j - 1]
        if target == draft[j - 1]:
            n_accept = j
            continue
        if j + window > k:
            break
        row = logits[j - 1]
        if not row_entropy(row, row[target], top_k, normalized) >= theta:
            break  # written so that a NaN entropy closes the gate
        continued = True
        for i in range(j + 1, j + window + 1):
            if targets[i - 1] != draft[i - 1]:
                continued = False
                break
        if not continued:
            break
        loose[j - 1] = 1
        n_accept = j
    return n_accept, targets[n_accept]


def fly_reference(logits: np.ndarray, draft: np.ndarray, theta: float, window: int, top_k: int,
                  normalized: bool) -> tuple[int, int, np.ndarray]:
    """numpy version (tests; the fallback until kernels load): match for every row, then the
    longest prefix whose mismatches pass the gate and the window. An entropy is computed only
    for a mismatch that the window leaves in question (a row costs O(V)).
    logits: float32[K+1, V], draft: int32[K] -> (n_accept, next_token, loose uint8[K])."""
    k = len(draft)
    target = np.argmax(logits, axis=1)
    match = target[:-1] == draft
    n_accept = 0
    for j in range(1, k + 1):  # 1-based draft position
        if not match[j - 1]:
            window_ok = j + window <= k and bool(match[j:j + window].all())
            if not (window_ok and row_entropy_reference(logits[j - 1], top_k, normalized)
                    >= theta):
                break
        n_accept = j
    loose = np.zeros(k, np.uint8)
    loose[:n_accept] = ~match[:n_accept]
    return n_accept, int(target[n_accept]), loose


def fly_run(logits: np.ndarray, draft: np.ndarray, theta: float, window: int, top_k: int,
            normalized: bool) -> tuple[int, int, np.ndarray]:
    """fly_kernel as fly_reference is called: logits float32[K+1, V], draft int32[K] ->
    (n_accept, next_token, loose uint8[K])."""
    loose = np.zeros(len(draft), np.uint8)
    n_accept, next_token = fly_kernel(logits, logits.argmax(axis=1), draft, theta, window,
                                      top_k, normalized, loose)
    return int(n_accept), int(next_token), loose
