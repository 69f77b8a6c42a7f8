"""Prompt lookup over text rather than tokens: where token lookup finds nothing, the end of
the committed text is searched for in the text before it, and what followed is tokenized as
a draft. The same words are often different tokens in the prompt and in the answer (" maria"
in a sentence, "maria" after a JSON quote; an identifier after a space or a dot), so token
n-grams miss what extraction, quoting and renaming copy; the text does not. Verification
decides as for any draft: a tokenization the model would not choose costs a rejected token.
"""

from __future__ import annotations

import numpy as np

from ..config import (
    TEXT_LOOKUP_MAX_CHARS,
    TEXT_LOOKUP_MAX_TOKENS,
    TEXT_LOOKUP_MIN_ALNUM,
    TEXT_LOOKUP_MIN_CHARS,
)
from .crossvocab import TextCodec, complete_utf8

BYTES_PER_TOKEN = 6  # text taken per draft token asked for (then cut to the tokens asked)
NO_TOKENS = np.zeros(0, np.int32)


class TextLookup:
    """Text lookup over one vocabulary (`codec`: crossvocab.TextCodec of the target's).
    Keeps the committed text of the current context, extended as it grows."""

    def __init__(self, codec: TextCodec, min_chars: int = TEXT_LOOKUP_MIN_CHARS,
                 max_chars: int = TEXT_LOOKUP_MAX_CHARS) -> None:
        self.codec = codec
        self.min_chars = min_chars
        self.max_chars = max_chars
        self._ids = np.zeros(1024, np.int32)  # the tokens whose text is held: [:self._n]
        self._n = 0
        self._text = bytearray()

    def find(self, history: np.ndarray, k: int) -> tuple[np.ndarray, int]:
        """(int32[<= k] what followed the longest earlier occurrence of the text's end,
        the matched length in bytes); nothing under min_chars. At most
        TEXT_LOOKUP_MAX_TOKENS tokens."""
        k = min(k, TEXT_LOOKUP_MAX_TOKENS)
        if k <= 0:
            return NO_TOKENS, 0
        self._sync(history)
        size, at = self._longest_match()
        if size == 0:
            return NO_TOKENS, 0
        text, end = self._text, len(self._text)
        start = at + size
        limit = start + k * BYTES_PER_TOKEN
        follow = complete_utf8(bytes(text[start:min(limit, end)]))
        tokens = self.codec.exact(follow) if follow else None
        if not tokens:
            return NO_TOKENS, 0
        if limit < end and len(tokens) > 1:
            tokens = tokens[:-1]  # (cut mid-word: its last token may not be the model's)
        return np.asarray(tokens[:k], np.int32), size

    def _longest_match(self) -> tuple[int, int]:
        """(size, position) of the longest tail of the text, min_chars to max_chars bytes
        with at least TEXT_LOOKUP_MIN_ALNUM letters or digits (blanks and punctuation alone
        match anywhere and mean little), found earlier in it; (0, -1) for none. Both tests
        are monotone in the size (a longer tail holds the shorter; a tail found earlier has
        its own tails there too), so each is a binary search: a miss, the common case,
        costs one search of the text instead of one per size."""
        text, end = self._text, len(self._text)
        hi = min(self.max_chars, end - 1)
        lo = _first(self.min_chars, hi, lambda size: sum(
            c.isalnum() for c in bytes(text[end - size:]).decode("utf-8", "ignore"))
            >= TEXT_LOOKUP_MIN_ALNUM)
        if lo > hi or text.rfind(text[end - lo:], 0, end - 1) < 0:
            return 0, -1
        size = _first(lo + 1, hi, lambda s: text.rfind(text[end - s:], 0, end - 1) < 0) - 1
        return size, text.rfind(text[end - size:], 0, end - 1)

    def _sync(self, history: np.ndarray) -> None:
        """Hold the text of `history`: extended when it grew from what is held, rebuilt
        when it is another context (a new request, a rewind)."""
        held = self._n
        if held > len(history) or not np.array_equal(history[:held], self._ids[:held]):
            self._text = bytearray()  # (a whole comparison: ~1 µs per 2,000 tokens)
            held = 0
        if len(history) > len(self._ids):
            self._ids = np.resize(self._ids, 2 * len(history))
        self._ids[held:len(history)] = history[held:]
        self._n = len(history)
        for token in history[held:].tolist():
            self._text += self.codec.piece(token)


def _first(lo: int, hi: int, holds) -> int:
    """The smallest n in [lo, hi] for which holds(n), when holds is monotone (False, then
    True); hi + 1 when it holds nowhere."""
    while lo <= hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid - 1
        else:
            lo = mid + 1
    return lo
