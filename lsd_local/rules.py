"""Verification rules as configured objects: parameters, validation and the ASD ledger.

The round loop calls `verifier.verify(logits, draft, rng)`; cache surgery stays in the loop.
"""

from __future__ import annotations

import math

import numpy as np

from .config import FLY_WINDOW, RuleConfig, SamplerSettings
from .drafters.base import Draft
from .errors import ParameterError
from .verify import Verdict, asd, default_window, fly, strict
from .verify.sampling import speculative_sample


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

    def verify(self, logits: np.ndarray, draft: Draft, rng: np.random.Generator) -> Verdict:
        """logits float32[K+1, V] for the K tokens of `draft`."""
        c = self.config
        k = len(draft)
        window = default_window(k, FLY_WINDOW) if c.window is None else c.window
        if self.sampler is not None:
            theta = c.theta if c.rule == "fly" else math.inf  # strict never reads entropy
            n, nxt, loose = speculative_sample(logits, draft.tokens, draft.probs, self.sampler,
                                               rng, theta=theta, window=window,
                                               entropy_top_k=c.entropy_top_k,
                                               normalized=c.entropy == "normalized")
            return Verdict(n, nxt, loose)
        if c.rule == "fly":
            return fly(logits, draft.tokens, theta=c.theta, window=window,
                       entropy_top_k=c.entropy_top_k,
                       entropy=c.entropy)
        if c.rule == "asd":
            verdict = asd(logits, draft.tokens, spent=min(self.regret_spent, c.budget),
                          gate=c.gate, max_exceptions=c.max_exceptions, budget=c.budget)
            self.regret_spent += verdict.regret_added
            return verdict
        return strict(logits, draft.tokens)

