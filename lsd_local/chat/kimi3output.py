"""Kimi K3's answer read apart (its sections: chat/kimi3calls.py): the `think` section is
reasoning, the `response` section's text is content (its markers are not), the `tools`
section holds the calls, and the message's close ends it."""

from __future__ import annotations

from .kimi3calls import MARKERS, RESPONSE_OPEN, THINK_CLOSE, WRAPPERS
from .output import OutputParser, Parts, _partial_suffix


class Kimi3Parser(OutputParser):
    """An OutputParser that first drops the response section's markers and the message's
    close from the text (keeping each remaining character's origin), holding back a piece
    that may begin one."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._held: list[tuple[str, object]] = []  # text that may begin a wrapper

    @property
    def markers(self) -> tuple[str, ...]:
        """Its section markers show as text with or without tools (the wrappers must be
        read to be dropped)."""
        return (*super().markers, *MARKERS)

    def feed(self, spans, final: bool = False) -> Parts:
        """OutputParser.feed of the text without the wrappers."""
        spans = self._held + [(t, o) for t, o in spans if t]
        text = "".join(t for t, _ in spans)
        keep = 0 if final else max(_partial_suffix(text, w) for w in WRAPPERS)
        cuts, i = [], 0
        while True:  # (the wrappers' places in the text that is released now)
            found = [(at, len(w)) for w in WRAPPERS
                     if 0 <= (at := text.find(w, i)) <= len(text) - keep - len(w)]
            if not found:
                break
            at, n = min(found)
            cuts.append((at, at + n))
            i = at + n
        released, self._held = _split(spans, len(text) - keep)
        opened = self._unclosed_response(text, cuts)
        if opened is None:
            return super().feed(_without(released, cuts), final)
        # (a response opened inside the think section: the reasoning ends there, as
        # llama.cpp reads it, with no close of its own)
        head, tail = _split(released, opened)
        parts = super().feed(_without(head, cuts))
        ended = self.end_reasoning()
        rest = super().feed(_without(tail, [(a - opened, b - opened) for a, b in cuts]), final)
        return Parts(parts.content + ended.content + rest.content,
                     parts.reasoning + ended.reasoning + rest.reasoning,
                     parts.tool_calls + rest.tool_calls)

    def _unclosed_response(self, text: str, cuts: list[tuple[int, int]]) -> int | None:
        """Where a response section opens while the reasoning has not closed (None: it
        does not)."""
        if self.state != "reasoning":
            return None
        for at, _ in cuts:
            if text.startswith(RESPONSE_OPEN, at):
                before = self._pending_text() + text[:at]
                return None if THINK_CLOSE in before else at
        return None


def _split(spans: list, n: int) -> tuple[list, list]:
    """(the spans' first n characters, the rest), as spans."""
    head, tail = [], []
    for text, origin in spans:
        if n >= len(text):
            head.append((text, origin))
        elif n > 0:
            head.append((text[:n], origin))
            tail.append((text[n:], origin))
        else:
            tail.append((text, origin))
        n -= len(text)
    return head, tail


def _without(spans: list, cuts: list[tuple[int, int]]) -> list:
    """The spans without the characters in `cuts` ((start, end) in the joined text)."""
    out, at = [], 0
    for text, origin in spans:
        kept = "".join(ch for k, ch in enumerate(text, at)
                       if not any(a <= k < b for a, b in cuts))
        if kept:
            out.append((kept, origin))
        at += len(text)
    return out
