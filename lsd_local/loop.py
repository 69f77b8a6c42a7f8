"""The round. `step` is one speculative round, top to bottom: draft, score the block in one
target pass, verify, commit, truncate; it returns the round's RoundEvent (its text is the
request's business: generation.py repeats `step` and turns committed tokens into text, stop
strings and a finish reason).

Invariant between rounds: `history` holds the committed tokens c[0..n-1]; the target's KV cache
holds c[0..n-2]; c[n-1] is pending. A round evaluates [c[n-1], d1..dK] at positions n-1..n-1+K
with logits for those K+1 rows only, keeps L draft tokens plus the verifier's next token, and
truncates the target cache to n+L. A plain decoding step is the same round with K = 0.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from time import perf_counter

import numpy as np

from .config import PenaltySettings, SamplerSettings
from .drafters.base import EMPTY_DRAFT, DecodeCall, Draft, Drafter, run_steps
from .stats import Origin, RoundEvent
from .verify import Verdict
from .verify.constrain import allowed_prefix, prepare_block
from .verify.logprobs import token_logprobs
from .verify.penalties import penalize_block
from .verify.verifier import Verifier


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
class LoopSettings:
    """Per-request settings of the rounds (they never change while it runs)."""

    max_tokens: int
    k: int  # largest draft per round (0 = plain decoding)
    sampler: SamplerSettings | None  # None = greedy
    grammar_top: int = 1  # allowed tokens exact at the top of each row (constrain.py)
    penalties: PenaltySettings | None = None  # None: the rows are left as the target gave them
    logprobs: int | None = None  # None: not asked; n: each token's and n alternatives'


@dataclass
class RoundState:
    """What a request's rounds change, owned by its Generation: the random numbers a
    sampled draft and verification draw, and the grammar's state after the committed
    tokens."""

    rng: np.random.Generator
    grammar: object | None = None  # backend Grammar; None: no constraint


@dataclass(frozen=True)
class PendingRound:
    """A round drafted and ready to be scored: `block` (int32[K+1]: the pending token, then
    the draft) goes at position `start` of the target's cache."""

    block: np.ndarray  # int32[K+1]
    start: int
    draft: Draft
    n_forced: int  # draft tokens the grammar forced before the drafter's
    n_forced_after: int  # and after them
    t0: float  # when drafting began
    t1: float  # when it ended


def step(target, drafter: Drafter | None, verifier: Verifier, history: TokenBuffer,
         req: LoopSettings, state: RoundState, k: int,
         clock: Callable[[], float] = perf_counter) -> RoundEvent:
    """One round with at most k draft tokens. `target` is a backend Model (or anything with
    its decode/truncate/n_cached/most_logit_rows/vocab.is_eog) whose cache holds
    history[:-1]; so does it afterwards. The event's text is left empty."""
    pending = plan_round(drafter, history, req, state, k, clock)
    grew_logits = len(pending.block) > target.most_logit_rows  # a one-time buffer growth
    logits = target.decode(pending.block, pending.start, len(pending.block))
    return finish_round(target, drafter, verifier, history, req, state, pending, logits,
                        grew_logits, clock)


def plan_round(drafter: Drafter | None, history: TokenBuffer, req: LoopSettings,
               state: RoundState, k: int,
               clock: Callable[[], float] = perf_counter) -> PendingRound:
    """The first half of a round: draft, and the block to score (side by side, the blocks
    of several requests are scored in one decode: sidebyside.py)."""
    return run_steps(plan_round_steps(drafter, history, req, state, k, clock))


def plan_round_steps(drafter: Drafter | None, history: TokenBuffer, req: LoopSettings,
                     state: RoundState, k: int, clock: Callable[[], float] = perf_counter
                     ) -> Generator[DecodeCall, np.ndarray, PendingRound]:
    """plan_round in steps: the draft model's decodes are yielded (drafters/base.py), so
    that side by side every sequence's go into one batch."""
    t0 = clock()
    draft = EMPTY_DRAFT if drafter is None or k <= 0 else (yield from drafter.propose_steps(
        history.view(), k, req.sampler, state.rng, state.grammar))
    n = history.n
    block = np.empty(len(draft) + 1, np.int32)
    block[0] = history.data[n - 1]
    block[1:] = draft.tokens
    return PendingRound(block, n - 1, draft, draft.forced_head, draft.forced_tail, t0,
                        clock())


