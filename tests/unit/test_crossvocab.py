"""Cross-vocabulary drafting logic with fake tokenizers (no llama.cpp): text <-> tokens,
incremental alignment, proposal conversion."""

from __future__ import annotations

import re

import numpy as np
import pytest

from lsd_local.drafters.base import Draft
from lsd_local.drafters.crossvocab import CrossVocabDrafter, TextCodec, complete_utf8


class WordTokenizer:
    """Like a BPE vocabulary: ' word' and 'word' pieces for known words, single bytes for the
    rest; greedy longest match from the left. Token ids: words first, then 256 bytes."""

    def __init__(self, words: list[str], eos: int | None = None) -> None:
        pieces = sorted({p for w in words for p in (w, " " + w)}, key=len, reverse=True)
        self.pieces = [p.encode() for p in pieces] + [bytes([b]) for b in range(256)]
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self.eos = len(self.pieces) if eos is None else eos
        self.add_bos = False
        self.bos_token = -1
        self.calls: list[int] = []  # bytes tokenized per call

    def tokenize_bytes(self, data: bytes, add_special: bool = False,
                       parse_special: bool = True) -> list[int]:
        self.calls.append(len(data))
        out, i = [], 0
        while i < len(data):
            for piece in self.pieces:
                if data.startswith(piece, i):
                    out.append(self.ids[piece])
                    i += len(piece)
                    break
        return out

    def token_bytes(self, token: int) -> bytes:
        return b"" if token == self.eos else self.pieces[token]

    token_bytes_special = token_bytes

    def is_eog(self, token: int) -> bool:
        return token == self.eos


TARGET_WORDS = ["the", "cat", "sat", "on", "mat", "def", "return", "é"]
DRAFT_WORDS = ["th", "e", "ca", "t", "sa", "on the", "mat", "ret", "urn"]


class ScriptedInner:
    """Stands in for the ModelDrafter: records the draft-token context it is given and
    proposes the draft tokens of a scripted continuation text."""

    def __init__(self, tokenizer: WordTokenizer, continuation: bytes) -> None:
        self.tokenizer = tokenizer
        self.continuation = continuation
        self.contexts: list[list[int]] = []
        self.n_forward = self.n_evaluated = 0

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        self.contexts.append([int(t) for t in history])
        tokens = self.tokenizer.tokenize_bytes(self.continuation)[:k]
        return Draft(np.array(tokens, np.int32))

    def pending(self, history):
        return 0

    def reset(self):
        self.contexts.clear()


def make(continuation: bytes = b" sat on the mat."):
    target, draft = WordTokenizer(TARGET_WORDS), WordTokenizer(DRAFT_WORDS)
    inner = ScriptedInner(draft, continuation)
    return CrossVocabDrafter(inner, TextCodec(target), TextCodec(draft)), target, draft, inner


def test_complete_utf8_drops_only_a_cut_character():
    text = "aé✓😀".encode()
    assert complete_utf8(text) == text
    for cut in range(1, 4):
        assert complete_utf8(text[:-cut]) == "aé✓".encode()
    assert complete_utf8("é".encode()[:1]) == b""
    assert complete_utf8(b"abc") == b"abc"


def test_codec_spells_text_exactly_or_says_it_cannot():
    codec = TextCodec(WordTokenizer(TARGET_WORDS))
    assert not codec.space_prefix
    tokens = codec.exact(b" the cat sat")
    assert codec.text(tokens) == b" the cat sat" and len(tokens) == 3


@pytest.mark.parametrize("text,expected", [
    (b" sat on the mat.", [" sat", " on", " the", " mat", "."]),
    # ends inside a word: its last target token ('a' of ' ', 'm', 'a') is dropped
    (b" sat on the ma", [" sat", " on", " the", " ", "m"]),
    (b" sat \xc3", [" sat", " "]),  # a cut multi-byte character is not proposed
])
def test_proposal_becomes_target_tokens(text, expected):
    drafter, target, _, _ = make(text)
    history = np.array(target.tokenize_bytes(b" the cat"), np.int32)
    draft = drafter.propose(history, 10)
    assert [target.pieces[t].decode() for t in draft.tokens] == expected
    assert draft.source == "cross-vocab" and draft.probs is None


def test_proposal_merging_with_the_committed_text_keeps_committed_tokens():
    """The committed ' ca' + proposed 't' must come back as ' ca' 't' (tokenizing ' cat' would
    merge them into one target token that differs from what was committed)."""
    drafter, target, _, _ = make(b"t sat.")
    history = np.array(target.tokenize_bytes(b" the") + [target.ids[b" "], target.ids[b"c"],
                                                           target.ids[b"a"]], np.int32)
    draft = drafter.propose(history, 10)
    # the committed 'a' re-tokenized with the proposal comes back as 'a' 't' ' sat'; with one
    # more committed token (' ' 'c' 'a' 't') it would merge into ' cat' and be refused
    assert [target.pieces[t] for t in draft.tokens] == [b"t", b" sat", b"."]


def test_alignment_is_incremental_and_equals_a_full_tokenization():
    drafter, target, draft_tok, inner = make()
    text = b" the cat sat on the mat and the cat sat on the mat again"
    full = target.tokenize_bytes(text)
    for n in range(3, len(full) + 1):
        draft_tok.calls.clear()
        drafter.propose(np.array(full[:n], np.int32), 4)
        committed = b"".join(target.pieces[t] for t in full[:n])
        assert inner.contexts[-1] == draft_tok.tokenize_bytes(committed)
        # only the tail after the anchor was tokenized again (not the whole text)
        assert max(draft_tok.calls[:-1] or [0]) <= 40
    assert len(drafter._fixed_ids) > 10  # the anchor moved forward


def test_a_new_conversation_restarts_the_alignment():
    drafter, target, draft_tok, inner = make()
    first = target.tokenize_bytes(b" the cat sat")
    drafter.propose(np.array(first, np.int32), 4)
    second = target.tokenize_bytes(b" def return")
    drafter.propose(np.array(second, np.int32), 4)
    assert inner.contexts[-1] == draft_tok.tokenize_bytes(b" def return")


def test_end_of_generation_in_the_draft_ends_the_proposal():
    drafter, target, draft_tok, inner = make(b" sat on")
    inner.continuation = b" sat on"
    real = inner.propose
    inner.propose = lambda h, k, *a, **kw: Draft(np.concatenate(
        [real(h, k).tokens, [draft_tok.eos], draft_tok.tokenize_bytes(b" mat")]).astype(np.int32))
    history = np.array(target.tokenize_bytes(b" the cat"), np.int32)
    tokens = drafter.propose(history, 10).tokens
    assert re.fullmatch(rb" sat on", b"".join(target.pieces[t] for t in tokens))
