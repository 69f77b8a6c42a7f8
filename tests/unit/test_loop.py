"""The round loop against a fake target that serves scripted logits (no llama.cpp)."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import EOS, FakeTarget, ScriptedDrafter, fake_generation

from lsd_local.config import RuleConfig
from lsd_local.loop import LoopSettings, RoundState
from lsd_local.stats import Origin
from lsd_local.text import TextAssembler
from lsd_local.verify.verifier import Verifier


def run(target, drafter, prompt, k=4, max_tokens=40, rule="strict", stop=()):
    text = TextAssembler(lambda t: bytes([65 + t]), stop)
    req = LoopSettings(max_tokens, k, None)
    gen = fake_generation(target, drafter, prompt, req, Verifier(RuleConfig(rule=rule), None),
                          text)
    events = []
    for event in gen:
        assert target.n_cached == len(prompt) + len(gen.tokens) - 1, \
            "cache must hold all but the pending token"
        events.append(event)
    return events, gen.tokens, text


def test_perfect_drafts_commit_k_plus_one_per_round():
    target = FakeTarget()
    events, out, _ = run(target, ScriptedDrafter(target), [3, 5], k=4, max_tokens=20)
    assert out == target.greedy([3, 5], 20)
    assert [len(e.tokens) for e in events] == [5, 5, 5, 5]
    assert all(e.origins == (Origin.DRAFT_EXACT,) * 4 + (Origin.TARGET,) for e in events)
    assert target.decode_calls[1:] == [5, 5, 5, 5]


def test_corrupted_drafts_still_give_greedy_output():
    target = FakeTarget()
    events, out, _ = run(target, ScriptedDrafter(target, corrupt_every=2), [3, 5], k=4,
                         max_tokens=30)
    assert out == target.greedy([3, 5], 30)
    assert any(e.n_accepted == 1 for e in events)  # the corrupted rounds kept one token
    assert events[-1].finish_reason == "length"


def test_no_drafter_is_plain_greedy_decoding():
    target = FakeTarget()
    events, out, _ = run(target, None, [7, 1], max_tokens=12)
    assert out == target.greedy([7, 1], 12)
    assert len(events) == 12 and all(e.n_drafted == 0 for e in events)


def test_max_tokens_is_exact():
    target = FakeTarget()
    for max_tokens in (1, 2, 5, 9):
        _, out, _ = run(FakeTarget(), ScriptedDrafter(target), [3, 5], k=4,
                        max_tokens=max_tokens)
        assert len(out) == max_tokens


def test_eos_inside_an_accepted_draft_stops_there():
    probe = FakeTarget()
    seq = probe.greedy([3, 5], 10)
    target = FakeTarget(eos_after=(seq[3], seq[4]))
    events, out, _ = run(target, ScriptedDrafter(target), [3, 5], k=8, max_tokens=40)
    assert out == seq[:5] + [EOS]
    assert events[-1].finish_reason == "stop"
    assert target.n_cached == 2 + len(out) - 1


@pytest.mark.parametrize("at", [6, 5, 9])
def test_a_stop_string_inside_an_accepted_draft_stops_there(at):
    """A stop string completed by a draft token (k=4: the 7th token is the second round's
    second): the tokens after it are no part of the answer, nor of the cache (a chat
    turn's end, Ling 3's <|role_end|>, drafted on into an invented next turn was kept)."""
    target = FakeTarget()
    seq = target.greedy([3, 5], 30)
    stop = chr(65 + seq[at])
    first = seq.index(seq[at])
    events, out, text = run(target, ScriptedDrafter(target), [3, 5], k=4, max_tokens=30,
                            stop=[stop])
    assert events[-1].finish_reason == "stop"
    assert out == seq[:first + 1] and target.n_cached == 2 + len(out) - 1
    assert sum(len(e.tokens) for e in events) == len(out)
    assert text.released_text == "".join(chr(65 + t) for t in seq[:first])


def test_context_end_stops_with_length_and_output_intact():
    target = FakeTarget(n_ctx=20)
    events, out, _ = run(target, ScriptedDrafter(target), [3, 5], k=8, max_tokens=100)
    assert events[-1].finish_reason == "length"
    assert len(out) == 18 and out == FakeTarget().greedy([3, 5], 18)


def test_stop_string_cuts_text():
    target = FakeTarget()
    seq = target.greedy([3, 5], 30)
    stop = "".join(chr(65 + t) for t in seq[6:8])
    first = "".join(chr(65 + t) for t in seq).find(stop)
    events, _, text = run(target, ScriptedDrafter(target), [3, 5], k=4, max_tokens=30,
                          stop=[stop])
    assert events[-1].finish_reason == "stop"
    assert text.released_text == "".join(chr(65 + t) for t in seq)[:first]
    assert "".join(e.text for e in events) == text.released_text


@pytest.mark.parametrize("rule", ["fly", "asd"])
def test_loose_rules_commit_teacher_forced_tokens(rule):
    """After a loose acceptance the next token is the target's greedy choice for the
    realized prefix: check every committed TARGET token against the fake target."""
    target = FakeTarget()
    events, out, _ = run(target, ScriptedDrafter(target, corrupt_every=1), [3, 5], k=6,
                         max_tokens=40, rule=rule)
    seq = [3, 5] + out
    origins = [o for e in events for o in e.origins]
    assert len(origins) == len(out) == 40
    for i, origin in enumerate(origins):
        if origin is Origin.TARGET:
            prefix = seq[:2 + i]
            assert seq[2 + i] == int(np.argmax(target.next_logits(prefix)))


def test_a_failing_drafter_end_still_ends_the_request():
    """Whatever fails as a request ends, the engine is given back and the kernel warm-up
    learns that no request runs any more (else it would never compile)."""
    from lsd_local.generation import EngineParts, Generation
    from lsd_local.kernels.warmup import process_warmup

    class Failing(ScriptedDrafter):
        def end(self, history, n_prompt=None):
            raise RuntimeError("end failed")

    target = FakeTarget()
    released = []
    parts = EngineParts(target, None, Failing(target), None, lambda: None, released.append)
    gen = Generation(parts, [3, 5], LoopSettings(6, 4, None),
                     RoundState(np.random.default_rng(0)),
                     Verifier(RuleConfig(), None), TextAssembler(lambda t: b"x"))
    before = process_warmup()._in_flight
    with pytest.raises(RuntimeError, match="end failed"):
        gen.run()
    assert released == [gen] and gen.finished and process_warmup()._in_flight == before