def finish_round(target, drafter: Drafter | None, verifier: Verifier, history: TokenBuffer,
                 req: LoopSettings, state: RoundState, pending: PendingRound,
                 logits: np.ndarray,
                 grew_logits: bool, clock: Callable[[], float] = perf_counter,
                 decode_seconds: float | None = None) -> RoundEvent:
    """The second half: verify the scored block (logits float32[K+1, V]), commit, truncate.
    `decode_seconds`: what the decode took, side by side (it scored other requests' blocks
    too, and others drafted meanwhile); None: the time since drafting ended (alone)."""
    draft, t1 = pending.draft, pending.t1
    decoded = t1 if decode_seconds is None else clock()
    if req.penalties is not None:  # each row with the counts it would see: history + draft
        penalize_block(logits, history.view(), pending.block[1:], req.penalties)
    verdict, verified, constrain_s = _verify(verifier, req, state, logits, draft)
    t2 = clock()
    if drafter is not None:
        seconds = t2 - decoded + (decode_seconds or 0.0)
        drafter.accept(len(draft), verdict.n_accept, seconds, grew_logits)
    tokens, origins, eog = _commit(verdict, verified, target.vocab.is_eog)
    logprobs = None if req.logprobs is None else \
        token_logprobs(logits[:len(tokens)], tokens, req.logprobs)  # the rows that chose them
    _advance_grammar(state, tokens, eog)
    history.extend(tokens)
    if target.n_cached >= history.n:  # rows past the commit: a rejection, an EOG or grammar cut
        target.truncate(history.n - 1)
    source = "none" if not len(draft) else draft.source or \
        (drafter.name if drafter is not None else "forced")
    n_accepted = len(tokens) - 1 if origins[-1] is Origin.TARGET else len(tokens)
    return RoundEvent(tuple(tokens), tuple(origins), "", (), len(draft), n_accepted,
                      sum(o is Origin.DRAFT_LOOSE for o in origins), pending.t1 - pending.t0,
                      t2 - t1, clock() - t2, draft_source=source,
                      constrain_seconds=constrain_s, eog=eog, logprobs=logprobs,
                      n_forced=pending.n_forced, n_forced_after=pending.n_forced_after)


def draft_limit(req: LoopSettings, generated: int, n: int, n_ctx: int) -> int:
    """The most tokens the next round may draft: it commits at most k + 1, within max_tokens
    and the context (n + k + 1 <= n_ctx)."""
    return min(req.k, req.max_tokens - generated - 1, n_ctx - n - 1)


def _grammar_block(req: LoopSettings, state: RoundState, logits: np.ndarray, draft: Draft,
                   stop_at_mismatch: bool) -> tuple[np.ndarray, Draft]:
    """Constrain the block to the grammar (in place) and cut the draft where the verifier must
    stop. A sampled draft's p_d rows stay: drafters sample inside the grammar (model.py), so p_d
    is the draft's constrained distribution, as speculative sampling needs."""
    n_ready = prepare_block(state.grammar, logits, draft.tokens, req.grammar_top,
                            stop_at_mismatch)
    probs = None if draft.probs is None else draft.probs[:n_ready]
    cut = Draft(draft.tokens[:n_ready], probs, draft.source)
    return logits[:n_ready + 1], cut


def _verify(verifier: Verifier, req: LoopSettings, state: RoundState, logits: np.ndarray,
            draft: Draft) -> tuple[Verdict, Draft, float]:
    """Verify one block (logits float32[K+1, V]), grammar first when there is one; returns
    the draft actually verified and the seconds spent on the grammar."""
    if state.grammar is None:
        return verifier.verify(logits, draft.tokens, draft.probs, state.rng), draft, 0.0
    t0 = perf_counter()
    strict_greedy = req.sampler is None and verifier.config.rule == "strict"
    logits, draft = _grammar_block(req, state, logits, draft, strict_greedy)
    seconds = perf_counter() - t0
    return verifier.verify(logits, draft.tokens, draft.probs, state.rng), draft, seconds


def _advance_grammar(state: RoundState, tokens: list[int], eog: bool) -> None:
    """The grammar state follows committed tokens only (an end-of-generation token ends it)."""
    if state.grammar is not None:
        for token in tokens[:len(tokens) - 1 if eog else len(tokens)]:
            state.grammar.accept(token)


def _commit(verdict: Verdict, draft: Draft, is_eog) -> tuple[list[int], list[Origin], bool]:
    """Tokens to commit for a verdict, cut after the first end-of-generation token."""
    if verdict.n_accept == 0:  # a plain step or a rejected draft: the target's token alone
        return [verdict.next_token], [Origin.TARGET], is_eog(verdict.next_token)
    tokens = [int(t) for t in draft.tokens[:verdict.n_accept]] + [verdict.next_token]
    origins = [Origin.DRAFT_LOOSE if verdict.loose[j] else Origin.DRAFT_EXACT
               for j in range(verdict.n_accept)] + [Origin.TARGET]
    for i, token in enumerate(tokens):
        if is_eog(token):
            return tokens[:i + 1], origins[:i + 1], True
    return tokens, origins, False


def write_tokens(target, history: TokenBuffer, grammar, tokens: list[int],
                 room: int) -> RoundEvent | None:
    """Commit tokens lsd writes for the model (a reasoning block's close) as if it had
    generated them: through the grammar (a backend Grammar or None), into the history, and
    into the target's cache (a backend Slot) up to the new pending token. None, changing
    nothing, where they cannot be written: `room` tokens or fewer left before max_tokens,
    past the context, or where the grammar forbids them."""
    takes = grammar is None or allowed_prefix(grammar, np.asarray(tokens)) == len(tokens)
    if history.n + len(tokens) + 1 > target.n_ctx or not takes or len(tokens) >= room:
        return None
    target.decode(np.array([history.data[history.n - 1], *tokens[:-1]], np.int32),
                  history.n - 1, 0)
    history.extend(tokens)
    if grammar is not None:  # (checked above)
        for token in tokens:
            grammar.accept(token, checked=True)
    return RoundEvent(tuple(tokens), (Origin.TARGET,) * len(tokens), "", (), 0, 0, 0,
                      0.0, 0.0, 0.0)
