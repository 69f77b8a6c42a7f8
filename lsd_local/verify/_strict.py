"""Strict verification: keep draft tokens while they equal the target's argmax (lossless)."""

from __future__ import annotations

import numpy as np


def strict_greedy(logits: np.ndarray, draft: np.ndarray) -> tuple[int, int]:
    """Row by row with numpy's argmax (SIMD, several times a scalar loop's speed: see
    docs/benchmarks.md), stopping at the first mismatch: rows after it are never read.
    np.argmax's answer
    is the reference's, ties and NaN included (the first maximum, else the first NaN).
    logits: float32[K+1, V], draft: int32[K] -> (n_accept, next_token)."""
    for j, token in enumerate(draft.tolist()):
        target = int(logits[j].argmax())
        if target != token:
            return j, target
    return len(draft), int(logits[len(draft)].argmax())


def strict_reference(logits: np.ndarray, draft: np.ndarray) -> tuple[int, int]:
    """numpy reference. logits: float32[K+1, V], draft: int32[K] -> (n_accept, next_token)."""
    target = np.argmax(logits, axis=1)
    mismatches = np.flatnonzero(target[:-1] != draft)
    n_accept = int(mismatches[0]) if len(mismatches) else len(draft)
    return n_accept, int(target[n_accept])
