"""Renames (drafters/rename.py): read where the answer takes up a copy of its prompt again,
spelled into later lookup proposals found in the prompt, left out of comments' prose and
other objects' attributes, dropped when the answer does not keep them; auto scores a
renamed proposal only up to the rename."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_controller import ScriptedLookup, plain_stepping
from test_forced import ByteVocab, text_of

from lsd_local.drafters.auto.policy import AutoDrafter
from lsd_local.drafters.base import Draft
from lsd_local.drafters.crossvocab import TextCodec
from lsd_local.drafters.lookup import LookupDrafter
from lsd_local.drafters.rename import KEEP_BYTES, _text_end, find_rename, rename_spans
from lsd_local.drafters.textlookup import TextLookup

PROMPT = ("Rename the function to `total_v2` (and any call to itself).\n```python\n"
          "def total(items):\n    if not items:\n        raise ValueError('total needs items')\n"
          "    return items[0] + total(items[1:])\n```\n")


def test_a_replaced_name_is_read_and_an_added_type_or_changed_expression_is_not():
    assert find_rename(b"\ndef pstdev", b"\ndef pstdev_v2", b"(d") == (b"pstdev", b"pstdev_v2")
    assert find_rename(b"    x = total", b"    x = subtotal", b";\n") == (b"total", b"subtotal")
    # the name going on into the copied stretch alike
    assert find_rename(b"def get_a", b"def get_b", b"_value(") == (b"get_a_value", b"get_b_value")
    assert find_rename(b"def f(s)", b"def f(s: str) -> bool", b":\n") is None  # a type hint
    assert find_rename(b"a = b + c", b"a = b * d", b"\n") is None  # not the same before
    assert find_rename(b"def f(s", b"def f(s", b")") is None  # the same name
    assert find_rename(b"  x = 1", b"  x = 2", b"\n") is None  # numbers are no names
    assert find_rename(b"ab", b"ac", b"(") is None  # nothing before the name to compare
    assert find_rename(b"    return True", b"    return False", b"\n") is None  # keywords
    assert find_rename(b"def get_a", b"def get_b", b"_value") is None  # may go on


def test_old_names_are_spelled_new_as_whole_words_only():
    renames = {b"pstdev": b"pstdev_v2"}
    text = b" pstdev(x) + pstdevs + my_pstdev + (pstdev)\n"
    spans = rename_spans(b"y =", text, renames)
    assert [text[a:b] for a, b, _ in spans] == [b"pstdev", b"pstdev"]
    assert all(new == b"pstdev_v2" for _, _, new in spans)
    # a name at the proposal's very end may go on (pstdevs): left
    assert rename_spans(b"y =", b" 1 + pstdev", renames) == []


def test_a_name_begun_or_written_before_the_proposal_is_finished_new():
    renames = {b"pstdev": b"pstdev_v2"}
    # written whole: the proposal goes on with another character
    assert rename_spans(b"Error('pstdev", b" requires", renames) == [(0, 0, b"_v2")]
    assert rename_spans(b"Error('pst", b"dev requires", renames) == [(0, 3, b"dev_v2")]
    # what was written of it is not the new name's start: left
    assert rename_spans(b"x = (fo", b"o)", {b"foo": b"bar"}) == []


def test_prose_and_other_objects_attributes_keep_the_old_name():
    renames = {b"translation": b"translation_v2", b"untokenize": b"untokenize_v2"}
    assert rename_spans(b"x", b" = 'No translation file found'\n", renames) == []
    assert rename_spans(b"x", b" = ut.untokenize(it)\n", renames) == []
    spans = rename_spans(b"x", b" = self.untokenize(translation(it))\n", renames)
    assert [new for *_, new in spans] == [b"untokenize_v2", b"translation_v2"]


def lookup_over(vocab) -> LookupDrafter:
    lookup = LookupDrafter(text=TextLookup(TextCodec(vocab)))
    lookup.begin(None, len(vocab.tokenize(PROMPT)))
    return lookup


def propose(lookup, vocab, answer: str, k: int = 128) -> str:
    history = np.asarray(vocab.tokenize(PROMPT + answer), np.int32)
    return text_of(vocab, lookup.propose(history, k).tokens)


def test_a_rename_in_the_def_line_is_carried_into_the_copy():
    vocab = ByteVocab()
    lookup = lookup_over(vocab)
    answer = "```python\ndef total_v2(items):\n    if not"
    proposal = propose(lookup, vocab, answer)
    assert lookup.renames.renames == {b"total": b"total_v2"}
    # the message and the recursive call spelled new (cut at the tokens asked)
    assert proposal.startswith(" items:\n        raise ValueError('total_v2 needs items')\n"
                               "    return items[0] + total_v2(items[1:])")
    # without the rename read, the prompt's spelling
    plain = LookupDrafter()
    plain.begin(None, len(vocab.tokenize(PROMPT)))
    assert "'total needs" in propose(plain, vocab, answer)


def test_a_proposal_away_from_every_old_name_is_left_unread_and_unchanged():
    """apply's shortcut (a proposal found in the prompt that touches no place of an old
    name is returned as it is) changes nothing: against apply reading every proposal, at
    every position of the prompt and several lengths."""
    vocab = MergingVocab()
    codec = TextCodec(vocab)
    lookup = lookup_over(vocab)
    answer = "```python\ndef total_v2(items):\n    if not"
    history = np.asarray(vocab.tokenize(PROMPT + answer), np.int32)
    lookup.propose(history, 16)
    n_prompt = lookup.n_prompt
    assert lookup.renames.renames == {b"total": b"total_v2"}
    shortcuts = changed = 0
    for origin in range(n_prompt):
        for size in (1, 3, 9):
            tokens = history[origin:origin + size]
            before = history[:origin]  # (the answer wrote the prompt's text up to there)
            fast = lookup.renames.apply(before, tokens, codec, origin, n_prompt)
            read = lookup.renames.apply(before, tokens, codec)
            assert np.array_equal(fast[0], read[0]) and fast[1] == read[1], (origin, size)
            shortcuts += not lookup.renames._near_a_place(history, origin, size, n_prompt,
                                                          codec)
            changed += read[1] >= 0
    assert shortcuts > n_prompt and changed > 6  # (most take the shortcut; not all)


def test_a_rename_the_answer_does_not_keep_is_dropped_and_a_new_answer_starts_empty():
    vocab = ByteVocab()
    lookup = lookup_over(vocab)
    answer = "```python\ndef total_v2(items):\n    if not"
    propose(lookup, vocab, answer)
    kept_old = answer + " items:\n        raise ValueError('total needs items')\n    return"
    assert "total(items[1:])" in propose(lookup, vocab, kept_old)
    assert lookup.renames.renames == {}
    propose(lookup, vocab, answer)
    lookup.begin(None, len(vocab.tokenize(PROMPT)))
    assert lookup.renames.renames == {}


def test_the_old_name_kept_in_prose_or_before_the_rename_does_not_drop_it():
    vocab = ByteVocab()
    lookup = lookup_over(vocab)
    answer = "Here is total as total_v2:\n```python\ndef total_v2(items):\n    if not"
    assert "'total_v2 needs" in propose(lookup, vocab, answer)
    prose = answer + " items:\n        raise ValueError('No total needs items')\n    return"
    assert "total_v2(items[1:])" in propose(lookup, vocab, prose)
    assert lookup.renames.renames == {b"total": b"total_v2"}


def test_the_old_name_written_just_before_the_rename_was_read_does_not_drop_it():
    vocab = ByteVocab()
    prompt = "v = g(xyzabc) + g(1)\n"
    lookup = LookupDrafter(text=TextLookup(TextCodec(vocab)))
    lookup.begin(None, len(vocab.tokenize(prompt)))
    answer = "g; v = g2(xyzabc"  # `g` itself, then the copy with the name changed
    lookup.propose(np.asarray(vocab.tokenize(prompt + answer), np.int32), 16)
    assert lookup.renames.renames == {b"g": b"g2"}
    later = lookup.propose(np.asarray(vocab.tokenize(prompt + answer + ")"), np.int32), 16)
    assert text_of(vocab, later.tokens).startswith(" + g2(1)")


def test_a_name_the_code_already_has_is_an_edit_not_a_rename():
    vocab = ByteVocab()
    lookup = lookup_over(vocab)
    # `items` replaced by `total` (a name in the code) in the first line: not learned
    propose(lookup, vocab, "```python\ndef total(total):\n    if not")
    assert lookup.renames.renames == {}


class MergingVocab(ByteVocab):
    """ByteVocab with pieces that straddle a name's ends and its inside."""

    MERGES = {**ByteVocab.MERGES, b" foo(": 310, b"o_": 311, b").": 312, b"'fo": 313,
              b"oo b": 314, b"_v": 315}


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["foo", "foo_bar", " ", "(", ")", ".", "'", "x", "\n",
                                 "self.", "bar", "oo", "f", "_v2", "b"]), max_size=30),
       st.integers(0, 12), st.booleans())
