"""Typed events the generation loop yields and the statistics it accumulates."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (importing it would load numba with `import lsd_local`)
    from .chat.output import ToolCallDelta
    from .verify.logprobs import TokenLogprob


class Origin(IntEnum):
    """Where a committed token came from."""

    DRAFT_EXACT = 0  # draft token equal to the target's choice
    DRAFT_LOOSE = 1  # draft token kept by a loose rule (FLy deferral, ASD exception)
    TARGET = 2  # produced by the target (correction or bonus)


@dataclass(frozen=True)
class RoundEvent:
    """One verification round: what it committed and what it cost."""

    tokens: tuple[int, ...]  # committed token ids, in order
    origins: tuple[Origin, ...]  # one per token
    text: str  # text delta released to the user by this round (may be "" while held back)
    spans: tuple[tuple[str, Origin], ...]  # text split by the origin of the token it came from
    n_drafted: int
    n_accepted: int
    n_loose: int
    draft_seconds: float
    verify_seconds: float
    other_seconds: float
    finish_reason: str | None = None  # set on the last event: "stop" or "length"
    draft_source: str = "none"  # drafter whose tokens were verified ("none": no draft)
    constrain_seconds: float = 0.0  # grammar checks and masks (part of verify_seconds)
    eog: bool = False  # the last token ends the generation (end-of-generation; not shown)
    # when asked: each committed token's log-probability under the target (verify/logprobs)
    logprobs: tuple[TokenLogprob, ...] | None = None
    # chat answers read apart (chat/output.py): `text` and `spans` are then the answer's
    reasoning: str = ""  # reasoning text (a `<think>` block) released by this round
    reasoning_spans: tuple[tuple[str, Origin], ...] = ()
    tool_calls: tuple[ToolCallDelta, ...] = ()  # pieces of tool calls, as OpenAI streams them
    n_forced: int = 0  # draft tokens the grammar forced (the first of the draft; free)
    n_forced_after: int = 0  # the grammar's forced tokens after the drafter's (the last)


@dataclass
class GenerationStats:
    """Counters and timings of one generation (decode excludes prefill)."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt prefix reused from the KV cache (multi-turn)
    generated_tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted_exact: int = 0
    accepted_loose: int = 0
    regret_spent: float = 0.0
    prefill_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    other_seconds: float = 0.0
    constrain_seconds: float = 0.0  # grammar work, included in verify_seconds
    finish_reason: str | None = None
    accepted_per_round: list[int] = field(default_factory=list)
    draft_sources: dict[str, int] = field(default_factory=dict)  # rounds per drafter used
    draft_lengths: dict[int, int] = field(default_factory=dict)  # rounds per tokens drafted
    # draft tokens per supplier ("forced": the grammar's; "lookup", "suffix", "model", ...):
    # which share of the accepted tokens each drafter supplied
    drafted_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    # the share of the above spent inside a reasoning block (the rest is the answer's):
    # acceptance differs between thinking and answering
    reasoning_rounds: int = 0
    reasoning_tokens: int = 0
    reasoning_drafted: int = 0
    reasoning_accepted: int = 0

    @property
    def accepted(self) -> int:
        return self.accepted_exact + self.accepted_loose

    @property
    def tau(self) -> float:
        """Committed tokens per round."""
        return self.generated_tokens / self.rounds if self.rounds else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def decode_seconds(self) -> float:
        return self.draft_seconds + self.verify_seconds + self.other_seconds

    @property
    def decode_tokens_per_second(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds else 0.0

    def add_round(self, event: RoundEvent, reasoning: bool = False) -> None:
        """Count a round; `reasoning`: it was spent inside a reasoning block."""
        if reasoning:
            self.reasoning_rounds += 1
            self.reasoning_tokens += len(event.tokens)
            self.reasoning_drafted += event.n_drafted
            self.reasoning_accepted += event.n_accepted
        self.rounds += 1
        self.generated_tokens += len(event.tokens)
        self.drafted += event.n_drafted
        self.accepted_loose += event.n_loose
        self.accepted_exact += event.n_accepted - event.n_loose
        self.draft_seconds += event.draft_seconds
        self.verify_seconds += event.verify_seconds
        self.other_seconds += event.other_seconds
        self.constrain_seconds += event.constrain_seconds
        self.accepted_per_round.append(event.n_accepted)
        self.draft_sources[event.draft_source] = self.draft_sources.get(event.draft_source, 0) + 1
        self.draft_lengths[event.n_drafted] = self.draft_lengths.get(event.n_drafted, 0) + 1
        self._count_sources(event)

    def _count_sources(self, event: RoundEvent) -> None:
        """Split the round's drafted and accepted tokens between the grammar's forced head,
        the drafter that went on from there and the grammar's forced tail after it."""
        n_own = event.n_drafted - event.n_forced - event.n_forced_after
        head_kept = min(event.n_forced, event.n_accepted)
        own_kept = min(n_own, event.n_accepted - head_kept)
        tail_kept = event.n_accepted - head_kept - own_kept
        parts = (("forced", event.n_forced + event.n_forced_after, head_kept + tail_kept),
                 (event.draft_source, n_own, own_kept))
        for source, drafted, accepted in parts:
            if drafted > 0:
                self.drafted_by_source[source] = self.drafted_by_source.get(source, 0) + drafted
                self.accepted_by_source[source] = \
                    self.accepted_by_source.get(source, 0) + accepted

    def summary(self) -> str:
        """One line for people: tokens, speed, tau, acceptance, loose acceptances."""
        return (f"{self.generated_tokens} tokens, {self.decode_tokens_per_second:.1f} tok/s, "
                f"tau {self.tau:.2f}, acceptance {self.acceptance_rate:.0%}, "
                f"loose {self.accepted_loose}")

    def mix(self) -> str:
        """Which drafter the rounds used and how many tokens they drafted (auto's choices)."""
        if not self.rounds:
            return "no rounds"
        sources = ", ".join(f"{name} {count / self.rounds:.0%}" for name, count in
                            sorted(self.draft_sources.items(), key=lambda kv: -kv[1]))
        lengths = " ".join(f"{k}:{count}" for k, count in sorted(self.draft_lengths.items()))
        out = f"drafts by {sources}; rounds per K: {lengths}"
        if self.accepted:
            out += "; accepted tokens from " + ", ".join(
                f"{name} {count / self.accepted:.0%}" for name, count in
                sorted(self.accepted_by_source.items(), key=lambda kv: -kv[1]) if count)
        return out

    def merge(self, other: GenerationStats) -> None:
        """Add another generation's counters and timings (e.g. totals of a chat session)."""
        for name in ("prompt_tokens", "cached_prompt_tokens", "generated_tokens", "rounds",
                     "drafted", "accepted_exact", "accepted_loose", "regret_spent",
                     "prefill_seconds", "draft_seconds", "verify_seconds", "other_seconds",
                     "constrain_seconds", "reasoning_rounds", "reasoning_tokens",
                     "reasoning_drafted", "reasoning_accepted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.accepted_per_round.extend(other.accepted_per_round)
        for mine, theirs in ((self.draft_sources, other.draft_sources),
                             (self.draft_lengths, other.draft_lengths),
                             (self.drafted_by_source, other.drafted_by_source),
                             (self.accepted_by_source, other.accepted_by_source)):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count

    def as_dict(self) -> dict:
        """Plain dict for JSON: counters, timings and the derived rates."""
        out = asdict(self)
        del out["accepted_per_round"]
        for name in ("accepted", "tau", "acceptance_rate", "decode_seconds",
                     "decode_tokens_per_second"):
            out[name] = getattr(self, name)
        out["phases"] = self.phases()
        return out

    def phases(self) -> dict:
        """Speculation inside reasoning blocks and in the answer, apart."""
        parts = {"reasoning": (self.reasoning_rounds, self.reasoning_tokens,
                               self.reasoning_drafted, self.reasoning_accepted),
                 "answer": (self.rounds - self.reasoning_rounds,
                            self.generated_tokens - self.reasoning_tokens,
                            self.drafted - self.reasoning_drafted,
                            self.accepted - self.reasoning_accepted)}
        return {name: {"rounds": rounds, "tokens": tokens, "drafted": drafted,
                       "accepted": accepted, "tau": tokens / rounds if rounds else 0.0,
                       "acceptance_rate": accepted / drafted if drafted else 0.0}
                for name, (rounds, tokens, drafted, accepted) in parts.items()}
