"""Functionary v3.2's answer read apart (its messages: chat/functionarycalls.py): the text to
`all` is content, a message to a function a call, the recipient lines neither."""

from __future__ import annotations

from .functionarycalls import MAYBE_RECIPIENT, OPEN, RECIPIENT
from .output import OutputParser, Parts, _partial_suffix

ANSWER = "all"  # the recipient of the answer's text


class RecipientParser(OutputParser):
    """Functionary's answer read apart: the text to `all` is content, a message to one of
    `names` (the functions a call may name) is a call; to another it stays text, header and
    all. `opened`: the prompt ended with `>>>`."""

    def __init__(self, fmt, names: tuple[str, ...], opened: bool) -> None:
        super().__init__(fmt, False, False)
        self.names = names
        self._head = opened  # the pending text starts with a recipient's name

    def _start(self, parts: Parts, final: bool) -> None:
        self.state = "content"  # (no reasoning block in this family)

    def _content(self, parts: Parts, final: bool) -> None:
        text = self._pending_text()
        if self._after_call:  # (whitespace after a call is neither content nor a call)
            self._take(len(text) - len(text.lstrip()))
            text = self._pending_text()
            if not text:
                return
            self._after_call = False
        if self._head:
            if self._recipient(parts, text, final):
                return
            text = self._pending_text()  # (no recipient: text from here on)
        at = text.find(OPEN)
        if at < 0:
            keep = 0 if final else _partial_suffix(text, OPEN)
            parts.content += self._take(len(text) - keep)
            return
        parts.content += self._take(at)
        self._head = True  # (read now: the parser's loop sees only the text and the state)
        self._recipient(parts, self._pending_text(), final)

    def _recipient(self, parts: Parts, text: str, final: bool) -> bool:
        """The pending text starts where a recipient may be named: read it (False: none is,
        the text is content; its ">>>" given out, so that it opens nothing again)."""
        head = RECIPIENT.match(text)
        if head is None:
            if MAYBE_RECIPIENT.fullmatch(text) and not final:
                return True  # (wait for its end of line)
            self._head = False
            parts.content += self._take(len(OPEN) if text.startswith(OPEN) else 0)
            return False
        self._head = False
        if head.group(1) == ANSWER:
            self._take(head.end())
        elif head.group(1) in self.names:
            self.state = "call"
        else:
            parts.content += self._take(head.end())
        return True