def test_the_spelled_proposal_is_the_renamed_text(parts, cut, merging):
    """What apply proposes spells the proposal's text with each whole-word old name that
    rename_spans finds replaced (a reference substitution over the text), cut at the tokens
    asked; the first renamed token's index marks where it departs from the prompt's."""
    vocab = MergingVocab() if merging else ByteVocab()
    codec = TextCodec(vocab)
    text = "".join(parts)
    tail, body = text[:cut], text[cut:]
    renames = {b"foo": b"foo_v2"}
    lookup = lookup_over(vocab)
    lookup.renames.renames = dict(renames)
    history = np.asarray(vocab.tokenize(tail or "x"), np.int32)
    tokens = np.asarray(vocab.tokenize(body), np.int32)
    tail_text = _text_end(history, KEEP_BYTES, codec)
    out, renamed_at = lookup.renames.apply(history, tokens, codec)
    expected = bytearray(body.encode())
    for start, end, new in reversed(rename_spans(tail_text, body.encode(), renames)):
        expected[start:end] = new
    spelled = codec.text(out)
    assert len(out) <= len(tokens) and bytes(expected).startswith(spelled)
    assert len(out) == len(tokens) or spelled == bytes(expected)
    if renamed_at < 0:  # the prompt's tokens, maybe fewer
        assert list(out) == list(tokens[:len(out)])
    else:  # the prompt's tokens up to renamed_at, another there
        assert list(out[:renamed_at]) == list(tokens[:renamed_at])
        assert out[renamed_at] != tokens[renamed_at]
    # the reference's rule: no whole-word old name left that it would have replaced
    left = rename_spans(tail_text, spelled, renames)
    assert all(end == len(spelled) for _, end, _ in left) or not left


