"""Text lookup in replays (lsd_local.bench.replay, `vocab`): through the replay's dense ids it
proposes what it proposes through the real ones, and a replay drafts what it proposes, over
a byte-level fake vocabulary with a few merges (test_forced.ByteVocab)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_forced import ByteVocab

from lsd_local.bench import replay as rp
from lsd_local.drafters.crossvocab import TextCodec
from lsd_local.drafters.textlookup import TextLookup

WORDS = ["get", "_weather", " ", "now", ".", '{"', '":', "\n", "xy", "say", "é"]


def linear(n: int) -> float:
    return 0.010 + 0.005 * n


@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=40),
       split=st.integers(0, 40), k=st.integers(1, 8))
def test_text_lookup_through_dense_ids_proposes_the_same_tokens(words, split, k):
    vocab = ByteVocab()
    ids = vocab.tokenize("".join(words))
    split = min(split, len(ids))
    prompt, answer = ids[:split], ids[split:]
    real = np.unique(np.array(prompt + answer, np.int64))
    dense, _ = rp.dense_sequence(prompt, answer)
    found_real, size_real = TextLookup(TextCodec(vocab)).find(np.array(ids, np.int32), k)
    through = rp.DenseVocab(vocab, real)
    found_dense, size_dense = TextLookup(TextCodec(through)).find(dense, k)
    assert size_dense == size_real and len(found_dense) == len(found_real)
    for got, want in zip(found_dense.tolist(), found_real.tolist(), strict=True):
        held = np.flatnonzero(real == want)
        if len(held):  # a token the recording holds: its dense id
            assert got == held[0]
        else:  # one it lacks: an id no recorded token has, spelling the same bytes
            assert got >= len(real)
            assert through.token_bytes_special(got) == vocab.token_bytes(want)


def test_a_replay_drafts_what_text_lookup_finds():
    """In the prompt get_weather follows a space, in the answer '{"' (one token): no token
    6-gram matches there, the text does, and what followed it in the prompt is what the
    answer goes on with."""
    vocab = ByteVocab()
    prompt = vocab.tokenize("say get_weather now. and more words here\n")
    answer = vocab.tokenize('{"get_weather now. and more words here')
    without = rp.replay(prompt, answer, rp.FixedLookup(8), linear)
    with_text = rp.replay(prompt, answer, rp.FixedLookup(8), linear, vocab=vocab)
    assert with_text.rounds < without.rounds
    first = with_text.draft_lengths.index(next(n for n in with_text.draft_lengths if n))
    assert first < without.draft_lengths.index(next(n for n in without.draft_lengths if n))
    # (no drafter: nothing to give text lookup to, and nothing fails for it)
    assert rp.replay(prompt, answer, None, linear, vocab=vocab).rounds == len(answer)


class StopVocab(ByteVocab):
    """ByteVocab whose `stop` token ends a generation (None: none does)."""

    def __init__(self, stop_text: str | None) -> None:
        super().__init__()
        self.stop = None if stop_text is None else self.tokenize(stop_text)[0]

    def is_eog(self, token: int) -> bool:
        return token == self.stop


def test_a_replay_with_the_vocabulary_stops_drafts_at_every_end_token():
    """As in the engine, a lookup draft stops at an end-of-generation token met in the prompt
    (a chat template's end of turn), not only at the answer's own end."""
    plain, stopping = StopVocab(None), StopVocab("\n")
    prompt = plain.tokenize("say get_weather now. and\nmore words here and there")
    answer = plain.tokenize("get_weather now. and so on and on and on")
    runs = {name: rp.replay(prompt, answer, rp.FixedLookup(16), linear, vocab=vocab)
            for name, vocab in (("plain", plain), ("stopping", stopping))}
    assert max(runs["stopping"].draft_lengths) < max(runs["plain"].draft_lengths)
    assert sum(runs["stopping"].draft_lengths) < sum(runs["plain"].draft_lengths)
    through = rp.DenseVocab(stopping, np.unique(np.array(prompt + answer, np.int64)))
    assert [through.is_eog(d) for d in range(len(through.real) + 1)].count(True) == 1
