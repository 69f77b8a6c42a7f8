"""Text lookup (drafters/textlookup.py) over a byte-level fake vocabulary: the end of the
text is found where token n-grams differ, what followed is tokenized, cut mid-word, limited;
blanks alone never match; the held text follows the context."""

from __future__ import annotations

import numpy as np
from test_forced import ByteVocab, text_of

from lsd_local.config import (
    TEXT_LOOKUP_MAX_CHARS,
    TEXT_LOOKUP_MAX_TOKENS,
    TEXT_LOOKUP_MIN_ALNUM,
    TEXT_LOOKUP_MIN_CHARS,
)
from lsd_local.drafters.crossvocab import TextCodec
from lsd_local.drafters.lookup import LookupDrafter
from lsd_local.drafters.textlookup import TextLookup


def tokens(vocab, text):
    return np.asarray(vocab.tokenize(text), np.int32)


def test_the_same_text_as_other_tokens_is_found():
    vocab = ByteVocab()
    lookup = TextLookup(TextCodec(vocab))
    # in the prompt " get_weather" is "get" + "_weather" after a space; in the answer "\"get"
    history = tokens(vocab, 'call get_weather now.\n{"name": "get_w')
    found, size = lookup.find(history, 20)
    assert text_of(vocab, found) == "eather n"[:TEXT_LOOKUP_MAX_TOKENS] and size == 5
    # ('"get_w' is not there)


def test_what_follows_is_cut_mid_word_and_limited():
    vocab = ByteVocab()
    lookup = TextLookup(TextCodec(vocab))
    history = tokens(vocab, "maria.lopez@example.org writes rust. Mail maria")
    found, _ = lookup.find(history, 2)  # 2 tokens asked: 12 bytes read, the last token cut
    assert text_of(vocab, found) == ".l"
    found, _ = lookup.find(history, 100)
    assert len(found) == TEXT_LOOKUP_MAX_TOKENS
    assert text_of(vocab, found) == ".lopez@e"[:TEXT_LOOKUP_MAX_TOKENS]


def test_blanks_and_punctuation_alone_never_match():
    vocab = ByteVocab()
    lookup = TextLookup(TextCodec(vocab))
    assert len(lookup.find(tokens(vocab, 'a", "b  ", "'), 8)[0]) == 0
    assert len(lookup.find(tokens(vocab, "ab1. ab1."), 8)[0]) == 0  # 3 letters: too few
    assert len(lookup.find(tokens(vocab, "xyzw"), 8)[0]) == 0  # nothing before it


def test_the_held_text_follows_the_context():
    vocab = ByteVocab()
    lookup = TextLookup(TextCodec(vocab))
    n = min(4, TEXT_LOOKUP_MAX_TOKENS)  # (a byte a token)
    first = tokens(vocab, "alpha beta gamma. alpha")
    assert text_of(vocab, lookup.find(first, 4)[0]) == " bet"[:n]
    other = tokens(vocab, "delta epsilon. delta")  # another request: rebuilt
    assert text_of(vocab, lookup.find(other, 4)[0]) == " eps"[:n]
    grown = np.concatenate([other, tokens(vocab, " epsi")])
    assert text_of(vocab, lookup.find(grown, 4)[0]) == "lon."[:n]
    assert text_of(vocab, lookup.find(other, 4)[0]) == " eps"[:n]  # a rewind: rebuilt
    # another request with the same first and last tokens, the middle changed: rebuilt
    same_ends = tokens(vocab, "delta upsilon. delta")
    assert text_of(vocab, lookup.find(same_ends, 4)[0]) == " ups"[:n]


def test_lookup_tries_the_text_only_where_no_token_ngram_matches():
    vocab = ByteVocab()
    drafter = LookupDrafter(8, 2, text=TextLookup(TextCodec(vocab)))
    same_tokens = tokens(vocab, "one two three four. one two")
    assert drafter.propose(same_tokens, 4).source == ""  # a token match
    other_tokens = tokens(vocab, 'say get_weather.\n{"get_w')  # '{"' merged: no token match
    draft = drafter.propose(other_tokens, 4)
    assert draft.source == "text" and \
        text_of(vocab, draft.tokens) == "eath"[:TEXT_LOOKUP_MAX_TOKENS]
    assert LookupDrafter(8, 2).propose(other_tokens, 4).source == ""  # (without: nothing)


def scanning_match(text: bytes, min_chars: int, max_chars: int) -> tuple[int, int]:
    """What the lookup must find, by trying every size from the longest down."""
    end = len(text)
    for size in range(min(max_chars, end - 1), min_chars - 1, -1):
        tail = text[end - size:]
        if sum(c.isalnum() for c in tail.decode("utf-8", "ignore")) < TEXT_LOOKUP_MIN_ALNUM:
            return 0, -1
        at = text.rfind(tail, 0, end - 1)
        if at >= 0:
            return size, at
    return 0, -1


def test_the_binary_searches_find_what_scanning_every_size_finds():
    rng = np.random.default_rng(5)
    alphabet = list("ab c.é,\n") + ["ab", "abc ", "  "]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet, rng.integers(0, 60))).encode()
        lookup = TextLookup(TextCodec(ByteVocab()))
        lookup._text = bytearray(text)
        assert lookup._longest_match() == scanning_match(
            text, TEXT_LOOKUP_MIN_CHARS, TEXT_LOOKUP_MAX_CHARS), text
