"""The round loop: draft, score the block in one target pass, verify, commit, truncate.

Invariant between rounds: `history` holds the committed tokens c[0..n-1]; the target's KV cache
holds c[0..n-2]; c[n-1] is pending. A round evaluates [c[n-1], d1..dK] at positions n-1..n-1+K
with logits for those K+1 rows only, keeps L draft tokens plus the verifier's next token, and
truncates the target cache to n+L. A plain decoding step is the same round with K = 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter

import numpy as np

from .config import SamplerSettings
from .constrain import prepare_block
from .drafters.base import EMPTY_DRAFT, Draft, Drafter
from .rules import Verifier
from .stats import Origin, RoundEvent
from .text import TextAssembler


class TokenBuffer:
    """Committed tokens in a preallocated int32 array (drafters read a view, no copies)."""

    def __init__(self, capacity: int) -> None:
        self.data = np.zeros(capacity, np.int32)
        self.n = 0

    def view(self) -> np.ndarray:
        return self.data[:self.n]

    def set(self, tokens: list[int] | np.ndarray) -> None:
        self.n = len(tokens)
        self.data[:self.n] = tokens

    def extend(self, tokens: list[int]) -> None:
        self.data[self.n:self.n + len(tokens)] = tokens
        self.n += len(tokens)


@dataclass(frozen=True)
class Request:
    """Per-request settings of the loop."""

    max_tokens: int
    k: int  # largest draft per round (0 = plain decoding)
    sampler: SamplerSettings | None  # None = greedy
    rng: np.random.Generator
    grammar: object | None = None  # backend Grammar: state after the committed tokens
    grammar_top: int = 1  # allowed tokens exact at the top of each row (constrain.py)


def _grammar_block(req: Request, logits: np.ndarray, draft: Draft,
                   stop_at_mismatch: bool) -> tuple[np.ndarray, Draft]:
    """Constrain the block to the grammar (in place) and cut the draft where the verifier must
    stop. A sampled draft's p_d rows stay: drafters sample inside the grammar (model.py), so p_d
    is the draft's constrained distribution, as speculative sampling needs."""
    n_ready = prepare_block(req.grammar, logits, draft.tokens, req.grammar_top, stop_at_mismatch)
    probs = None if draft.probs is None else draft.probs[:n_ready]
    cut = Draft(draft.tokens[:n_ready], probs, draft.source)
    return logits[:n_ready + 1], cut


def _advance_grammar(req: Request, tokens: list[int], eog: bool) -> None:
    """The grammar state follows committed tokens only (an end-of-generation token ends it)."""
    if req.grammar is not None:
        for token in tokens[:len(tokens) - 1 if eog else len(tokens)]:
            req.grammar.accept(token)


def _verify(verifier: Verifier, req: Request, logits: np.ndarray,
            draft: Draft) -> tuple[object, Draft, float]:
    """Verify one block, grammar first when there is one; returns the draft actually verified
    and the seconds spent on the grammar."""
    if req.grammar is None:
        return verifier.verify(logits, draft, req.rng), draft, 0.0
    t0 = perf_counter()
    strict_greedy = req.sampler is None and verifier.config.rule == "strict"
    logits, draft = _grammar_block(req, logits, draft, strict_greedy)
    seconds = perf_counter() - t0
    return verifier.verify(logits, draft, req.rng), draft, seconds


def _commit(verdict, draft: Draft, is_eog) -> tuple[list[int], list[Origin], bool]:
    """Tokens to commit for a verdict, cut after the first end-of-generation token."""
    tokens = [int(t) for t in draft.tokens[:verdict.n_accept]] + [verdict.next_token]
    origins = [Origin.DRAFT_LOOSE if verdict.loose[j] else Origin.DRAFT_EXACT
               for j in range(verdict.n_accept)] + [Origin.TARGET]
    for i, token in enumerate(tokens):
        if is_eog(token):
            return tokens[:i + 1], origins[:i + 1], True
    return tokens, origins, False


def _finish_reason(eog: bool, generated: int, req: Request, n: int, n_ctx: int) -> str | None:
    if eog:
        return "stop"
    if generated >= req.max_tokens or n >= n_ctx:
        return "length"
    return None


def run_rounds(target, drafter: Drafter | None, verifier: Verifier, history: TokenBuffer,
               req: Request, text: TextAssembler) -> Iterator[RoundEvent]:
    """Generate until EOS, a stop string, max_tokens or a full context; one event per round.

    `target` is a backend Model whose cache holds history[:-1]. The caller restores that
    invariant if the generator is abandoned mid-way (see Engine).
    """
    generated = 0
    observe = getattr(drafter, "observe", None)  # cost-aware drafters learn from each round
    name = drafter.name if drafter is not None else "none"
    while True:
        t0 = perf_counter()
        n = history.n
        # commit at most k + 1 tokens: within max_tokens and the context (n + k + 1 <= n_ctx)
        k = min(req.k, req.max_tokens - generated - 1, target.n_ctx - n - 1)
        draft = EMPTY_DRAFT
        if drafter is not None and k > 0:
            draft = drafter.propose(history.view(), k, req.sampler, req.rng, req.grammar)
        t1 = perf_counter()
        block = np.empty(len(draft) + 1, np.int32)
        block[0] = history.data[n - 1]
        block[1:] = draft.tokens
        logits = target.decode(block, n - 1, len(block))
        verdict, verified, constrain_s = _verify(verifier, req, logits, draft)
        t2 = perf_counter()
        if observe is not None:
            observe(len(draft), verdict.n_accept, t2 - t1)
        tokens, origins, eog = _commit(verdict, verified, target.is_eog)
        _advance_grammar(req, tokens, eog)
        history.extend(tokens)
        target.truncate(history.n - 1)
        generated += len(tokens)
        n_text = len(tokens) - 1 if eog else len(tokens)  # only the last can be EOG
        for token, origin in zip(tokens[:n_text], origins[:n_text], strict=True):
            text.add(token, origin)
        finish = _finish_reason(eog, generated, req, history.n, target.n_ctx)
        if finish:
            text.finish()
        delta, spans = text.release(final=finish is not None)
        if text.stopped:
            finish = "stop"
        n_accepted = len(tokens) - 1 if origins[-1] is Origin.TARGET else len(tokens)
        yield RoundEvent(
            tokens=tuple(tokens), origins=tuple(origins), text=delta, spans=spans,
            n_drafted=len(draft), n_accepted=n_accepted,
            draft_source=(draft.source or name) if len(draft) else "none",
            n_loose=sum(o is Origin.DRAFT_LOOSE for o in origins),
            draft_seconds=t1 - t0, verify_seconds=t2 - t1, other_seconds=perf_counter() - t2,
            finish_reason=finish, constrain_seconds=constrain_s)
        if finish:
            return
