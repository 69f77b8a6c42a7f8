"""Which run model prices a lookup proposal (drafters/auto/context.py): code or prose by the
answer's fenced blocks, a match in the answer itself apart from one in the prompt; and what
the split does to the auto drafter's choice (no llama.cpp: a byte vocabulary, scripted
proposals)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_controller import plain_stepping

from lsd_local.drafters.auto.context import RESUME_SPAN, AnswerContext
from lsd_local.drafters.auto.policy import AutoDrafter
from lsd_local.drafters.base import Draft, Drafter

PIECES = [b"```", b"``", b"`", b"python\n", b"x = 1\n", b"Some prose. ", b"````", b"a`"]


def byte_text(token: int) -> bytes:
    return PIECES[token]


def encode(pieces: list[bytes]) -> np.ndarray:
    return np.array([PIECES.index(p) for p in pieces], np.int32)


def fences_in(text: bytes) -> int:
    """The definition: fences of three backticks read left to right (str.count)."""
    return text.count(b"```")


def test_a_fence_split_over_tokens_opens_and_closes_a_block():
    context = AnswerContext(byte_text)
    prompt = encode([b"Some prose. ", b"```", b"x = 1\n", b"```"])  # a closed block
    context.begin()
    context.observe(prompt)
    assert context.start == len(prompt) and not context.in_code  # its block was closed
    answer = [b"``", b"`", b"python\n", b"x = 1\n"]  # "```python": opened over two tokens
    history = np.concatenate([prompt, encode(answer)])
    context.observe(history)
    assert context.in_code
    history = np.concatenate([history, encode([b"`", b"``", b"Some prose. "])])  # closed
    context.observe(history)
    assert not context.in_code


def test_four_backticks_are_one_fence_and_the_tail_is_not_read_twice():
    context = AnswerContext(byte_text)
    context.begin()
    context.observe(np.zeros(0, np.int32))
    context.observe(encode([b"````", b"``"]))  # "``````": a fence, then "```" -> two
    assert not context.in_code
    context = AnswerContext(byte_text)
    context.begin()
    context.observe(np.zeros(0, np.int32))
    context.observe(encode([b"```", b"`"]))  # "````": one fence, the last "`" left over
    assert context.in_code


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(PIECES) - 1), max_size=40), st.data())
def test_fences_read_token_by_token_equal_the_whole_text(tokens, data):
    """However the answer arrives (in rounds of any size), the block state is the parity of
    the fences in its whole text."""
    context = AnswerContext(byte_text)
    context.begin()
    context.observe(np.zeros(0, np.int32))
    history = np.array(tokens, np.int32)
    at = 0
    while at < len(history):
        at += data.draw(st.integers(1, 5))
        context.observe(history[:at])
    text = b"".join(PIECES[t] for t in tokens)
    assert context.in_code == (fences_in(text) % 2 == 1)


def test_tokens_read_but_not_kept_are_read_again():
    """A grammar's forced tokens proposed after the committed ones may not be kept: a
    shorter history, or one as long whose last token is the target's correction, is read
    again."""
    context = AnswerContext(byte_text)
    context.begin()
    context.observe(encode([b"Some prose. "]))
    context.observe(encode([b"Some prose. ", b"```", b"x = 1\n"]))
    assert context.in_code
    context.observe(encode([b"Some prose. ", b"x = 1\n"]))
    assert not context.in_code
    context.observe(encode([b"Some prose. ", b"x = 1\n", b"```"]))
    assert context.in_code
    context.observe(encode([b"Some prose. ", b"x = 1\n", b"a`"]))  # "```" not kept
    assert not context.in_code


def test_a_prompt_that_leaves_a_block_open_is_code():
    """A raw completion's prompt may open a block the answer continues."""
    context = AnswerContext(byte_text)
    prompt = encode([b"Some prose. ", b"```", b"python\n"])
    context.begin(len(prompt))
    context.observe(prompt)
    assert context.in_code and context.model_for("", 1) == "first"  # a copy in code


def test_which_model_prices_a_proposal():
    context = AnswerContext(byte_text)
    prompt = encode([b"Some prose. "] * 5)
    context.begin(len(prompt))
    assert context.model_for("", 2) == "prose"  # found in the prompt, outside a block
    assert context.model_for("", 5) == "self"  # found in the answer being written
    assert context.model_for("text", -1) == "prose"
    assert context.model_for("suffix", 3) == "suffix"  # past requests: their own model
    context.observe(np.concatenate([prompt, encode([b"```", b"python\n"])]))
    assert context.model_for("", 2) == "first" and context.model_for("", 6) == "self"
    late = AnswerContext(byte_text)  # first asked three tokens into the answer: the start
    late.begin(len(prompt))  # is the prompt's end all the same, the fence before is read
    late.observe(np.concatenate([prompt, encode([b"```", b"python\n", b"x = 1\n"])]))
    assert late.in_code and late.model_for("", 6) == "self"
    unknown = AnswerContext(None)  # no vocabulary: every proposal priced as code was
    unknown.begin()
    unknown.observe(prompt)
    assert unknown.in_code and unknown.model_for("", 2) == "first"


