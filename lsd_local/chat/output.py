"""An answer read apart as it streams: reasoning (`<think>...</think>`, DeepSeek-R1 distills,
Qwen3, QwQ; also a block the prompt opened), content, and tool calls in the template's
format, each tool call streamed as OpenAI does (its id and name first, then its arguments'
JSON text in pieces). Text that may be the start of a marker is held back until it is known;
text keeps the origin (draft exact / loose, target) of the tokens it came from.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from . import (
    commandrcalls,
    deepseekcalls,
    gemmacalls,
    glmcalls,
    jsoncalls,
    kimi3calls,
    listcalls,
    minimax3calls,
    minimaxcalls,
    mistralcalls,
    pythoncalls,
    xmlcalls,
)
from .jsonscan import scan_call, value_end
from .thinking import THINK, Thinking
from .tools import ToolFormat, read_section

# The markers each tool format's calls are read by (what must show as text, chat/markers)
FORMAT_MARKERS = {"hermes": (xmlcalls.OPEN, xmlcalls.CLOSE), "xml": (xmlcalls.OPEN, xmlcalls.CLOSE),
                  "seed": (xmlcalls.SEED_OPEN, xmlcalls.SEED_CLOSE),
                  "glm": (glmcalls.OPEN, glmcalls.CLOSE, *glmcalls.TAGS),
                  "hy3": glmcalls.HY3_MARKERS,
                  "gemma": gemmacalls.MARKERS,
                  "deepseek": deepseekcalls.DEEPSEEK[:5], "kimi": deepseekcalls.KIMI[:5],
                  "commandr": (commandrcalls.OPEN, commandrcalls.CLOSE),
                  "mistral-args": mistralcalls.MARKERS, "pythonic": pythoncalls.MARKERS,
                  "minimax": (minimaxcalls.OPEN, minimaxcalls.CLOSE),
                  "minimax3": minimax3calls.MARKERS, "kimi3": kimi3calls.MARKERS,
                  # (MiniCPM5's vocabulary has these as tokens: llama.cpp preserves them)
                  "minicpm": ("<function", "</function>", "<param", "</param>"),
                  "dsml": minimaxcalls.DSML_V32[:6] + minimaxcalls.DSML_V4[:2],
                  "gigachat": listcalls.GIGACHAT_MARKERS,
                  **{name: tuple(m for m in markers if m)
                     for name, markers in listcalls.LIST_FORMATS.items()}}


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a streamed tool call: the first carries its id and name."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""  # the next piece of the arguments' JSON text


@dataclass(frozen=True)
class ToolCall:
    """A whole tool call, as OpenAI returns it (arguments: JSON text)."""

    id: str
    name: str
    arguments: str


@dataclass
class Parts:
    """What one round's released text became."""

    content: list = field(default_factory=list)  # (text, origin) spans
    reasoning: list = field(default_factory=list)  # (text, origin) spans
    tool_calls: list = field(default_factory=list)  # ToolCallDelta

    @staticmethod
    def text(spans) -> str:
        return "".join(text for text, _ in spans)


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of marker."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def _first_opener(text: str, openers: tuple[str, ...], final: bool) -> tuple[int, int]:
    """(where the first of `openers` starts in text, or -1; where content ends: there, else
    before a suffix that may begin one, unless final)."""
    found = [at for at in (text.find(opener) for opener in openers) if at >= 0]
    if found:
        return min(found), min(found)
    keep = 0 if final else max(_partial_suffix(text, opener) for opener in openers)
    return -1, len(text) - keep


