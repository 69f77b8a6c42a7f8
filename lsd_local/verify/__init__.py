"""Verification rules: pure functions over a block of target logits and a draft.

Every rule takes `logits: float32[K+1, V]` (row i predicts the token after draft[i-1], row 0
the token after the pending committed token) and `draft: int32[K]`, and returns a Verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import check
from .asd import asd_kernel
from .fly import fly_kernel
from .sampling import SamplerSettings, sampling_probs, speculative_sample
from .strict import strict_kernel

__all__ = ["Verdict", "strict", "fly", "asd", "speculative_sample", "SamplerSettings",
           "sampling_probs", "default_window", "ENTROPY_MODES"]

ENTROPY_MODES = ("topk", "normalized")


@dataclass(frozen=True)
class Verdict:
    """What a verifier decided about one block."""

    n_accept: int  # draft tokens kept, 0..K
    next_token: int  # target's token after them (correction if n_accept < K, else bonus)
    loose: np.ndarray = field(repr=False)  # uint8[K]: 1 where a kept token was a mismatch
    regret_added: float = 0.0  # ASD only: regret charged to the request's ledger

    @property
    def n_loose(self) -> int:
        return int(self.loose[:self.n_accept].sum())


def _as_block(logits: np.ndarray, draft: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    logits = np.asarray(logits, dtype=np.float32)
    draft = np.asarray(draft, dtype=np.int32)
    if logits.ndim != 2 or draft.ndim != 1 or logits.shape[0] != draft.shape[0] + 1:
        raise ValueError(f"need logits [K+1, V] and draft [K], got {logits.shape} and "
                         f"{draft.shape}")
    if draft.size and (draft.min() < 0 or draft.max() >= logits.shape[1]):
        raise ValueError("draft token id outside the vocabulary")
    return logits, draft


def default_window(k: int, cap: int = 6) -> int:
    """FLy's default window W = min(cap, K - 1), at least 1 (the paper's cap is 6)."""
    return max(1, min(cap, k - 1))


def strict(logits: np.ndarray, draft: np.ndarray) -> Verdict:
    """Keep the longest prefix of `draft` equal to the target's argmax (lossless)."""
    logits, draft = _as_block(logits, draft)
    n_accept, next_token = strict_kernel(logits, draft)
    return Verdict(int(n_accept), int(next_token), np.zeros(len(draft), np.uint8))


def fly(logits: np.ndarray, draft: np.ndarray, *, theta: float = 0.3, window: int | None = None,
        top_k: int = 3, entropy: str = "topk") -> Verdict:
    """FLy: also keep a mismatch whose target entropy is >= theta when the next `window`
    draft tokens match. theta=inf or window >= K reproduces strict."""
    logits, draft = _as_block(logits, draft)
    window = default_window(len(draft)) if window is None else window
    check_fly(theta, window, top_k, entropy)
    loose = np.zeros(len(draft), np.uint8)
    n_accept, next_token = fly_kernel(logits, draft, float(theta), int(window), int(top_k),
                                      entropy == "normalized", loose)
    return Verdict(int(n_accept), int(next_token), loose)


def asd(logits: np.ndarray, draft: np.ndarray, *, spent: float = 0.0, gate: float = 1.0,
        max_exceptions: int = 2, budget: float = 8.0) -> Verdict:
    """ASD: keep mismatches whose regret fits the gate, the exception cap and what is left of
    the request's regret budget. budget=0 or max_exceptions=0 reproduces strict."""
    logits, draft = _as_block(logits, draft)
    check_asd(gate, max_exceptions, budget)
    check(0.0 <= spent <= budget, "spent", f"{spent} (must be within [0, budget={budget}])")
    loose = np.zeros(len(draft), np.uint8)
    n_accept, next_token, added = asd_kernel(logits, draft, float(spent), float(gate),
                                             int(max_exceptions), float(budget), loose)
    return Verdict(int(n_accept), int(next_token), loose, float(added))


def check_fly(theta: float, window: int, top_k: int, entropy: str) -> None:
    """Validate FLy parameters (ParameterError names the bad one)."""
    check(theta >= 0, "theta", f"{theta} (entropy threshold must be >= 0; inf = strict)")
    check(window >= 1, "window", f"{window} (must be >= 1)")
    check(top_k >= 1, "entropy top_k", f"{top_k} (must be >= 1)")
    check(entropy in ENTROPY_MODES, "entropy", f"{entropy!r} (choose topk or normalized)")


def check_asd(gate: float, max_exceptions: int, budget: float) -> None:
    """Validate ASD parameters (ParameterError names the bad one)."""
    check(gate >= 0, "gate", f"{gate} (must be >= 0)")
    check(max_exceptions >= 0, "max_exceptions", f"{max_exceptions} (must be >= 0)")
    check(budget >= 0, "budget", f"{budget} (must be >= 0)")
