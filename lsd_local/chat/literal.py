"""User text stays text: a message or a tool result that spells a control token
(`<|im_end|>`, `<|im_start|>`) is tokenized as those characters, never as the token, so that
text cannot forge a role, an end of turn or an earlier tool call. Only the chat template's
own markup yields control tokens.

How: before the template renders, every control-token spelling in the user's strings
(message contents, tool calls and results, tool specifications) is replaced by a marker no
text can contain (private-use characters and a random nonce). The rendered text is split at
the template's control tokens as llama.cpp's tokenizer splits it; each piece of text in
between gets its markers back and is tokenized with special-token parsing off. A prompt that
spells no control token is tokenized exactly as before, in one call.
"""

from __future__ import annotations

import re
import secrets

_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"


def _controls_in(text: str, vocab) -> dict[str, int]:
    """The control tokens that `text` spells: their text -> id."""
    found = {}
    for token in vocab.tokenize(text, add_special=False, parse_special=True):
        if vocab.is_control(token):
            found[vocab.token_text(token).decode("utf-8", "replace")] = token
    return found


def _alternation(texts) -> re.Pattern:
    return re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True)))


class Shield:
    """Markers for one rendering (`vocab`: a backend Vocab); `hide`: other spellings to
    mark in the user's strings (a family's reasoning markers where they are no control
    tokens: the rendered text then shows only the template's own)."""

    def __init__(self, vocab, hide: tuple[str, ...] = ()) -> None:
        self.vocab = vocab
        self._hide = hide
        self._prefix = f"{_MARK_OPEN}{secrets.token_hex(8)}:"
        self._originals: list[str] = []
        self._marker = re.compile(re.escape(self._prefix) + r"(\d+)" + _MARK_CLOSE)

    def value(self, value: object) -> object:
        """`value` (strings, lists and dicts of them, keys included) with every
        control-token spelling replaced by a marker."""
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        if isinstance(value, dict):  # (keys too: a tool's property names are text)
            return {self.value(key): self.value(item) for key, item in value.items()}
        return value

    def _text(self, text: str) -> str:
        spellings = set(_controls_in(text, self.vocab)) if text else set()
        spellings.update(h for h in self._hide if h in text)
        if not spellings:
            return text
        return _alternation(spellings).sub(lambda m: self._mark(m.group()), text)

    def _mark(self, original: str) -> str:
        self._originals.append(original)
        return f"{self._prefix}{len(self._originals) - 1}{_MARK_CLOSE}"

    def reveal(self, text: str) -> str:
        """Rendered text with the user's own spellings back in place of the markers."""
        if not self._originals:
            return text
        return self._marker.sub(lambda m: self._originals[int(m.group(1))], text)

    def tokens(self, rendered: str) -> list[int]:
        """The rendered prompt's tokens: the template's control tokens as tokens, everything
        else (the user's text, markers revealed) tokenized as text. A BOS the template wrote
        is not added again."""
        vocab = self.vocab
        bos = vocab.token_bytes(vocab.bos_token).decode("utf-8", "replace")
        add_bos = vocab.add_bos and not (bos and rendered.startswith(bos))
        ids = [vocab.bos_token] if add_bos else []
        if not self._originals or self._prefix not in rendered:
            return ids + vocab.tokenize(rendered, add_special=False)
        controls = _controls_in(rendered, vocab)
        pattern = _alternation(controls) if controls else None
        pieces = pattern.split(rendered) if pattern else [rendered]
        found = pattern.findall(rendered) if pattern else []
        for i, piece in enumerate(pieces):
            if piece:
                ids += vocab.tokenize(self.reveal(piece), add_special=False,
                                      parse_special=False)
            if i < len(found):
                ids.append(controls[found[i]])
        return ids
