"""Verification rules: pure functions over a block of target logits and a draft. The rules
are `strict`, `fly` and `asd` (here); strict's numpy code lives in _strict.py, FLy's and
ASD's numba kernels and numpy references in kernels/fly.py and kernels/asd.py.

Every rule takes `logits: float32[K+1, V]` (row i predicts the token after draft[i-1], row 0
the token after the pending committed token) and `draft: int32[K]`, and returns a Verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config import (
    ASD_BUDGET,
    ASD_GATE,
    ASD_MAX_EXCEPTIONS,
    ENTROPY_MODES,
    FLY_ENTROPY,
    FLY_ENTROPY_TOP_K,
    FLY_THETA,
    FLY_WINDOW,
    SamplerSettings,
    check_asd,
    check_fly,
)
from ..errors import check
from ..kernels.asd import asd_reference, asd_run
from ..kernels.fly import fly_reference, fly_run
from ..kernels.jit import kernel_or
from ._strict import strict_greedy, strict_reference
from .sampling import sampling_probs, speculative_sample

__all__ = ["Verdict", "strict", "fly", "asd", "speculative_sample", "SamplerSettings",
           "sampling_probs", "default_window", "ENTROPY_MODES", "strict_reference",
           "fly_reference", "asd_reference"]


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


def default_window(k: int, cap: int = FLY_WINDOW) -> int:
    """FLy's default window W = min(cap, K - 1), at least 1.

    W counts the draft tokens *after* a mismatch that must all match (vLLM's
    `fly_window_size`, whose default cap is 6). AMD's reference code counts the mismatch
    itself in its `win_len` (its 6 means 5 following tokens), never accepts a window that
    touches the last draft token and switches FLy off when K < win_len: no W reproduces it.
    lsd's cap (4) was chosen by `lsd bench --tune`."""
    return max(1, min(cap, k - 1))


def strict(logits: np.ndarray, draft: np.ndarray) -> Verdict:
    """Keep the longest prefix of `draft` equal to the target's argmax (lossless)."""
    logits, draft = _as_block(logits, draft)
    n_accept, next_token = strict_greedy(logits, draft)
    return Verdict(n_accept, next_token, np.zeros(len(draft), np.uint8))


def fly(logits: np.ndarray, draft: np.ndarray, *, theta: float = FLY_THETA,
        window: int | None = None, entropy_top_k: int = FLY_ENTROPY_TOP_K,
        entropy: str = FLY_ENTROPY) -> Verdict:
    """FLy: also keep a mismatch at draft position j (1-based) whose target entropy is >= theta
    when the `window` draft tokens after it (j+1..j+W, all inside the block: j + W <= K) match
    the target's argmax. vLLM's rule; see default_window for how AMD's differs. theta=inf or
    window >= K reproduces strict; a NaN entropy never opens the gate.
    logits: float32[K+1, V], draft: int32[K]."""
    logits, draft = _as_block(logits, draft)
    window = default_window(len(draft)) if window is None else window
    check_fly(theta, window, entropy_top_k, entropy)
    return Verdict(*kernel_or(fly_run, fly_reference)(
        logits, draft, float(theta), int(window), int(entropy_top_k), entropy == "normalized"))


def asd(logits: np.ndarray, draft: np.ndarray, *, spent: float = 0.0, gate: float = ASD_GATE,
        max_exceptions: int = ASD_MAX_EXCEPTIONS, budget: float = ASD_BUDGET) -> Verdict:
    """ASD: keep mismatches whose regret fits the gate, the exception cap and what is left of
    the request's regret budget. budget=0, max_exceptions=0 or a spent budget (spent >= budget)
    reproduces strict, ties included. logits: float32[K+1, V], draft: int32[K]."""
    logits, draft = _as_block(logits, draft)
    check_asd(gate, max_exceptions, budget)
    check(0.0 <= spent <= budget, "spent", f"{spent} (must be within [0, budget={budget}])")
    n_accept, next_token, added, loose = kernel_or(asd_run, asd_reference)(
        logits, draft, float(spent), float(gate), int(max_exceptions), float(budget))
    return Verdict(int(n_accept), int(next_token), loose, float(added))
