"""Verification rules as configured objects: parameters, validation and the ASD ledger.

The round loop calls `verifier.verify(logits, draft, rng)`; cache surgery stays in the loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .config import (
    ASD_BUDGET,
    ASD_GATE,
    ASD_MAX_EXCEPTIONS,
    FLY_ENTROPY,
    FLY_ENTROPY_TOP_K,
    FLY_THETA,
    FLY_WINDOW,
)
from .drafters.base import Draft
from .errors import ParameterError, check
from .verify import Verdict, asd, check_asd, check_fly, default_window, fly, strict
from .verify.sampling import SamplerSettings, speculative_sample

RULES = ("strict", "fly", "asd")



@dataclass(frozen=True)
class RuleConfig:
    """Which verification rule to use and its parameters."""

    rule: str = "strict"
    theta: float = FLY_THETA  # FLy entropy threshold; inf = strict
    window: int | None = None  # FLy deferred window W; None = min(FLY_WINDOW, K-1)
    entropy_top_k: int = FLY_ENTROPY_TOP_K  # FLy: entropy over the k_e largest probabilities
    entropy: str = FLY_ENTROPY  # FLy: "topk" (reference code, vLLM) or "normalized" (paper)
    gate: float = ASD_GATE  # ASD local gate g
    max_exceptions: int = ASD_MAX_EXCEPTIONS  # ASD per-block exception cap M
    budget: float = ASD_BUDGET  # ASD per-request regret budget B

    def validate(self) -> None:
        """Raise ParameterError naming the first invalid parameter."""
        check(self.rule in RULES, "rule", f"{self.rule!r} (choose one of {', '.join(RULES)})")
        check_fly(self.theta, 1 if self.window is None else self.window, self.entropy_top_k,
                  self.entropy)
        check_asd(self.gate, self.max_exceptions, self.budget)


class Verifier:
    """Applies one rule to a block; holds the per-request ASD ledger (`regret_spent`)."""

    def __init__(self, config: RuleConfig, sampler: SamplerSettings | None) -> None:
        config.validate()
        if sampler is not None and config.rule == "asd":
            raise ParameterError("invalid rule: ASD is defined for greedy decoding only; use "
                                 "temperature 0, or rule 'strict'/'fly' for sampling")
        self.config = config
        self.sampler = sampler
        self.regret_spent = 0.0

    def reset(self) -> None:
        """Start a new request: the ASD ledger goes back to zero."""
        self.regret_spent = 0.0

    def verify(self, logits: np.ndarray, draft: Draft, rng: np.random.Generator) -> Verdict:
        """logits float32[K+1, V] for the K tokens of `draft`."""
        c = self.config
        k = len(draft)
        window = default_window(k, FLY_WINDOW) if c.window is None else c.window
        if self.sampler is not None:
            theta = c.theta if c.rule == "fly" else math.inf  # strict never reads entropy
            n, nxt, loose = speculative_sample(logits, draft.tokens, draft.probs, self.sampler,
                                               rng, theta=theta, window=window,
                                               top_k=c.entropy_top_k,
                                               normalized=c.entropy == "normalized")
            return Verdict(n, nxt, loose)
        if c.rule == "fly":
            return fly(logits, draft.tokens, theta=c.theta, window=window, top_k=c.entropy_top_k,
                       entropy=c.entropy)
        if c.rule == "asd":
            verdict = asd(logits, draft.tokens, spent=min(self.regret_spent, c.budget),
                          gate=c.gate, max_exceptions=c.max_exceptions, budget=c.budget)
            self.regret_spent += verdict.regret_added
            return verdict
        return strict(logits, draft.tokens)

