"""A verification rule as a configured object: parameters, validation and the ASD ledger.

The round loop calls `verifier.verify(logits, tokens, probs, rng)` on arrays; cache surgery
stays in the loop.
"""

from __future__ import annotations

import math

import numpy as np

from ..config import FLY_WINDOW, RuleConfig, SamplerSettings
from ..errors import ParameterError
from . import Verdict, asd, default_window, fly, strict
from .sampling import speculative_sample

NO_LOOSE = np.zeros(0, np.uint8)  # the `loose` flags of an empty draft


class Verifier:
    """Applies one rule to a block; holds the per-request ASD ledger (`regret_spent`)."""

    def __init__(self, config: RuleConfig, sampler: SamplerSettings | None) -> None:
        config.validate()
        if sampler is not None and config.rule == "asd":
            raise ParameterError("invalid rule: ASD is defined for greedy decoding only; use "
                                 "temperature 0, or rule 'strict'/'fly' for sampling",
                                 param="rule")
        self.config = config
        self.sampler = sampler
        self.regret_spent = 0.0

    def verify(self, logits: np.ndarray, tokens: np.ndarray, probs: np.ndarray | None,
               rng: np.random.Generator) -> Verdict:
        """logits float32[K+1, V], tokens int32[K] (the draft), probs float64[K, V] (the
        draft's distributions when it sampled; None = one-hot), rng for sampling."""
        c = self.config
        if len(tokens) == 0 and self.sampler is None:
            # a plain step under every rule is the target's argmax: one np.argmax, without
            # the block checks and kernel call a rule makes (the same answer)
            return Verdict(0, int(np.argmax(logits[0])), NO_LOOSE)
        window = default_window(len(tokens), FLY_WINDOW) if c.window is None else c.window
        if self.sampler is not None:
            theta = c.theta if c.rule == "fly" else math.inf  # strict never reads entropy
            n, nxt, loose = speculative_sample(logits, tokens, probs, self.sampler, rng,
                                               theta=theta, window=window,
                                               entropy_top_k=c.entropy_top_k,
                                               normalized=c.entropy == "normalized")
            return Verdict(n, nxt, loose)
        if c.rule == "fly":
            return fly(logits, tokens, theta=c.theta, window=window,
                       entropy_top_k=c.entropy_top_k, entropy=c.entropy)
        if c.rule == "asd":
            verdict = asd(logits, tokens, spent=min(self.regret_spent, c.budget), gate=c.gate,
                          max_exceptions=c.max_exceptions, budget=c.budget)
            self.regret_spent += verdict.regret_added
            return verdict
        return strict(logits, tokens)
