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
        self._ids: list[int] = []  # the tokens whose text is held
        self._text = bytearray()

    def find(self, history: np.ndarray, k: int) -> tuple[np.ndarray, int]:
        """(int32[<= k] what followed the longest earlier occurrence of the text's end,
        the matched length in bytes); nothing under min_chars. At most
        TEXT_LOOKUP_MAX_TOKENS tokens."""
        k = min(k, TEXT_LOOKUP_MAX_TOKENS)
        if k <= 0:
            return NO_TOKENS, 0
        self._sync(history)
        text = self._text
        end = len(text)
        for size in range(min(self.max_chars, end - 1), self.min_chars - 1, -1):
            tail = bytes(text[end - size:])
            if sum(c.isalnum() for c in tail.decode("utf-8", "ignore")) < TEXT_LOOKUP_MIN_ALNUM:
                return NO_TOKENS, 0  # blanks and punctuation: matched anywhere, mean little
            at = text.rfind(tail, 0, end - 1)
            if at < 0:
                continue
            start = at + size
            limit = start + k * BYTES_PER_TOKEN
            follow = complete_utf8(bytes(text[start:min(limit, end)]))
            tokens = self.codec.exact(follow) if follow else None
            if not tokens:
                return NO_TOKENS, 0
            if limit < end and len(tokens) > 1:
                tokens = tokens[:-1]  # (cut mid-word: its last token may not be the model's)
            return np.asarray(tokens[:k], np.int32), size
        return NO_TOKENS, 0

    def _sync(self, history: np.ndarray) -> None:
        """Hold the text of `history`: extended when it grew from what is held, rebuilt
        when it is another context (a new request, a rewind)."""
        held = len(self._ids)
        if held > len(history) or (held and int(history[held - 1]) != self._ids[-1]) or (
                held > 1 and int(history[0]) != self._ids[0]):
            self._ids, self._text = [], bytearray()
            held = 0
        for token in history[held:].tolist():
            self._ids.append(token)
            self._text += self.codec.piece(token)
