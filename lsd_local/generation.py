"""One request, one object. `Engine.generate` hands out a Generation that owns everything its
request holds, from the moment it is made until it is closed: its sequence of the engine's
context, the grammar state, the drafter's begin and end, the statistics and the finish
reason. Alone, its life is `_run`: begin, prefill, rounds (loop.plan_round, the decode,
loop.finish_round), end. Side by side (sidebyside.py), the same pieces run from
SideBySide.step, which scores the blocks of every active generation in one decode.

However a generation ends (its last round, `close()`, leaving a `for` loop early, an
exception, Ctrl-C, or being garbage-collected without ever being iterated), its sequence is
free again and the grammar is freed. Nothing restores the KV caches: both models record which
tokens they hold (backend.Slot.cached_tokens) and the next prefill keeps the longest common
prefix, so a request cut mid-round leaves nothing to repair.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from time import perf_counter

import numpy as np

from .chat.output import OutputParser, Parts, ToolCall
from .drafters.base import DecodeCall, run_steps
from .drafters.crossvocab import marked_tokens
from .kernels.warmup import process_warmup
from .loop import (
    LoopSettings,
    PendingRound,
    RoundState,
    TokenBuffer,
    draft_limit,
    finish_round,
    plan_round_steps,
    write_tokens,
)
from .stats import GenerationStats, RoundEvent
from .text import TextAssembler
from .verify.verifier import Verifier


@dataclass(frozen=True)
class EngineParts:
    """What an engine lends its generation: the models, the drafter, the conversations kept
    in RAM, and how to check the engine is open and give it back."""

    target: object  # backend Model
    draft_model: object | None  # backend Model (its cache follows the state cache)
    drafter: object | None  # Drafter; None = plain decoding
    state_cache: object | None  # statecache.StateCache
    check_open: Callable[[], None]  # RuntimeError once the engine is closed
    release: Callable[[Generation], None]  # the engine may start another generation
    # prompt tokens this request evaluated before its prefill (auto's calibration left them
    # cached), and the seconds that took: its own work, not a cache hit
    evaluated: tuple[int, float] = (0, 0.0)
    # side by side: set the caches of sequences no request holds aside before the prefill
    # (Engine._park_idle), so that they do not make every decode dearer
    park_idle: Callable[[np.ndarray], None] | None = None  # (the prompt, int32[n])


class Generation:
    """A request: iterate for RoundEvents; `stats`, `text`, `finish_reason` and `tokens` are
    filled in as it goes and final once it ends. A context manager: leaving the `with` block
    closes it."""

    def __init__(self, parts: EngineParts, prompt: list[int], settings: LoopSettings,
                 state: RoundState, verifier: Verifier, text: TextAssembler,
                 family: str | None = None,
                 parser: OutputParser | None = None, reasoning_budget: int | None = None,
                 runner=None) -> None:
        self._parts = parts
        self._prompt = np.asarray(prompt, np.int32)
        self._settings = settings  # the rounds' parameters (frozen)
        self._state = state  # what the rounds change: the RNG, the grammar's state
        self._verifier = verifier
        self._text = text
        self._family = family  # a name for the kind of request (auto learns per kind)
        self._parser = parser  # reads reasoning and tool calls apart (None: text is text)
        self._reasoning_budget = reasoning_budget  # tokens inside <think>; None: no limit
        self._content: list[str] = []  # the answer's text, when a parser reads it
        self._reasoning: list[str] = []
        self._history = TokenBuffer(parts.target.n_ctx)
        self._history.set(self._prompt)
        self._life: Iterator[RoundEvent] | None = None  # made on first iteration
        self._last_round = False  # no round follows (a finish reason, or nothing to do)
        self._closed = False  # the grammar is freed and the engine given back
        self._runner = runner  # sidebyside.SideBySide: scored with others (None: alone)
        self.outbox: deque = deque()  # side by side: events (or an exception) not yet read
        self.prefill_at = 0  # prompt tokens in the cache (see _start_prefill)
        self._prefill_started = 0.0
        self.opened = False  # its request began (_open): it must end (_close_life)
        self._drafter_began = False  # its drafter heard begin(): it must hear end()
        self.stats = GenerationStats(prompt_tokens=len(prompt))

    def __iter__(self) -> Iterator[RoundEvent]:
        """The rounds. Leaving the loop early (break, an exception, Ctrl-C) ends the request
        for good: this iterator dies with the loop, and closing it closes the request.
        Iterating again then yields nothing more."""
        if self._life is None:
            if self._closed:
                # side by side, others' reading may have run it to its end (or to a failure)
                # before its own reader came: what it made is waiting
                if self.outbox:
                    yield from _in_order(self._take_outbox())
                    return
                self._parts.check_open()  # closed before its first round: nothing more,
                return  # unless the engine is gone (then say so)
            self._life = self._run() if self._runner is None else self._runner.events(self)
        yield from self._life

    @property
    def finished(self) -> bool:
        """The request has ended (its last round, closed, or left) and freed the engine."""
        return self._closed

    def take_events(self) -> list[RoundEvent]:
        """Side by side: the rounds that `Engine.step` made since the last call (raises what
        ended the generation, if something did)."""
        return list(_in_order(self._take_outbox()))

    def _take_outbox(self) -> list:
        items = list(self.outbox)
        self.outbox.clear()
        return items

    def run(self) -> Generation:
        """Consume every round; returns self for chaining."""
        for _ in self:
            pass
        return self

    def close(self) -> None:
        """End the request now, for good: the engine is free again."""
        if self._runner is not None:  # (under its lock: a step may be using this request;
            self._runner.leave(self)  # its rounds' reader, maybe in another thread, stops)
        elif self._life is not None:
            self._life.close()  # its `finally` ends the request
        self._end()

    def __enter__(self) -> Generation:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit parts may be gone
            self.close()

    @property
    def text(self) -> str:
        """The answer's text so far (without reasoning and tool calls, when chat messages
        were given)."""
        return self._text.released_text if self._parser is None else "".join(self._content)

    @property
    def reasoning(self) -> str:
        """What the model wrote in `<think>` blocks ("" when none, or not split)."""
        return "".join(self._reasoning)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls read out of the answer (OpenAI's id, name, arguments JSON text)."""
        return self._parser.tool_calls if self._parser is not None else []

    @property
    def finish_reason(self) -> str | None:
        return self.stats.finish_reason

    @property
    def tokens(self) -> list[int]:
        """Generated token ids (EOS included when the model emitted one)."""
        return self._history.view()[len(self._prompt):].tolist()

    # --- the request's life --------------------------------------------------------------

    def _run(self) -> Iterator[RoundEvent]:
        """The request alone: each round drafted, scored by its own decode, verified."""
        self._open()
        try:
            self._begin()
            target = self._parts.target
            while not self._last_round:
                planned = self._plan()
                if isinstance(planned, PendingRound):
                    grew = len(planned.block) > target.most_logit_rows
                    logits = target.decode(planned.block, planned.start, len(planned.block))
                    yield self._finish_round(planned, logits, grew)
                elif planned is not None:
                    yield planned
        finally:
            self._close_life()

    def _open(self) -> None:
        # a generation made before its engine was closed and iterated after it is refused
        # before its request starts: the finally must not end a request that never began
        self._parts.check_open()
        process_warmup().request_started()
        self.opened = True

    def _close_life(self) -> None:
        self.stats.regret_spent = self._verifier.regret_spent
        try:
            self._end()
        finally:
            if self.opened:
                self.opened = False
                process_warmup().request_ended()  # whatever failed: the warm-up may go on

    def _plan(self) -> PendingRound | RoundEvent | None:
        """The next round's first half (a block to score), or an event lsd wrote without the
        model (the reasoning budget's close), or None (nothing this time: plan again)."""
        return run_steps(self._plan_steps())

    def _plan_steps(self) -> Generator[DecodeCall, np.ndarray,
                                       PendingRound | RoundEvent | None]:
        """_plan in steps (the draft model's decodes yielded: loop.plan_round_steps)."""
        settings = self._settings
        k = draft_limit(settings, self.stats.generated_tokens, self._history.n,
                        self._parts.target.n_ctx)
        left = self._reasoning_left()
        if left is not None and left <= 0:
            closed = self._close_reasoning()
            return None if closed is None else self._round(closed, forced=True)
        if left is not None:  # a round commits k + 1 at most: none past the budget
            k = min(k, left - 1)
        elif self._reasoning_budget is not None and self._parser is not None and \
                self._parser.may_open_reasoning:
            k = 0  # (a token a round until a block opens: none uncounted past its opener)
        return (yield from plan_round_steps(self._parts.drafter, self._history, settings,
                                            self._state, k))

    def _finish_round(self, pending: PendingRound, logits: np.ndarray, grew: bool,
                      decode_seconds: float | None = None) -> RoundEvent:
        """The round's second half, from its block's logits (float32[K+1, V])."""
        return self._round(finish_round(self._parts.target, self._parts.drafter,
                                        self._verifier, self._history, self._settings,
                                        self._state,
                                        pending, logits, grew, decode_seconds=decode_seconds))

    def _begin(self) -> None:
        """The drafter's begin and the prefill; a request for no tokens ends there."""
        self._start_prefill()
        at = self.prefill_at
        self._parts.target.decode(self._prompt[at:-1], at, 0)
        self._prefilled(len(self._prompt) - 1 - at)

    def _start_prefill(self) -> None:
        """The drafter's begin, and the cache made ready for the prompt: another
        conversation's saved cache when it serves better, then the longest cached prefix
        kept (`prefill_at`: where evaluation starts)."""
        drafter, prompt, parts = self._parts.drafter, self._prompt, self._parts
        if drafter is not None:
            drafter.begin(self._family, len(prompt))
            self._drafter_began = True
        self._prefill_started = perf_counter()
        if parts.park_idle is not None:  # (before the prefill takes cells: it may reuse theirs)
            parts.park_idle(prompt)
        if parts.state_cache is not None:  # another conversation's cache may serve it better
            parts.state_cache.switch_to(parts.target, parts.draft_model, prompt)
        self.prefill_at = parts.target.reuse_prefix(prompt, len(prompt) - 1)
        self.stats.cached_prompt_tokens = self.prefill_at - min(parts.evaluated[0],
                                                                self.prefill_at)

    @property
    def prefill_left(self) -> int:
        """Prompt tokens still to evaluate (all but the last, which the first round takes)."""
        return len(self._prompt) - 1 - self.prefill_at

    def prompt_chunk(self, n: int) -> np.ndarray:
        """The next `n` prompt tokens to evaluate (int32[n])."""
        return self._prompt[self.prefill_at:self.prefill_at + n]

    def _prefilled(self, n: int) -> None:
        """`n` more prompt tokens are in the cache; at the end of the prompt the prefill is
        done (and a request for no tokens is)."""
        self.prefill_at += n
        if self.prefill_left:
            return
        self.stats.prefill_seconds = perf_counter() - self._prefill_started + \
            self._parts.evaluated[1]
        if self._settings.max_tokens == 0:
            self.stats.finish_reason = "length"
            self._last_round = True

    def _reasoning_left(self) -> int | None:
        """Tokens the reasoning budget still allows, while inside a reasoning block (None:
        not in one, or no budget)."""
        if self._reasoning_budget is None or self._parser is None or \
                not self._parser.in_reasoning:
            return None
        return self._reasoning_budget - self.stats.reasoning_tokens

    def _close_reasoning(self) -> RoundEvent | None:
        """The budget is spent: write the block's end for the model (its format's
        `reasoning_close`, into the target's cache as if generated) and let it answer from
        there. None where lsd cannot write it (past max_tokens or the context, or where the
        request's grammar forbids it): the budget is dropped and the model goes on until its
        own end."""
        tokens = marked_tokens(self._parts.target.vocab, self._parser.reasoning_close,
                               self._parser.markers)
        event = write_tokens(self._parts.target, self._history, self._state.grammar, tokens,
                             self._settings.max_tokens - self.stats.generated_tokens)
        if event is None:
            self._reasoning_budget = None
        return event

    def _round(self, event: RoundEvent, forced: bool = False) -> RoundEvent:
        """A round's event with its text, and the finish reason when it is the last;
        `forced`: tokens lsd wrote for the model (the reasoning budget's close)."""
        start = perf_counter()
        text = self._text
        n_text = len(event.tokens) - 1 if event.eog else len(event.tokens)  # EOG shows nothing
        for token, origin in zip(event.tokens[:n_text], event.origins[:n_text], strict=True):
            text.add(token, origin)
        generated = self.stats.generated_tokens + len(event.tokens)
        finish = "stop" if event.eog else "length" if (
            generated >= self._settings.max_tokens
            or self._history.n >= self._parts.target.n_ctx) else None
        if finish:
            text.finish()
        delta, spans = text.release(final=finish is not None)
        if text.stopped:
            finish = "stop"
            event = self._cut_at_stop(event, n_text)
        reasoning = self._parser is not None and self._parser.in_reasoning and not forced
        event = self._parsed(replace(event, text=delta, spans=spans, finish_reason=finish),
                             finish is not None)
        if finish == "stop" and self.tool_calls:
            event = replace(event, finish_reason="tool_calls")
        event = replace(event, other_seconds=event.other_seconds + perf_counter() - start)
        self.stats.add_round(event, reasoning)
        if event.finish_reason:
            self.stats.finish_reason = event.finish_reason
            self._last_round = True
        return event

    def _cut_at_stop(self, event: RoundEvent, n_text: int) -> RoundEvent:
        """The round's tokens after the one that completed a stop string are no part of the
        answer: out of the history and the cache too (as after an end-of-generation token
        inside a draft), so that neither the next turn's cache nor the drafter keeps them."""
        drop = self._text.tokens_after_stop()
        drop += (len(event.tokens) - n_text) if drop else 0  # (an EOG after the stop, too)
        if drop <= 0 or drop >= len(event.tokens):
            return event
        self._history.n -= drop
        if self._parts.target.n_cached >= self._history.n:
            self._parts.target.truncate(self._history.n - 1)
        keep = len(event.tokens) - drop
        return replace(event, tokens=event.tokens[:keep], origins=event.origins[:keep],
                       eog=False, logprobs=None if event.logprobs is None else
                       event.logprobs[:keep])

    def _parsed(self, event: RoundEvent, final: bool) -> RoundEvent:
        """The event's text read apart into answer, reasoning and tool calls."""
        if self._parser is None:
            return event
        parts = self._parser.feed(event.spans, final)
        content, reasoning = Parts.text(parts.content), Parts.text(parts.reasoning)
        self._content.append(content)
        self._reasoning.append(reasoning)
        return replace(event, text=content, spans=tuple(parts.content), reasoning=reasoning,
                       reasoning_spans=tuple(parts.reasoning),
                       tool_calls=tuple(parts.tool_calls))

    def _end(self) -> None:
        """End the request, once: the drafter hears it (only if it began: a generation closed
        before its first round has nothing to tell), then the grammar is freed and the engine
        given back, whatever fails on the way."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._drafter_began:
                self._parts.drafter.end(self._history.view(), len(self._prompt))
        finally:
            try:
                if self._state.grammar is not None:
                    self._state.grammar.close()
            finally:
                self._parts.release(self)


def _in_order(items: list) -> Iterator[RoundEvent]:
    """Rounds waiting in an outbox, in order; an exception among them (what ended the
    generation) is raised where it stands."""
    for item in items:
        if isinstance(item, BaseException):
            raise item
        yield item