class SourcedLookup(Drafter):
    """Proposes `tokens` (what the answer will hold) with a given run and origin."""

    def __init__(self, run: int, origin: int) -> None:
        self.run, self.origin = run, origin

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        return Draft(np.arange(k, dtype=np.int32) % len(PIECES), run=self.run,
                     origin=self.origin)


def steep_cpu(drafter: AutoDrafter) -> None:
    """A 2-core CPU's t(n) (as multiples of a 33 ms step, measured on this project's VMs):
    a block of 32 costs 14.4 steps, of 64 24.5."""
    for n, steps in ((1, 1.0), (2, 1.81), (4, 3.11), (8, 6.99), (16, 8.54), (32, 14.38),
                     (48, 20.39), (64, 24.49)):
        drafter.cost.observe(n, 0.033 * steps, context=64)


@pytest.mark.parametrize("prompt_piece", [b"```", b"Some prose. "])
def test_a_fresh_drafter_trusts_a_copy_in_code_and_not_a_phrase_in_prose(prompt_piece):
    """Nothing learned yet, a 12-token match found in the prompt: inside a code block it is
    a copy (drafted long), in prose a quoted phrase (summaries paraphrase it within a few
    tokens), which a steep CPU curve does not let auto bet a long block on."""
    drafter = AutoDrafter(SourcedLookup(run=12, origin=1), token_bytes=byte_text)
    steep_cpu(drafter)
    prompt = encode([b"Some prose. "] * 20)
    drafter.begin(n_prompt=len(prompt))
    answer = encode([b"```", b"python\n", b"x = 1\n"] if prompt_piece == b"```"
                    else [b"Some prose. "] * 3)
    draft = drafter.propose(np.concatenate([prompt, answer]), 63)
    if prompt_piece == b"```":
        assert len(draft) >= 31
    else:
        assert len(draft) <= 3


def test_a_match_in_the_answer_is_learned_apart_from_the_prompts():
    """Shadow scoring (free) puts a proposal's outcome into the model that priced it: a
    match in the answer being written teaches "self", not what prompt copies are priced by."""
    truth = np.array([5] * 10 + [4, 3, 4, 3, 4, 3, 4, 3], np.int32)  # the answer: 4 3 4 3 ...
    drafter = plain_stepping(AutoDrafter(SourcedLookup(run=6, origin=12), token_bytes=byte_text))
    drafter.begin(n_prompt=10)
    for n in range(10, 16):
        drafter.propose(truth[:n], 8)
        drafter.accept(0, 0, 0.04)
    assert drafter.runs["self"].request_tried.sum() > 0
    assert drafter.runs["lookup"].request_tried.sum() == 0
    assert drafter.runs["prose"].request_tried.sum() == 0


class ScriptedSourced(Drafter):
    """Returns scripted (tokens, run, origin) proposals in order, then nothing."""

    def __init__(self, proposals) -> None:
        self.proposals = list(proposals)

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        if not self.proposals:
            return Draft(np.zeros(0, np.int32))
        tokens, run, origin = self.proposals.pop(0)
        return Draft(np.array(tokens[:k], np.int32), run=run, origin=origin)


def test_a_copy_ends_a_pending_short_match_of_another_model():
    """A short match in the answer (priced by "self") pending when a copy in the prompt is
    found: as within one model, the short one ends there, so that no committed token is
    scored twice (once into each model)."""
    truth = list(range(100, 140))
    prompt = 10
    short_self = (truth[prompt + 1:prompt + 30], 6, prompt + 1)  # right all along
    copy_wrong = ([7, 7, 7], 12, 2)  # found in the prompt, wrong at once
    drafter = plain_stepping(AutoDrafter(ScriptedSourced([short_self, copy_wrong])))
    drafter.begin(n_prompt=prompt)
    for n in range(prompt + 1, prompt + 6):
        drafter.propose(np.array(truth[:n], np.int32), 32)
        drafter.accept(0, 0, 0.04)
    assert drafter.runs["self"].request_tried.sum() == pytest.approx(1.0)  # its first token
    assert drafter.runs["self"].request_accepted.sum() == pytest.approx(1.0)
    assert drafter.runs["first"].request_tried.sum() == pytest.approx(1.0)  # the copy's miss
    assert drafter.runs["first"].request_accepted.sum() == 0


