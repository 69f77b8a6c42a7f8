"""Reading an answer in gpt-oss's harmony format as it streams (chat/harmony.py has the
format): analysis to reasoning, a message to `functions.NAME` to a tool call, the final
channel (and a preamble) to content."""

from __future__ import annotations

from .functionarycalls import OPEN as FUNCTIONARY_OPEN
from .functionarycalls import is_functionary
from .functionaryoutput import RecipientParser
from .harmony import (
    CALL_PREFIX,
    CHANNEL,
    END,
    MARKERS,
    MESSAGE,
    REASONING_CLOSE,
    REASONING_CLOSE_OPEN,
    REASONING_CLOSE_TO_CALL,
    START,
    is_harmony,
    read_header,
)
from .jsonscan import CallScan, value_end
from .kimi3calls import is_kimi3
from .kimi3output import Kimi3Parser
from .output import OutputParser, Parts, _partial_suffix
from .thinking import thinking_of
from .tools import FORMATS
from .turns import turn_ends

HEADER_STARTS = (START, CHANNEL, " to=")
MAX_HEADER = 256  # characters: a longer "header" is text a model wrote without one


def _may_be_header(text: str) -> bool:
    """Whether `text` (the start of a message, no `<|message|>` yet) may still be a header."""
    if len(text) > MAX_HEADER or "\n" in text:
        return False
    return any(text.startswith(s) or s.startswith(text) for s in HEADER_STARTS)


def _held_back(text: str) -> int:
    """How much of text's end may be the start of a message's end or of the next one."""
    return max(_partial_suffix(text, END), _partial_suffix(text, START))


class HarmonyParser(OutputParser):
    """OutputParser for the harmony format (same feed/tool_calls/in_reasoning). `names`: the
    tools a call may name (empty: no calls are read, a message to a recipient is content);
    `required`: the answer must be a call; `opened`: the header of a message the prompt
    left open."""

    @property
    def reasoning_close(self) -> str:
        if not self.names:
            return REASONING_CLOSE
        if self.required:
            return REASONING_CLOSE_TO_CALL
        return REASONING_CLOSE_OPEN if self._analyses <= 1 else REASONING_CLOSE

    @property
    def markers(self) -> tuple[str, ...]:
        return MARKERS

    @property
    def may_open_reasoning(self) -> bool:
        """A header, or a body that another message may follow (not the final one)."""
        return self.reasoning and (self.state == "header" or (
            self._kind == "content" and self._channel != "final"))

    def __init__(self, names: tuple[str, ...] = (), reasoning: bool = True,
                 opened: str | None = None, required: bool = False) -> None:
        super().__init__(None, False, reasoning)
        self.names, self.required = names, required
        self.state = "header"
        self._kind = "content"  # the body being read: "content", "reasoning" or "call"
        self._channel = "final"  # the channel of the body being read
        self._analyses = 0  # analysis messages opened
        self._call_body = ""  # a call's body so far
        self._opening = Parts()  # what opening the prompt's message gave (see feed)
        if opened is not None:  # (the prompt ends inside a message: its body goes on)
            self._open(self._opening, *read_header(opened))
        self.in_reasoning = self._reasoning_now()
        # the prompt left an analysis message open: the answer starts inside its body
        self.opened_analysis = opened is not None and self._channel == "analysis" and \
            self._kind != "call"

    def feed(self, spans, final: bool = False) -> Parts:
        parts = super().feed(spans, final)
        if self._opening.tool_calls:  # (a call the prompt opened: its id and name first)
            parts.tool_calls[:0] = self._opening.tool_calls
            self._opening = Parts()
        return parts

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
        keep = 0 if final else _held_back(text)
        parts.content += self._take(len(text) - keep)

    def _open(self, parts: Parts, channel: str, recipient: str | None) -> None:
        self.state, self._call_body, self._channel = "body", "", channel
        name = recipient[len(CALL_PREFIX):] if recipient else None  # (read_header's)
        if name is not None and name in self.names:
            self._kind = "call"
            self._stream_call(parts, len(self._announced), CallScan(name, "", False))
        else:
            self._kind = "reasoning" if channel == "analysis" and self.reasoning and \
                recipient is None else "content"
            self._analyses += self._kind == "reasoning"

    def _body(self, parts: Parts, final: bool) -> None:
        if self._kind == "call":
            self._call_text(parts, final)
            return
        text = self._pending_text()
        ends = [i for i in (text.find(END), text.find(START)) if i >= 0]
        at = min(ends) if ends else -1
        keep = 0 if final or at >= 0 else _held_back(text)
        taken = self._take(at if at >= 0 else len(text) - keep)
        if self._kind == "reasoning":
            parts.reasoning += taken
        else:
            parts.content += taken
        if at >= 0:
            if text.startswith(END, at):
                self._take(len(END))
            self.state = "header"

    def _call_text(self, parts: Parts, final: bool) -> None:
        """A call's body is its arguments' JSON: it ends where the JSON does (a string in it
        may hold `<|end|>`), or with the answer. What follows is read as the next message."""
        taken = self._take(len(self._pending_text()))
        self._call_body += Parts.text(taken)
        lead = len(self._call_body) - len(self._call_body.lstrip())
        end = value_end(self._call_body, lead)
        if end is None and not final:
            self._stream_arguments(parts, done=False)
            return
        rest = self._call_body[end:] if end is not None else ""
        self._call_body = self._call_body[:end] if end is not None else self._call_body
        self._stream_arguments(parts, done=True)
        rest = rest.lstrip()
        rest = rest[len(END):] if rest.startswith(END) else rest
        self._pending = [(rest, taken[-1][1])] if rest else []
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
    """output_parser_for(...), with the stop strings that end the family's turn."""
    parser = output_parser_for(template, plan, prompt_text, reasoning)
    parser.stops = turn_ends(template)
    return parser


def output_parser_for(template: str | None, plan, prompt_text: str,
                      reasoning: bool) -> OutputParser:
    """The parser for an answer to a chat prompt (`prompt_text`) rendered by `template`:
    harmony's for a harmony template, else the `<think>`/tool-call one. `plan`: the
    request's chat.tools.ToolPlan (None: no tools); `reasoning`: split the reasoning out of
    the content."""
    calls = plan is not None and plan.mode != "none"
    if is_harmony(template):
        return HarmonyParser(tuple(t.name for t in plan.callable) if calls else (), reasoning,
                             opened_header(prompt_text), calls and plan.mode == "required")
    if is_functionary(template):
        return RecipientParser(plan.fmt if calls else FORMATS["functionary"],
                               tuple(t.name for t in plan.callable) if calls else (),
                               prompt_text.endswith(FUNCTIONARY_OPEN))
    think = thinking_of(template)
    if is_kimi3(template):  # (its response section's markers are no part of the answer)
        return Kimi3Parser(plan.fmt if calls else None, think.opened_by(prompt_text),
                           reasoning, plan.json_names if plan is not None else (), think)
    return OutputParser(plan.fmt if calls else None, think.opened_by(prompt_text), reasoning,
                        plan.json_names if plan is not None else (), think)
