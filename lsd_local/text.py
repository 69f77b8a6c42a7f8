"""Token bytes -> streamed text: valid UTF-8 across token boundaries, stop strings held back."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence

from .stats import Origin


class TextAssembler:
    """Turns committed tokens into released text.

    A character split across tokens is released once complete (incremental UTF-8 decoder).
    Text that might be the start of a stop string is held back until it is known not to be;
    when a stop string appears, the text before it is final.
    """

    def __init__(self, token_bytes: Callable[[int], bytes], stop: Sequence[str] = ()) -> None:
        self._token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(s for s in stop if s)
        self.text = ""  # everything decoded so far (may run past a stop string)
        self._released = 0
        self._token_ends: list[tuple[int, Origin]] = []  # text offset after each token
        self._first_unreleased = 0
        self.stopped = False

    def add(self, token: int, origin: Origin) -> None:
        self.text += self._decoder.decode(self._token_bytes(token))
        self._token_ends.append((len(self.text), origin))

    def finish(self) -> None:
        """No more tokens: flush an incomplete trailing character (as U+FFFD)."""
        self.text += self._decoder.decode(b"", final=True)
        if self._token_ends:
            self._token_ends[-1] = (len(self.text), self._token_ends[-1][1])

    def release(self, final: bool = False) -> tuple[str, tuple[tuple[str, Origin], ...]]:
        """Text (and its origin spans) that can be shown now; sets `stopped` on a stop string."""
        end = len(self.text)
        if self._stop and not self.stopped:
            longest = max(len(s) for s in self._stop)
            search_from = max(0, self._released - longest + 1)
            hits = [i for i in (self.text.find(s, search_from) for s in self._stop) if i >= 0]
            if hits:
                end = min(hits)
                self.stopped = True
            elif not final:
                end -= _held_back(self.text, self._stop)
        if self.stopped:
            end = min(end, self._stop_end())
        start, self._released = self._released, max(self._released, end)
        return self.text[start:self._released], self._spans(start, self._released)

    def tokens_after_stop(self) -> int:
        """How many of the added tokens came after the one that completed the first stop
        string (none when there is none)."""
        hits = [(at, len(s)) for s in self._stop if (at := self.text.find(s)) >= 0]
        if not hits:
            return 0
        at, n = min(hits)
        through = next((i + 1 for i, (end, _) in enumerate(self._token_ends) if end >= at + n),
                       len(self._token_ends))
        return len(self._token_ends) - through

    def _stop_end(self) -> int:
        hits = [i for i in (self.text.find(s) for s in self._stop) if i >= 0]
        return min(hits) if hits else len(self.text)

    def _spans(self, start: int, end: int) -> tuple[tuple[str, Origin], ...]:
        spans = []
        i = self._first_unreleased  # tokens before it ended at or before `start`
        prev = self._token_ends[i - 1][0] if i else 0
        while i < len(self._token_ends):
            token_end, origin = self._token_ends[i]
            lo, hi = max(prev, start), min(token_end, end)
            if hi > lo:
                spans.append((self.text[lo:hi], origin))
            if token_end > end:
                break
            prev = token_end
            i += 1
        self._first_unreleased = i
        return tuple(spans)

    @property
    def released_text(self) -> str:
        return self.text[:self._released]

    @property
    def token_ends(self) -> list[int]:
        """The text's length after each added token (a character two tokens share counts
        in the second)."""
        return [end for end, _ in self._token_ends]


def _held_back(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of text that is a proper prefix of a stop string."""
    best = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:n]):
                best = n
                break
    return best
