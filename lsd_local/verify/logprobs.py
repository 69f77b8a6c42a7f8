"""The target's log-probabilities of committed tokens, from the rows that verified them.

Every committed token, drafted (exactly or loosely) or the target's own, was scored by one
row of the verified block: its log-probability is that row's log-softmax (after grammar
masking, biases and penalties: what the rule saw), at temperature 1. Computed only when a
request asks for logprobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.rows import top_entries


@dataclass(frozen=True)
class TokenLogprob:
    """One committed token's log-probability and the `top` likeliest tokens of its row."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, log-probability), likeliest first


def log_normalizer(row: np.ndarray) -> float:
    """log(sum(exp(row))), stable (row: float32[V]; -inf entries add nothing): numpy's SIMD
    exp in float32, summed in float64 (within 1e-5 of an all-float64 sum, tests/unit/
    test_logprobs.py, for a fraction of its cost: docs/how-it-works.md)."""
    peak = row.max()
    if not np.isfinite(peak):
        return float(peak)
    return float(peak) + float(np.log(np.exp(row - peak).sum(dtype=np.float64)))


def token_logprobs(rows: np.ndarray, tokens: list[int], top_n: int) -> tuple[TokenLogprob, ...]:
    """rows: float32[n, V], row i scored tokens[i] (int, n of them); top_n: alternatives per
    token (0: none)."""
    out = []
    for row, token in zip(rows, tokens, strict=True):
        norm = log_normalizer(row)
        top = ()
        if top_n > 0:
            best = top_entries(np.ascontiguousarray(row), top_n)
            top = tuple((int(t), float(row[t]) - norm) for t in best)
        out.append(TokenLogprob(int(token), float(row[token]) - norm, top))
    return tuple(out)