class OutputParser:
    """Feed it each round's released (text, origin) spans; it returns Parts. `fmt`: the tool
    format to read calls in (None: no tools); `thinking`: the prompt opened a reasoning
    block; `reasoning`: split `<think>` blocks out (else they stay content); `json_names`:
    the tools a call in JSON form may name (chat/jsoncalls.py; empty: none is read);
    `think`: the family's reasoning markers."""

    def __init__(self, fmt: ToolFormat | None = None, thinking: bool = False,
                 reasoning: bool = True, json_names: tuple[str, ...] = (),
                 think: Thinking = THINK) -> None:
        self.fmt = fmt
        self.think = think
        self.stops: tuple[str, ...] = ()  # what ends the family's turn (chat/turns.py)
        self.reasoning = reasoning
        self.json_names = json_names
        # (reasoning=False reads the same blocks, its text and markers kept as content: the
        # model reasons in a block the prompt opened either way, and calls follow its close)
        self.state = "reasoning" if thinking else "start"
        self.opened = thinking  # the prompt opened a reasoning block
        self._reasoned = thinking  # a reasoning block came first
        self._after_call = False  # a call section ended and no content followed yet
        self._pending: list[tuple[str, object]] = []  # released but not yet classified
        self._section = ""  # the tool call section being read
        self._section_origin: object = None  # the origin of its first piece
        self._announced: list[str] = []  # ids of the calls streamed so far
        self._sent: list[str] = []  # per call: the arguments text streamed so far
        self._names: list[str] = []
        self._section_ids: list[str] = []  # ids of the current section's calls
        self._content_seen = False  # content other than whitespace was given out
        self.in_reasoning = self._reasoning_now()

    @property
    def reasoning_close(self) -> str:
        """What a spent reasoning budget writes for the model."""
        return self.think.budget_close

    @property
    def may_open_reasoning(self) -> bool:
        """Whether the next text may open a reasoning block (the answer's start)."""
        return self.reasoning and self.state == "start"

    @property
    def markers(self) -> tuple[str, ...]:
        """The markers this parser reads: a vocabulary's control tokens that spell one must
        show as text (llama.cpp's "preserved tokens"), or they would show as nothing."""
        calls = FORMAT_MARKERS.get(self.fmt.name, ()) if self.fmt is not None else ()
        return (self.think.open, self.think.close, *calls, *self.stops)

    # --- results ----------------------------------------------------------------------

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [ToolCall(i, n, a) for i, n, a in zip(self._announced, self._names, self._sent,
                                                     strict=True)]

    # --- feeding ----------------------------------------------------------------------

    def feed(self, spans, final: bool = False) -> Parts:
        """The parts of newly released text (spans: (text, origin) pairs); `final`: no more
        text will come (flush what was held back)."""
        self._pending.extend((t, o) for t, o in spans if t)
        parts = Parts()
        while True:
            before = (self.state, self._pending_text())
            getattr(self, f"_{self.state}")(parts, final)
            if (self.state, self._pending_text()) == before:
                break
        self.in_reasoning = self._reasoning_now()
        return parts

    def _reasoning_now(self) -> bool:
        """Whether the text now being read is reasoning, read apart (with reasoning=False a
        block's text is content: no budget cuts it, no statistic counts it)."""
        return self.reasoning and self.state == "reasoning"

    def end_reasoning(self) -> Parts:
        """The reasoning block ends here, without its close (Kimi K3's response opened
        inside it): what it held back is released."""
        parts = Parts()
        if self.state == "reasoning":
            self._markup(parts, self._take(len(self._pending_text())), parts.reasoning)
            self.state = "after_reasoning"
        return parts

    def _pending_text(self) -> str:
        return "".join(text for text, _ in self._pending)

    def _take(self, n: int) -> list[tuple[str, object]]:
        """The first n characters of pending text, as spans."""
        taken, rest = [], []
        for text, origin in self._pending:
            if n >= len(text):
                taken.append((text, origin))
                n -= len(text)
            elif n > 0:
                taken.append((text[:n], origin))
                rest.append((text[n:], origin))
                n = 0
            else:
                rest.append((text, origin))
        self._pending = rest
        return taken

    def _start(self, parts: Parts, final: bool) -> None:
        """Before any text: a reasoning block may open, or a bare close say there is none
        (MiniMax-M3's answers without reasoning start so)."""
        text = self._pending_text()
        stripped = text.lstrip()
        opener, close = self.think.open, self.think.close
        if stripped.startswith(opener):
            self._markup(parts, self._take(len(text) - len(stripped) + len(opener)))
            self.state = "reasoning"
            self._reasoned = True
        elif stripped.startswith(close):
            self._markup(parts, self._take(len(text) - len(stripped) + len(close)))
            self.state = "after_reasoning"
            self._reasoned = True  # (a JSON call after it: a lazy trigger at ^ missed it)
        elif not final and (opener.startswith(stripped) or close.startswith(stripped)):
            return  # maybe the beginning of "<think>"
        else:
            self.state = "content"

    def _reasoning(self, parts: Parts, final: bool) -> None:
        text = self._pending_text()
        close = self.think.close
        at = text.find(close)
        # (a family whose reasoning a call's opener ends too keeps the opener for the call)
        cut = min((i for i in (text.find(end) for end in self.think.ends) if i >= 0),
                  default=-1)
        if cut >= 0 and (at < 0 or cut < at):
            self._markup(parts, self._take(cut), parts.reasoning)
            self.state = "after_reasoning"
            return
        if at >= 0:
            self._markup(parts, self._take(at), parts.reasoning)
            self._markup(parts, self._take(len(close)))
            self.state = "after_reasoning"
            return
        keep = 0 if final else max(_partial_suffix(text, marker)
                                   for marker in (close, *self.think.ends))
        self._markup(parts, self._take(len(text) - keep), parts.reasoning)

    def _markup(self, parts: Parts, spans: list, split_to: list | None = None) -> None:
        """Reasoning's text (to `split_to`) or markup (dropped), when the reasoning is split
        out; the content as it was written, when it is not."""
        if not self.reasoning:
            parts.content += spans
        elif split_to is not None:
            split_to += spans

    def _after_reasoning(self, parts: Parts, final: bool) -> None:
        """The whitespace between a reasoning block and the answer is neither."""
        text = self._pending_text()
        self._markup(parts, self._take(len(text) - len(text.lstrip())))
        if self._pending or final:
            self.state = "content"

    def _content(self, parts: Parts, final: bool) -> None:
        text = self._pending_text()
        fmt = self.fmt
        if fmt is None:
            parts.content += self._take(len(text))
            return
        if fmt.at_start_only:  # the whole answer is a call, or none of it
            if self._content_seen:
                parts.content += self._take(len(text))
            elif text.lstrip().startswith("{"):
                self._take(len(text) - len(text.lstrip()))
                self.state = "call"
            elif text.strip() or final:
                self._content_seen = bool(text.strip())
                parts.content += self._take(len(text))
            return
        if self._after_call:  # whitespace after a call: neither content nor call
            blank = len(text) - len(text.lstrip())
            self._take(blank)
            text = text[blank:]
            if not text:
                return
            self._after_call = False
        at, end = _first_opener(text, fmt.openers, final)
        json_at, brace = self._json_call_at(text, final)
        if at < 0 and json_at is None and fmt.ends_message:
            end = self._before_message_end(parts, text, end, final)
            if end is None:
                return
        if json_at is not None and json_at < end:
            at, end = -1, json_at
        self._content_seen |= bool(text[:end].strip())
        parts.content += self._take(end)
        if at >= 0:
            self.state = "call"
        elif json_at == end and brace is not None:
            self._take(brace - json_at)  # the fence: neither content nor call
            self.state = "json_call"

    def _before_message_end(self, parts: Parts, text: str, end: int,
                            final: bool) -> int | None:
        """GigaChat's separator ends the model's message and is not the answer's: content up
        to it is released (it and the blanks after it dropped at the end; None: done here),
        else `end`, short of a piece of it that may go on."""
        closer = self.fmt.ends_message
        stripped = text.rstrip()
        if stripped.endswith(closer):
            kept = len(stripped) - len(closer)
            parts.content += self._take(kept)
            if final:
                self._take(len(text) - kept)
            return None
        return end if final else min(end, len(text) - _partial_suffix(stripped, closer)
                                     - (len(text) - len(stripped)))

    def _json_call_at(self, text: str, final: bool) -> tuple[int | None, int | None]:
        """(where a call in JSON form starts, or may start: text is held back from there;
        the index of its "{" once it is known to be one) in pending content text. A bare
        object only as the answer's first text (as its lazy grammar trigger reads it: not
        after a reasoning block), a fenced one anywhere."""
        if not self.json_names:
            return None, None
        first = not (self._content_seen or self._announced or self._reasoned)
        candidates = [(0, jsoncalls.bare_call)] if first else []
        candidates += [(m.start(), jsoncalls.fenced_call) for m in re.finditer("`", text)]
        for start, reader in candidates:
            state, brace = reader(text[start:], self.json_names)
            if state == "yes":
                return start, start + brace
            if state == "maybe" and not final:
                return start, None
        return None, None

    def _call(self, parts: Parts, final: bool) -> None:
        origin = self._grow_section()
        # (each format's reader stops at its block's end; GLM's arguments have no closer of
        # their own, so only the text after them shows that they are complete)
        calls, end = read_section(self.fmt, self._section)
        base = len(self._announced) - len(self._section_ids)
        for i, scan in enumerate(calls):
            self._stream_call(parts, base + i, scan)
        if (end is not None or (final and self.fmt.at_start_only)) and not self._section_ids:
            # (it ended and named no call: it was text, such as a JSON answer after a
            # reasoning block in a whole-answer format, and stays the answer's; a call that
            # an opener began and the answer's end cut before its name is dropped, as ever)
            parts.content.append((self._section[:end], self._section_origin))
            self._content_seen = True
        self._end_section(end, origin, final)

    def _json_call(self, parts: Parts, final: bool) -> None:
        """A call in JSON form, from its "{" to its end (and its closing fence)."""
        origin = self._grow_section()
        end = jsoncalls.call_end(self._section)
        body = self._section[:value_end(self._section, 0) or len(self._section)]
        base = len(self._announced) - len(self._section_ids)
        self._stream_call(parts, base, scan_call(body))
        self._end_section(end, origin, final)

    def _grow_section(self) -> object:
        """Move all pending text into the call section; the origin of its last piece."""
        taken = self._take(len(self._pending_text()))
        if taken and not self._section:
            self._section_origin = taken[0][1]  # (its first piece's, should it be text)
        self._section += Parts.text(taken)
        return taken[-1][1] if taken else None

    def _end_section(self, end: int | None, origin: object, final: bool) -> None:
        """Once the section's end is known (or no more text comes), what follows it is
        content again."""
        if end is None and not final:
            return
        rest = self._section[end:] if end is not None else ""
        self._after_call = bool(self._section_ids)  # (blanks after a call are neither)
        self._section, self._section_ids = "", []
        self._pending = [(rest, origin)] if rest else []
        self.state = "content"

    def _stream_call(self, parts: Parts, index: int, scan) -> None:
        if scan.name is None:
            return  # (a name must come before anything of a call is streamed)
        if index >= len(self._announced):
            call_id = scan.call_id if scan.call_id and scan.call_id not in self._announced \
                else f"call_{uuid.uuid4().hex[:24]}"  # (the model's own id, where it writes one)
            self._announced.append(call_id)
            self._section_ids.append(call_id)
            self._names.append(scan.name)
            self._sent.append(scan.arguments)
            parts.tool_calls.append(ToolCallDelta(index, call_id, scan.name, scan.arguments))
            return
        sent = self._sent[index]
        if len(scan.arguments) > len(sent) and scan.arguments.startswith(sent):
            parts.tool_calls.append(ToolCallDelta(index, arguments=scan.arguments[len(sent):]))
            self._sent[index] = scan.arguments
