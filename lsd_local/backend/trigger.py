"""Python's view of a lazy grammar's trigger, so that no token can make llama.cpp abort.

A lazy grammar waits, allowing everything, until a trigger pattern matches the text generated
so far; it then feeds the grammar the text from the match's first group on, including the
rest of the token that completed the match. When the grammar rejects that text (a tool call
`{"name": "now"}` closed by one token `"}` where "arguments" must follow), llama.cpp throws
through its C API and the process aborts. This guard replays the trigger on the token a
generation is about to take: a token that would start the grammar on text it rejects, or
inside an unclosed `<think>` block (a call drafted while reasoning is not a call; also the
opener's own token, where it is one), is refused as a forbidden token is, and never reaches
llama.cpp.
"""

from __future__ import annotations

import re

# A match can only end with the newest token: the search looks at the end of the text (the
# longest trigger, a fenced call's opening with its indents, is far shorter); a pattern
# anchored at the start needs the start, which only a short text still has.
SEARCH_TAIL = 1024
THINK_OPEN, THINK_CLOSE = b"<think>", b"</think>"


class TriggerGuard:
    """The text a lazy grammar has seen while waiting, and whether a token is safe for it.
    `validate(text)` says whether the grammar, started afresh, accepts `text`."""

    def __init__(self, patterns: tuple[str, ...], tokens: tuple[int, ...], piece,
                 validate) -> None:
        self._patterns = [re.compile(p.encode()) for p in patterns]
        self._tokens = frozenset(tokens)
        self._piece = piece  # token id -> bytes, as llama.cpp's trigger buffer gets them
        self._validate = validate
        self.buffer = b""
        self.waiting = True
        self._opened = b""  # the opener when the prompt opened the block (not generated text)
        # the family's reasoning markers: open, close, and what else ends the block (Ling 3:
        # a call's opener)
        self.think: tuple[bytes, bytes, tuple[bytes, ...]] = (THINK_OPEN, THINK_CLOSE, ())

    def inside_reasoning(self) -> None:
        """The generation starts inside a reasoning block its prompt opened."""
        self._opened = self.think[0]

    def clone(self) -> TriggerGuard:
        twin = TriggerGuard((), (), self._piece, self._validate)
        twin._patterns, twin._tokens, twin.think = self._patterns, self._tokens, self.think
        twin.buffer, twin.waiting, twin._opened = self.buffer, self.waiting, self._opened
        return twin

    def _start(self, text: bytes) -> int | None:
        """Where the grammar would start in `text` (None: no pattern matches)."""
        offset = max(0, len(text) - SEARCH_TAIL)
        for pattern in self._patterns:
            anchored = pattern.pattern.startswith(b"^")
            if anchored and offset:
                continue
            found = pattern.search(text if anchored else text[offset:])
            if found:
                start = found.start(1) if found.groups() and found.group(1) is not None \
                    else found.start()
                return start + (0 if anchored else offset)
        return None

    def safe(self, token: int) -> bool:
        """Whether taking `token` now is safe: it starts no grammar, or starts it on text the
        grammar accepts and outside a reasoning block."""
        if not self.waiting:
            return True
        if token in self._tokens:  # the opener's own token: a call, but not while reasoning
            return not self._reasoning(self.buffer) or self._ends_reasoning(self._piece(token))
        text = self.buffer + self._piece(token)
        start = self._start(text)
        if start is None:
            return True
        if self._reasoning(text[:start]) and not self._ends_reasoning(text[start:]):
            return False
        return self._validate(text[start:].decode("utf-8", "replace"))

    def _reasoning(self, text: bytes) -> bool:
        """Whether generated `text` ends inside a reasoning block."""
        seen = self._opened + text
        return seen.rfind(self.think[0]) > max(seen.rfind(marker)
                                               for marker in (self.think[1], *self.think[2]))

    def _ends_reasoning(self, text: bytes) -> bool:
        """Whether a call starting with `text` ends the reasoning it is written in (Ling 3's
        calls do)."""
        return any(text.startswith(end) for end in self.think[2])

    def advance(self, token: int) -> None:
        """The grammar takes `token` (checked safe): follow its trigger."""
        if not self.waiting:
            return
        if token in self._tokens:
            self.waiting, self.buffer = False, b""
            return
        self.buffer += self._piece(token)
        if self._start(self.buffer) is not None:
            self.waiting, self.buffer = False, b""
