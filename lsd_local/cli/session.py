"""A conversation over one Engine: the message history, each answer reusing the cached
prefix, and the oldest exchanges forgotten when the context is full."""

from __future__ import annotations

from ..errors import ContextOverflowError, LsdError
from ..stats import GenerationStats

THINKING_VIEWS = {"show": "shown, dimmed, and tool calls in full",
                  "fold": "folded into one line, and long tool calls cut",
                  "hide": "hidden"}


class ChatSession:
    """The message history of one conversation; each answer reuses the cached prefix."""

    def __init__(self, engine, system: str | None, generation_kwargs: dict) -> None:
        self.engine = engine
        self.system = system
        self.kwargs = generation_kwargs
        self.messages: list[dict] = []
        self.totals = GenerationStats()  # every answer of the session added up
        self.turns = 0
        self.dropped_turns = 0
        self.last: GenerationStats | None = None
        self.thinking_view = "fold"  # /think show|fold|hide: the reasoning in full, as a line, not
        self.reset()

    def think(self, how: str) -> str:
        """/think on|off (the template's enable_thinking) and hide|show (the reasoning)."""
        if how in ("on", "off"):
            kwargs = dict(self.kwargs.get("chat_template_kwargs") or {})
            kwargs["enable_thinking"] = how == "on"
            self.kwargs["chat_template_kwargs"] = kwargs
            return f"(thinking {how}: the template's enable_thinking is {how == 'on'})"
        if how in THINKING_VIEWS:
            self.thinking_view = how
            return f"(reasoning {THINKING_VIEWS[how]})"
        return "usage: /think on|off|show|fold|hide"

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def ask(self, text: str):
        """Start an answer; iterate the returned Generation, then call `finish` with it.
        When the conversation no longer fits the context, the oldest turns are dropped
        (`dropped_turns` counts them) until it does."""
        self.messages.append({"role": "user", "content": text})
        first = 1 if self.system else 0
        while True:
            try:
                return self.engine.generate(self.messages, **self.kwargs)
            except ContextOverflowError:
                if len(self.messages) - first <= 1 or not self._fits_alone():
                    self.messages.pop()  # the new message is too long even on its own
                    raise
                del self.messages[first:first + 2]  # the oldest question and its answer
                self.dropped_turns += 1
            except LsdError:
                self.messages.pop()
                raise

    def _fits_alone(self) -> bool:
        """Would the system message plus the newest question fit the context?"""
        alone = self.messages[:1 if self.system else 0] + self.messages[-1:]
        return len(self.engine.prompt_tokens(alone)) + 1 <= self.engine.target.n_ctx

    def finish(self, gen) -> None:
        """Record the (possibly interrupted) answer in the history and the statistics."""
        answer = {"role": "assistant", "content": gen.text}
        if gen.tool_calls:
            answer["tool_calls"] = [{"id": call.id, "type": "function",
                                     "function": {"name": call.name,
                                                  "arguments": call.arguments}}
                                    for call in gen.tool_calls]
        self.messages.append(answer)
        self.last = gen.stats
        self.totals.merge(gen.stats)
        self.turns += 1
