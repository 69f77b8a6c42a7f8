"""Multi-level drafting (FLy's MLA): the draft model's own steps are sped up by prompt lookup.

An n-gram continuation is proposed from the context, the draft model checks it in one batch
against its own greedy choice (strict), and what it agrees with is kept. The drafted text is
exactly the draft model's greedy output, only produced in fewer forward passes.
"""

from __future__ import annotations

import numpy as np

from ..config import MAX_NGRAM, MIN_NGRAM, P_MIN, SamplerSettings
from .base import EMPTY_DRAFT, Draft, DraftSteps, through_stop
from .lookup import lookup_any
from .model import ModelDrafter, greedy_choice


class MultiLevelDrafter(ModelDrafter):
    """Draft model accelerated by prompt lookup (greedy; sampled drafts fall back to plain)."""

    name = "multilevel"

    def __init__(self, model, p_min: float = P_MIN, max_ngram: int = MAX_NGRAM,
                 min_ngram: int = MIN_NGRAM) -> None:
        super().__init__(model, p_min)
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._work = np.zeros(model.n_ctx + 1, np.int32)
        self._guess = np.zeros(64, np.int32)

    def _lookup(self, n: int, k: int) -> np.ndarray:
        if len(self._guess) < k:
            self._guess = np.zeros(k, np.int32)
        m = lookup_any(self._work[:n], self.max_ngram, self.min_ngram, k, self._guess)[0]
        return self._guess[:m]

    def propose_steps(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                      rng: np.random.Generator | None = None, grammar=None) -> DraftSteps:
        if sampler is not None or grammar is not None:
            # sampled or grammar-constrained drafts: the draft model token by token (its
            # lookup-accelerated passes assume unconstrained greedy choices)
            return (yield from super().propose_steps(history, k, sampler, rng, grammar))
        if k <= 0:
            return EMPTY_DRAFT
        n = len(history)
        self._work[:n] = history
        row = yield from self.sync_steps(history)
        n_draft = 0
        while n_draft < k:
            token, p_top = greedy_choice(row)
            if not p_top >= self.p_min:  # NaN (no finite logit) stops too
                break
            self._work[n + n_draft] = token
            n_draft += 1
            if n_draft == k or self.model.vocab.is_eog(int(token)):
                break
            guess = self._lookup(n + n_draft, k - n_draft)
            batch = np.concatenate(([token], guess)).astype(np.int32)
            pos = self.model.n_cached
            rows = yield from self._eval_steps(batch, len(batch))
            n_ok = 0
            for i in range(len(guess)):
                agreed, p_top = greedy_choice(rows[i])
                if agreed != guess[i] or not p_top >= self.p_min or n_draft == k:
                    break
                self._work[n + n_draft] = agreed
                n_draft += 1
                n_ok += 1
            self.model.truncate(pos + 1 + n_ok)  # drop the guesses the draft model rejected
            row = rows[n_ok]
        drafted = self._work[n:n + n_draft]  # (an accepted guess may be an end token too)
        return Draft(drafted[:through_stop(drafted, self.model.vocab.is_eog)].copy())