class RenamedLookup(ScriptedLookup):
    def __init__(self, proposals, renamed_at):
        super().__init__(proposals)
        self.renamed_at = renamed_at

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        draft = super().propose(history, k, sampler, rng, grammar)
        return Draft(draft.tokens, run=draft.run, renamed_at=self.renamed_at)


def scored_after_a_miss_at(renamed_at: int):
    truth = list(range(100, 140))
    proposal = truth[5:8] + [7] + truth[9:20]  # right for 3 tokens, then wrong
    drafter = plain_stepping(AutoDrafter(RenamedLookup([(proposal, 12)], renamed_at)))
    for n in range(5, 12):
        drafter.propose(np.array(truth[:n], np.int32), 32)
        drafter.accept(0, 0, 0.04)
    tried = sum(model.tried.sum() for model in drafter.runs.values())
    accepted = sum(model.accepted.sum() for model in drafter.runs.values())
    return tried, accepted


def test_a_renamed_proposal_is_scored_up_to_its_rename():
    """A rename the answer does not keep is dropped at once: its miss must not teach auto
    that copies break; the tokens before it still count."""
    tried, accepted = scored_after_a_miss_at(3)
    assert tried == accepted and accepted > 2.9
    tried, accepted = scored_after_a_miss_at(-1)  # the prompt's own tokens: a miss
    assert tried > accepted > 2.9