def test_lookup_evidence_saved_with_the_old_run_buckets_is_ignored():
    """learned.json files written before the buckets ended at 48 hold 12 of them per level:
    such a level is not the run models' and is left out (what was learned is relearned);
    the new models restore what they saved themselves."""
    old = {"accepted": [1.0] * 12, "tried": [2.0] * 12,
           "families": {"f": {"accepted": [1.0] * 12, "tried": [2.0] * 12}}}
    drafter = AutoDrafter(SourcedLookup(run=6, origin=1))
    drafter.restore(None, {"lookup": old, "prose": old, "suffix": old})
    for model in drafter.runs.values():
        assert model.tried.sum() == 0 and not model.families
    saved = AutoDrafter(SourcedLookup(run=6, origin=1))
    saved.runs["prose"].update(12, 8, 5)
    fresh = AutoDrafter(SourcedLookup(run=6, origin=1))
    fresh.restore(None, saved.learned_acceptance())
    assert fresh.runs["prose"].tried.sum() == pytest.approx(saved.runs["prose"].tried.sum())
    assert fresh.runs["lookup"].tried.sum() == 0


def test_a_match_behind_or_far_past_the_copy_being_read_is_a_jump():
    """In code, once a copy of the prompt is being read, a match a little past it resumes
    it (an edit deleted or replaced what lies between) and one behind it or far past it is
    a jump (new code matching a phrase elsewhere in the file)."""
    context = AnswerContext(None, long_match=12)
    context.begin(2000)
    context.observe(np.arange(2000, dtype=np.int32))
    assert context.model_for("", 40) == "first"  # no copy read yet: priced as a copy
    context.follow(500, 6)  # a short match is no copy being read
    assert context.copy_at is None
    context.observe(np.append(np.arange(2000, dtype=np.int32), 7))  # not token 500: left
    assert context.left_first_copy
    context.follow(500, 12)
    assert context.copy_at == 500
    assert context.model_for("", 500) == "lookup"  # the copy itself, going on
    assert context.model_for("", 500 + RESUME_SPAN) == "lookup"  # resumed past an edit
    assert context.model_for("", 499) == "jump"  # behind it
    assert context.model_for("", 501 + RESUME_SPAN) == "jump"  # far past it
    assert context.model_for("", 2100) == "self"  # the answer's own text: not a jump
    assert context.model_for("text", -1) == "lookup"  # no position: not told apart
    context.follow(2100, 40)  # a copy of the answer itself is not the prompt's copy
    assert context.copy_at == 500
    context.begin(2000)  # a new answer reads no copy yet, and has left none
    assert context.copy_at is None and context.model_for("", 10) == "first"


def test_a_jump_outside_a_code_block_is_prose():
    context = AnswerContext(byte_text, long_match=12)
    prompt = encode([b"Some prose. "] * 5)
    context.begin(len(prompt))
    context.observe(prompt)
    context.follow(3, 20)
    assert context.model_for("", 0) == "prose"


def test_resumed_copies_do_not_make_short_jumps_look_safe():
    """An edited file resumes its copy after each edit with a short match that holds; a
    short match elsewhere in the file (new code) mostly fails. Learned apart, a drafter that
    saw many resumptions hold still drafts a jump short on a steep CPU, a resumption long."""
    def drafter_after(origin: int) -> Draft:
        drafter = AutoDrafter(ScriptedSourced([(list(range(63)), 30, 400),
                                               (list(range(63)), 6, origin)]))
        steep_cpu(drafter)
        drafter.begin(n_prompt=1000)
        for _ in range(40):  # resumptions after edits: short runs that held
            drafter.runs["lookup"].update(6, 40, 40)
        for _ in range(40):  # short matches into other functions: broken at once
            drafter.runs["jump"].update(6, 8, 0)
        history = np.arange(1100, dtype=np.int32) % 7
        drafter.propose(history, 63)  # the copy being read: at 400
        edited = np.append(history, (history[400] + 1) % 7)  # an edit: the copy is left
        return drafter.propose(edited, 63)

    assert len(drafter_after(origin=460)) >= 31  # a resumption a little past the copy
    assert len(drafter_after(origin=100)) <= 3  # a jump behind it


def left_first_copy_reference(history: np.ndarray, start: int, at: int, origin: int) -> bool:
    """The definition, token by token: the answer from `at` on is not the prompt from
    `origin` on (a token differs, or the copy runs into the answer's start)."""
    for j in range(at, len(history)):
        source = origin + j - at
        if source >= start or history[j] != history[source]:
            return True
    return False


