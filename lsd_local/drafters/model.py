"""A small model with the target's vocabulary drafts greedily (or by sampling).

Its KV cache is kept across rounds: before drafting, only the cached positions that disagree
with the committed tokens are dropped (longest common prefix) and only what is new is
evaluated. Greedy drafting stops early when the draft's top-1 probability falls under p_min,
taken over its 10 likeliest tokens exactly as llama.cpp's --draft-p-min (its draft sampler
keeps the top 10 and takes their softmax): one vectorized pass over the row instead of a
softmax over the whole vocabulary (what it saves: docs/how-it-works.md).
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np

from ..config import P_MIN, P_MIN_TOP_K, SamplerSettings
from ..errors import check
from ..kernels.rows import top_share
from ..verify.constrain import constrain_row
from ..verify.sampling import draw, sampling_probs
from .base import EMPTY_DRAFT, DecodeCall, Draft, Drafter, DraftSteps, run_steps


def greedy_choice(row: np.ndarray) -> tuple[int, float]:
    """(argmax, its probability over the P_MIN_TOP_K likeliest tokens) of a C-contiguous
    float32[V] logits row: the greedy draft token and its p_min test."""
    row = np.ascontiguousarray(row)  # the kernel views it as [64, V // 64]; free for C rows
    return top_share(row, P_MIN_TOP_K)


class ModelDrafter(Drafter):
    """Draft model drafter. `model` is a backend Model (duck-typed: decode, truncate,
    reuse_prefix, n_cached)."""

    name = "model"

    def __init__(self, model, p_min: float = P_MIN) -> None:
        check(0.0 <= p_min <= 1.0, "p_min", f"{p_min} (must be within [0, 1])")
        self.model = model
        self.p_min = p_min
        self.n_evaluated = 0  # draft tokens evaluated so far (shows the KV reuse)
        self.n_forward = 0  # draft forward passes so far

    def _eval_steps(self, tokens: np.ndarray, n_rows: int
                    ) -> Generator[DecodeCall, np.ndarray, np.ndarray]:
        """Append tokens to the draft cache; logits float32[n_rows, V] of the last rows."""
        self.n_evaluated += len(tokens)
        self.n_forward += 1
        return (yield DecodeCall(self.model, np.asarray(tokens, np.int32), n_rows))

    def pending(self, history: np.ndarray) -> int:
        """Committed tokens the draft cache still has to evaluate before it can draft."""
        return max(0, len(history) - self.model.n_cached)

    def sync_steps(self, history: np.ndarray) -> Generator[DecodeCall, np.ndarray, np.ndarray]:
        """Bring the draft cache to `history` (int32[n]); logits row float32[V] after it."""
        keep = self.model.reuse_prefix(history, len(history) - 1)
        return (yield from self._eval_steps(history[keep:], 1))[0]

    def propose(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                rng: np.random.Generator | None = None, grammar=None) -> Draft:
        """Up to k tokens; with a grammar (same vocabulary as the target's), each is the best
        (or a sampled) allowed token, so grammar-forced text is drafted, not guessed."""
        return run_steps(self.propose_steps(history, k, sampler, rng, grammar))

    def propose_steps(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                      rng: np.random.Generator | None = None, grammar=None) -> DraftSteps:
        if k <= 0:
            return EMPTY_DRAFT
        row = yield from self.sync_steps(history)
        state = grammar.clone() if grammar is not None else None
        try:
            return (yield from self._draft_steps(row, k, sampler, rng, state))
        finally:
            if state is not None:
                state.close()

    def _draft_steps(self, row: np.ndarray, k: int, sampler, rng, state) -> DraftSteps:
        """row: float32[V] logits after the history (changed in place under a grammar)."""
        tokens: list[int] = []
        probs: list[np.ndarray] = []
        while True:
            if state is not None:
                constrain_row(state, row, sampler.top_k if sampler is not None else 1)
            if sampler is not None:
                p = sampling_probs(row, sampler)
                token = draw(p, rng)
                probs.append(p)
            else:
                token, p_top = greedy_choice(row)
                if not p_top >= self.p_min:  # NaN (no finite logit) stops too
                    break
            tokens.append(int(token))
            if len(tokens) == k or self.model.vocab.is_eog(int(token)):
                break  # (nothing after an end-of-generation token is committed: base.py)
            if state is not None:
                state.accept(int(token), checked=True)  # constrain_row's choice
            row = (yield from self._eval_steps(np.array([token], np.int32), 1))[0]
        return Draft(np.array(tokens, np.int32), np.stack(probs) if probs else None)

    def reset(self) -> None:
        """Forget the draft cache (the next proposal re-evaluates the history)."""
        self.model.truncate(0)
