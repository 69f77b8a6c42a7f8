"""Reading an answer in gpt-oss's harmony format as it streams (chat/harmony.py has the
format): analysis to reasoning, a message to `functions.NAME` to a tool call, the final
channel (and a preamble) to content."""

from __future__ import annotations

from .harmony import (
    CALL_PREFIX,
    END,
    MARKERS,
    MESSAGE,
    REASONING_CLOSE,
    START,
    is_harmony,
    read_header,
)
from .jsonscan import CallScan, value_end
from .output import OutputParser, Parts, _partial_suffix, thinking_of

HEADER_STARTS = (START, "<|channel|>", " to=")
MAX_HEADER = 256  # characters: a longer "header" is text a model wrote without one


def _may_be_header(text: str) -> bool:
    """Whether `text` (the start of a message, no `<|message|>` yet) may still be a header."""
    if len(text) > MAX_HEADER or "\n" in text:
        return False
    return any(text.startswith(s) or s.startswith(text) for s in HEADER_STARTS)


class HarmonyParser(OutputParser):
    """OutputParser for the harmony format (same feed/tool_calls/in_reasoning). `names`: the
    tools a call may name (empty: no calls are read, a message to a recipient is content)."""

    @property
    def reasoning_close(self) -> str:
        return REASONING_CLOSE

    @property
    def markers(self) -> tuple[str, ...]:
        return MARKERS

    @property
    def may_open_reasoning(self) -> bool:
        return self.reasoning and self.state == "header"

    def __init__(self, names: tuple[str, ...] = (), reasoning: bool = True,
                 opened: str | None = None) -> None:
        super().__init__(None, False, reasoning)
        self.names = names
        self.state = "header"
        self._kind = "content"  # the body being read: "content", "reasoning" or "call"
        self._call_body = ""  # a call's body so far
        if opened is not None:  # (the prompt ends inside a message: its body goes on)
            self._open(Parts(), *read_header(opened))
        self.in_reasoning = self._reasoning_now()

    def _reasoning_now(self) -> bool:
        return self.state == "body" and self._kind == "reasoning"

    def _header(self, parts: Parts, final: bool) -> None:
        text = self._pending_text()
        at = text.find(MESSAGE)
        if not _may_be_header(text[:at] if at >= 0 else text) or (at < 0 and final):
            self._headerless(parts, text, final)
        elif at >= 0:
            channel, recipient = read_header(text[:at])
            self._take(at + len(MESSAGE))
            self._open(parts, channel, recipient)

    def _headerless(self, parts: Parts, text: str, final: bool) -> None:
        """Text a model wrote without a header is content, up to the next message (a
        `<|start|>` after its first character, or an `<|end|>`): every call takes some."""
        ends = [i for i in (text.find(END), text.find(START, 1)) if i >= 0]
        if ends:
            parts.content += self._take(min(ends))
            if self._pending_text().startswith(END):
                self._take(len(END))
            return
        keep = 0 if final else max(_partial_suffix(text, END), _partial_suffix(text, START))
        parts.content += self._take(len(text) - keep)

    def _open(self, parts: Parts, channel: str, recipient: str | None) -> None:
        self.state, self._call_body = "body", ""
        name = recipient[len(CALL_PREFIX):] if recipient and \
            recipient.startswith(CALL_PREFIX) else None
        if name is not None and name in self.names:
            self._kind = "call"
            self._stream_call(parts, len(self._announced), CallScan(name, "", False))
        else:
            self._kind = "reasoning" if channel == "analysis" and self.reasoning and \
                recipient is None else "content"

    def _body(self, parts: Parts, final: bool) -> None:
        text = self._pending_text()
        ends = [i for i in (text.find(END), text.find(START)) if i >= 0]
        at = min(ends) if ends else -1
        keep = 0 if final or at >= 0 else max(_partial_suffix(text, END),
                                              _partial_suffix(text, START))
        taken = self._take(at if at >= 0 else len(text) - keep)
        if self._kind == "call":
            self._call_body += Parts.text(taken)
            self._stream_arguments(parts, done=at >= 0 or final)
        elif self._kind == "reasoning":
            parts.reasoning += taken
        else:
            parts.content += taken
        if at >= 0:
            if text.startswith(END, at):
                self._take(len(END))
            self.state = "header"

    def _stream_arguments(self, parts: Parts, done: bool) -> None:
        """A call's arguments, streamed as its body grows: its JSON up to where the value
        ends (blanks at the end wait: more may follow inside a string)."""
        body = self._call_body.lstrip()
        end = value_end(body, 0)
        arguments = body[:end] if end is not None else body.rstrip()
        if done and not arguments:
            arguments = "{}"  # (a call with an empty body takes no arguments)
        index = len(self._announced) - 1
        self._stream_call(parts, index, CallScan(self._names[index], arguments, done))


def opened_header(prompt_text: str) -> str | None:
    """The header of the message a harmony prompt leaves open (`<|start|>assistant<|channel|>
    analysis<|message|>`: the answer goes on inside its body), or None."""
    at = prompt_text.rfind(START)
    header_end = prompt_text.find(MESSAGE, at)
    if at < 0 or header_end < 0 or END in prompt_text[header_end:]:
        return None
    return prompt_text[at:header_end]


def output_parser(template: str | None, plan, prompt_text: str,
                  reasoning: bool) -> OutputParser:
    """The parser for an answer to a chat prompt (`prompt_text`) rendered by `template`:
    harmony's for a harmony template, else the `<think>`/tool-call one. `plan`: the
    request's chat.tools.ToolPlan (None: no tools); `reasoning`: split the reasoning out of
    the content."""
    calls = plan is not None and plan.mode != "none"
    if is_harmony(template):
        return HarmonyParser(tuple(t.name for t in plan.callable) if calls else (), reasoning,
                             opened_header(prompt_text))
    think = thinking_of(template)
    return OutputParser(plan.fmt if calls else None, think.opened_by(prompt_text), reasoning,
                        plan.json_names if plan is not None else (), think)