def test_the_first_copy_is_priced_apart_until_the_answer_leaves_it():
    """An edited file's answer copies its prompt until the first edit: proposals until then
    are "first", after it "lookup"; a new answer starts over."""
    prompt = np.arange(100, dtype=np.int32)
    context = AnswerContext(None, long_match=12)
    context.begin(len(prompt))
    context.observe(prompt)
    assert context.model_for("", 50) == "first"
    context.follow(50, 6)  # the answer's first proposal found in the prompt: its copy
    copied = np.concatenate([prompt, prompt[50:60]])
    context.observe(copied)  # ten tokens of the copy written
    assert not context.left_first_copy and context.model_for("", 60) == "first"
    assert context.model_for("text", -1) == "first"  # text lookup's too
    context.follow(20, 12)  # a later match elsewhere is not the first copy
    edited = np.append(copied, 999)  # a token the copy does not have: an edit
    context.observe(edited)
    assert context.left_first_copy
    assert context.model_for("", 61) == "lookup"  # a resumed copy
    context.observe(np.append(edited, prompt[61]))  # written on: the copy stays left
    assert context.model_for("", 62) == "lookup"
    context.begin(len(prompt))
    context.observe(prompt)
    assert not context.left_first_copy and context.model_for("", 61) == "first"


def test_a_first_copy_that_runs_into_the_answer_has_ended():
    prompt = np.arange(20, dtype=np.int32)
    context = AnswerContext(None)
    context.begin(len(prompt))
    context.observe(prompt)
    context.follow(18, 6)  # two tokens of the prompt are left to copy
    context.observe(np.concatenate([prompt, [18, 19]]))
    assert not context.left_first_copy
    context.observe(np.concatenate([prompt, [18, 19, 0]]))
    assert context.left_first_copy


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 30), st.data())
def test_leaving_the_first_copy_read_in_rounds_equals_its_definition(start, data):
    """However the answer arrives (rounds of any size, a history cut back and rewritten as
    a grammar's unkept tokens leave it), whether it has left its first copy is decided by
    the whole answer: the reference above, while no cut rewrote what decided it."""
    origin = data.draw(st.integers(0, start - 1))
    alphabet = st.integers(0, 2)  # few ids: copies that hold for a while
    history = np.array(data.draw(st.lists(alphabet, min_size=start, max_size=start)), np.int32)
    context = AnswerContext(None)
    context.begin(start)
    context.observe(history)
    context.follow(origin, 6)
    was_left = False
    for _ in range(data.draw(st.integers(1, 8))):
        cut = data.draw(st.integers(start, len(history)))
        grown = data.draw(st.lists(alphabet, max_size=6))
        history = np.concatenate([history[:cut], np.array(grown, np.int32)])
        context.observe(history)
        now = left_first_copy_reference(history, start, start, origin)
        # once left, it stays left (a pricing hint: an unkept token may have decided it)
        assert context.left_first_copy == (was_left or now)
        was_left = context.left_first_copy


def test_resumed_copies_that_held_do_not_make_the_first_copy_long():
    """A process that served edits learned that resumed copies hold (a block of 16 kept at
    run 9) and that the first copy breaks early (in its def line); a first copy at run 9
    is drafted short on a steep CPU, a resumed one at the same run long."""
    def draft_at_run_9(left: bool) -> Draft:
        drafter = AutoDrafter(ScriptedSourced([(list(range(63)), 9, 400)]))
        steep_cpu(drafter)
        for _ in range(40):
            drafter.runs["lookup"].update(9, 16, 16)
            drafter.runs["first"].update(9, 16, 1)
        drafter.begin(n_prompt=1000)
        history = np.arange(1000, dtype=np.int32) % 7
        if left:  # the answer's first copy (at 0) left after a token: an edit written
            drafter.context.observe(history)
            drafter.context.follow(0, 6)
            history = np.append(history, (history[0] + 1) % 7)
        return drafter.propose(history, 63)

    assert len(draft_at_run_9(left=False)) <= 3
    assert len(draft_at_run_9(left=True)) >= 15


def test_a_phrase_quoted_in_prose_before_the_code_is_no_first_copy():
    """An answer that says a few words before its code block: a match found there in the
    prompt is priced as prose and is not the first copy, which the code's own copy is."""
    prompt = encode([b"Some prose. ", b"x = 1\n", b"Some prose. "])
    context = AnswerContext(byte_text)
    context.begin(len(prompt))
    history = np.concatenate([prompt, encode([b"Some prose. "])])
    context.observe(history)
    assert context.model_for("", 1) == "prose"
    context.follow(1, 6)  # quoted, then left at once: no first copy
    history = np.concatenate([history, encode([b"```", b"python\n", b"x = 1\n"])])
    context.observe(history)
    assert not context.left_first_copy and context.model_for("", 1) == "first"
    context.follow(2, 6)  # the code's copy of "x = 1\n" goes on: the first copy
    context.observe(np.concatenate([history, encode([b"Some prose. "])]))  # as the prompt
    assert not context.left_first_copy
    context.observe(np.concatenate([history, encode([b"a`"])]))  # an edit
    assert context.left_first_copy and context.model_for("", 1) == "lookup"
