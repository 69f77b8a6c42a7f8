"""Strict verification: keep draft tokens while they equal the target's argmax (lossless)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ._rows import row_argmax


@njit(cache=True, nogil=True)
def strict_kernel(logits, draft):  # logits: float32[K+1, V], draft: int32[K]
    k = draft.shape[0]
    n_accept = 0
    for j in range(k):
        if row_argmax(logits[j]) != draft[j]:
            break
        n_accept += 1
    return n_accept, row_argmax(logits[n_accept])


def strict_reference(logits: np.ndarray, draft: np.ndarray) -> tuple[int, int]:
    """numpy reference. logits: float32[K+1, V], draft: int32[K] -> (n_accept, next_token)."""
    target = np.argmax(logits, axis=1)
    mismatches = np.flatnonzero(target[:-1] != draft)
    n_accept = int(mismatches[0]) if len(mismatches) else len(draft)
    return n_accept, int(target[n_accept])
