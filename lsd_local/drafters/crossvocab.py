"""Drafting with a model whose vocabulary differs from the target's, through text.

The draft model reads the committed text tokenized its own way and proposes a continuation in
its own tokens; the proposal's text is tokenized the target's way and handed to the verifier
like any draft (the last target token is dropped: it may be a word cut in half).

Alignment is incremental. The draft tokens of the prompt are fixed once (`_fixed_ids`); each
round only the text after an anchor (`_tail`) is tokenized again, and the anchor moves forward
over all but the last REWIND tokens whenever their text is reproduced exactly. The inner model
drafter keeps its KV cache for the longest common prefix, so the unchanged prefix is never
evaluated again. Strict output is still the target's greedy output: drafts are only proposals.
"""

from __future__ import annotations

import re

import numpy as np

from ..config import SamplerSettings
from ..utf8 import utf8_bytes
from ..verify.constrain import allowed_prefix
from .base import EMPTY_DRAFT, Draft, Drafter

SPACE_PREFIXES = (b" ", "\u2581".encode())  # as a space piece, or a vocabulary without "▁"
REWIND = 4  # draft tokens at the end of the text that are re-tokenized as text grows
MAX_TAIL_TOKENS = 12  # committed target tokens tried as context when converting a proposal


class TextCodec:
    """One model's tokenizer as text <-> tokens. `vocab` is a backend Vocab (duck-typed:
    tokenize_bytes, token_bytes, token_bytes_special, is_eog, add_bos, bos_token)."""

    def __init__(self, vocab) -> None:
        self.vocab = vocab
        self._pieces: dict[int, bytes] = {}
        # SentencePiece-style tokenizers put a space (or, without a "▁" token, its bytes) before
        # text that starts the input or follows a special token: such text is spelled exactly
        # only when it starts with a space.
        self.space_prefix = self.text(vocab.tokenize_bytes(b"a", False, False)) != b"a"

    def piece(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self.vocab.token_bytes_special(token)
        return piece

    def text(self, tokens) -> bytes:
        """The bytes `tokens` (int32[n] or ints) spell (Python ints at once: lookup and
        renames spell dozens of tokens a round)."""
        ids = tokens.tolist() if isinstance(tokens, np.ndarray) else map(int, tokens)
        return b"".join(map(self.piece, ids))

    def exact(self, data: bytes) -> list[int] | None:
        """Tokens whose pieces spell exactly `data`, or None when this tokenizer cannot."""
        if not data:
            return []
        if self.space_prefix and data.startswith(b" "):  # the tokenizer adds that space
            tokens = self.vocab.tokenize_bytes(data[1:], False, True)
            if self.text(tokens) == data:
                return tokens
        tokens = self.vocab.tokenize_bytes(data, False, True)
        spelled = self.text(tokens)
        if spelled == data:
            return tokens
        if self.space_prefix:  # drop leading tokens that spell just the added prefix
            for prefix in SPACE_PREFIXES:
                if spelled == prefix + data:
                    n, covered = 0, b""
                    while len(covered) < len(prefix):
                        covered += self.piece(tokens[n])
                        n += 1
                    if covered == prefix:
                        return tokens[n:]
        return None

    def encode(self, data: bytes) -> list[int]:
        """Best effort: exact when possible, else the tokenizer's own reading of `data`."""
        exact = self.exact(data)
        return exact if exact is not None else self.vocab.tokenize_bytes(data, False, True)


def complete_utf8(data: bytes) -> bytes:
    """`data` without a trailing, incomplete UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last lead byte (or ASCII)
            need = 4 if byte >= 0xF0 else 3 if byte >= 0xE0 else 2 if byte >= 0xC0 else 1
            return data if back >= need else data[:-back]
    return data  # no lead byte among the last four: not UTF-8 anyway, leave it


class CrossVocabDrafter(Drafter):
    """Wraps a ModelDrafter (or MultiLevelDrafter) over a draft model of another vocabulary."""

    name = "cross-vocab"

    def __init__(self, inner, target: TextCodec, draft: TextCodec) -> None:
        self.inner = inner
        self.target = target
        self.draft = draft
        self.reset()

    @property
    def n_forward(self) -> int:
        return self.inner.n_forward

    @property
    def n_evaluated(self) -> int:
        return self.inner.n_evaluated

    def begin(self, family: str | None = None, n_prompt: int | None = None) -> None:
        # (nor its prompt's length, nor its end(): its tokens are another vocabulary's)
        self.inner.begin(family)

    def reset(self) -> None:
        """Forget the alignment and the draft cache."""
        self.inner.reset()
        self._seen = np.zeros(0, np.int32)
        self._fixed_ids: list[int] = []
        self._tail = b""

    def pending(self, history: np.ndarray) -> int:
        """Target tokens not yet read by the draft model (about as many draft tokens)."""
        return max(0, len(history) - len(self._seen)) + self.inner.pending(
            np.asarray(self._fixed_ids, np.int32))

    def propose(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                rng: np.random.Generator | None = None, grammar=None) -> Draft:
        """history: int32[n] committed target tokens. The draft is greedy in the draft's
        space; as its probabilities are over another vocabulary, sampling verifies it one-hot."""
        if k <= 0:
            return EMPTY_DRAFT
        context = self._align(history)
        proposal = self.inner.propose(np.asarray(context, np.int32), k + 1)
        text, ended = self._proposal_text(proposal.tokens)
        tokens = self._to_target(history, text, ended)[:k]
        if grammar is not None and tokens:
            tokens = tokens[:allowed_prefix(grammar, np.asarray(tokens, np.int32))]
        if not tokens:
            return EMPTY_DRAFT
        return Draft(np.asarray(tokens, np.int32), None, "cross-vocab")

    def _align(self, history: np.ndarray) -> list[int]:
        """The draft's tokens for the committed text (fixed prefix + re-tokenized tail)."""
        seen = len(self._seen)
        if seen == 0 or seen > len(history) or not np.array_equal(history[:seen], self._seen):
            self._start(history)
        else:
            self._tail += self.target.text(history[seen:])
        self._seen = np.array(history, np.int32)
        tail_ids = self.draft.exact(self._tail)
        if tail_ids is None:
            return self._fixed_ids + self.draft.encode(self._tail)
        context = self._fixed_ids + tail_ids
        self._advance(tail_ids)
        return context

    def _start(self, history: np.ndarray) -> None:
        """A new conversation: tokenize all of it the draft's way (its text stays fixed)."""
        tokens = history[1:] if (self.target.vocab.add_bos and len(history)
                                 and history[0] == self.target.vocab.bos_token) else history
        ids = self.draft.vocab.tokenize_bytes(self.target.text(tokens), False, True)
        bos = [self.draft.vocab.bos_token] if self.draft.vocab.add_bos else []
        self._fixed_ids = bos + ids
        self._tail = b""

    def _advance(self, tail_ids: list[int]) -> None:
        """Move the anchor over all but the last REWIND tail tokens, to a point from where the
        rest is spelled exactly again (before a space for SentencePiece-style tokenizers)."""
        cut = len(tail_ids) - REWIND
        while cut > 0 and self.draft.space_prefix and not self.draft.piece(
                tail_ids[cut]).startswith(b" "):
            cut -= 1
        if cut > 0:
            self._fixed_ids = self._fixed_ids + tail_ids[:cut]
            self._tail = self._tail[len(self.draft.text(tail_ids[:cut])):]

    def _proposal_text(self, draft_tokens: np.ndarray) -> tuple[bytes, bool]:
        """Text of the draft's proposal up to its first end-of-generation or control token
        (without a trailing incomplete character), and whether the draft ended there."""
        parts = []
        for token in draft_tokens:
            piece = self.draft.vocab.token_bytes(int(token))
            if self.draft.vocab.is_eog(int(token)) or not piece:
                return complete_utf8(b"".join(parts)), True
            parts.append(piece)
        return complete_utf8(b"".join(parts)), False

    def _to_target(self, history: np.ndarray, text: bytes, ended: bool = False) -> list[int]:
        """Target tokens for `text` following the committed tokens: tokenize the last few
        committed tokens' text plus `text`, require the committed tokens to come back unchanged,
        keep what follows them. When the text ends inside a word the draft did not end, its
        last token is dropped: the target may well spell the rest of the word otherwise."""
        if not text:
            return []
        cut_word = not ended and (text[-1:].isalnum() or text[-1] >= 0x80)
        for m in range(1, min(MAX_TAIL_TOKENS, len(history)) + 1):
            committed = [int(t) for t in history[-m:]]
            tokens = self.target.exact(self.target.text(committed) + text)
            if tokens is not None and tokens[:m] == committed and len(tokens) > m:
                return tokens[m:-1] if cut_word else tokens[m:]
        return []


def marked_tokens(vocab, text: str, markers: tuple[str, ...]) -> list[int]:
    """Tokens that spell `text` exactly (what lsd writes for a model: a reasoning block's
    close), each of `markers` as its own token where the vocabulary has one. SentencePiece
    tokenizers put a space before the text after such a token, which a grammar expecting
    `<|start|>assistant` refuses; where a piece cannot be spelled exactly any other way, it
    is spelled a byte at a time. The tokenizer's own reading if even that fails."""
    codec, spell = TextCodec(vocab), None
    pattern = "(" + "|".join(re.escape(m) for m in sorted(markers, key=len, reverse=True)) + ")"
    tokens: list[int] = []
    for piece in re.split(pattern, text) if markers else [text]:
        data = utf8_bytes(piece)
        ids = vocab.tokenize_bytes(data, False, True) if piece in markers else None
        exact = ids if ids is not None and len(ids) == 1 else codec.exact(data)
        if exact is None:
            spell = spell if spell is not None else vocab.byte_tokens()
            if not all(b in spell for b in data):
                return vocab.tokenize(text, add_special=False)
            exact = [spell[b] for b in data]
        tokens += exact
    return tokens
