"""A request as a value: what to generate from, and how. The CLI, the server and the library
build one; it is frozen and picklable (it crosses to `lsd serve`'s engine process unchanged),
checked in one place (`check`: everything that needs no model), and `Engine.generate` takes it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

from .config import (
    FREQUENCY_PENALTY,
    MAX_TOKENS,
    MAX_TOP_LOGPROBS,
    MIN_P,
    PRESENCE_PENALTY,
    REPEAT_LAST_N,
    REPEAT_PENALTY,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    DrafterConfig,
    PenaltySettings,
    RuleConfig,
    sampler_settings,
)
from .errors import ParameterError, check
from .limits import check_seed


@dataclass(frozen=True)
class Request:
    """One generation request. `prompt`: raw text, or chat messages (OpenAI's shape, tool
    turns included) rendered with the model's chat template. grammar / json_schema: every
    committed token is allowed by it. The penalties and logit_bias (llama.cpp's) act on every
    verified row with the counts that row would see. logprobs: n >= 0 alternatives per token.
    tools, tool_choice, parallel_tool_calls: calls read out of the answer, valid by
    construction. reasoning: split `<think>` blocks out. chat_template_kwargs: what else the
    template reads. reasoning_budget: at most this many tokens inside a `<think>` block, then
    lsd closes it (None or -1: no limit). drafter / rule: this request's speculation (None:
    the engine's own). docs/library.md has it all."""

    prompt: str | Sequence[dict]
    max_tokens: int = MAX_TOKENS
    temperature: float = TEMPERATURE
    top_k: int = TOP_K
    top_p: float = TOP_P
    min_p: float = MIN_P
    seed: int | None = None
    stop: Sequence[str] = ()
    grammar: str | os.PathLike | None = None
    json_schema: dict | str | os.PathLike | None = None
    repeat_penalty: float = REPEAT_PENALTY
    repeat_last_n: int = REPEAT_LAST_N
    presence_penalty: float = PRESENCE_PENALTY
    frequency_penalty: float = FREQUENCY_PENALTY
    logit_bias: object = None  # {token: bias} or [[token, bias], ...]; checked with the vocab
    logprobs: int | None = None
    tools: Sequence[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool = True
    reasoning: bool = True
    chat_template_kwargs: dict | None = None
    reasoning_budget: int | None = None
    drafter: DrafterConfig | None = None
    rule: RuleConfig | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):  # (one stop string, as OpenAI's `stop` may be: not
            object.__setattr__(self, "stop", (self.stop,))  # one stop per character)

    def check(self) -> None:
        """Everything that can be checked without a model (ParameterError naming the field):
        what `Engine.generate` and the server's request path both run."""
        check(isinstance(self.max_tokens, int) and self.max_tokens >= 0, "max_tokens",
              f"{self.max_tokens} (must be >= 0)")
        check(self.reasoning_budget is None or self.reasoning_budget >= -1, "reasoning_budget",
              f"{self.reasoning_budget} (tokens >= 0, or -1: no limit)")
        check(self.logprobs is None or 0 <= self.logprobs <= MAX_TOP_LOGPROBS, "top_logprobs",
              f"{self.logprobs} (0 to {MAX_TOP_LOGPROBS})")
        self.sampler()
        PenaltySettings(self.repeat_penalty, self.repeat_last_n, self.presence_penalty,
                        self.frequency_penalty)
        check_seed(self.seed)
        check(isinstance(self.stop, (list, tuple)) and all(isinstance(s, str) for s in
                                                             self.stop), "stop",
              f"{self.stop!r} (a string, or a list of strings)")
        if self.tools is not None and self.tool_choice != "none" and (
                self.grammar or self.json_schema):
            raise ParameterError("invalid tools: give tools or a grammar, not both",
                                 param="tools")

    def sampler(self):
        """The sampler's settings (config.SamplerSettings; None: greedy)."""
        return sampler_settings(self.temperature, self.top_k, self.top_p, self.min_p)

    @property
    def budget(self) -> int | None:
        """The reasoning budget in tokens (None: no limit)."""
        return None if self.reasoning_budget == -1 else self.reasoning_budget

    def with_changes(self, **changes) -> Request:
        """A copy with some fields changed."""
        return replace(self, **changes)


REQUEST_FIELDS = frozenset(f.name for f in fields(Request))


def as_request(prompt: str | Sequence[dict] | Request, options: dict) -> Request:
    """`Engine.generate`'s argument: a Request as given, or one built from a prompt and
    keywords (ParameterError for a keyword no request has)."""
    if isinstance(prompt, Request):
        if options:
            raise ParameterError(f"invalid {next(iter(options))}: give a Request or keywords, "
                                 "not both (Request.with_changes makes a changed copy)",
                                 param=next(iter(options)))
        return prompt
    unknown = sorted(set(options) - REQUEST_FIELDS)
    if unknown:
        raise TypeError(f"generate() got an unexpected keyword argument {unknown[0]!r}")
    return Request(prompt, **options)
