"""Generations side by side on real llama.cpp (tiny generated models): one context with
several sequences, one decode per step for every active generation's block. Each answer
must equal the same request run alone."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from tinymodels import load_tiny

from lsd_local import EngineBusyError
from lsd_local.backend import LoadOptions, Model
from lsd_local.backend.slot import DecodeRefused, decode_blocks
from lsd_local.request import Request

PROMPTS = ["the cat is", "def f(x): return", "a b a b a b", "in the end it is"]
LENGTHS = [70, 9, 40, 25]  # a long answer beside short ones


def alone(plain, prompt, max_tokens: int, **options) -> list[int]:
    return plain.generate(prompt, max_tokens=max_tokens, **options).run().tokens


def interleaved(gens: list) -> None:
    """Read the generations' rounds one at a time each, in turn, until all have ended."""
    rounds = [iter(gen) for gen in gens]
    while rounds:
        for it in list(rounds):
            if next(it, None) is None:
                rounds.remove(it)


@pytest.mark.parametrize("drafter", ["lookup", "model", "none"])
def test_side_by_side_strict_answers_equal_each_alone(tiny_pair, plain, drafter):
    with load_tiny(tiny_pair, drafter, k=4, parallel=4) as eng:
        assert eng.parallel == 4
        gens = [eng.generate(p, max_tokens=n) for p, n in zip(PROMPTS, LENGTHS, strict=True)]
        interleaved(gens)
        for gen, prompt, n in zip(gens, PROMPTS, LENGTHS, strict=True):
            assert gen.finished and gen.tokens == alone(plain, prompt, n), prompt
        if drafter != "none":
            assert sum(g.stats.accepted_exact for g in gens) > 0


def test_threads_each_iterating_their_own_generation(tiny_pair, plain):
    with load_tiny(tiny_pair, "lookup", k=4, parallel=4) as eng:
        results: dict[int, list[int]] = {}
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                results[i] = eng.generate(PROMPTS[i], max_tokens=LENGTHS[i]).run().tokens
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        for i, prompt in enumerate(PROMPTS):
            assert results[i] == alone(plain, prompt, LENGTHS[i])


def test_a_request_past_the_sequences_is_refused_until_one_is_free(tiny_pair):
    with load_tiny(tiny_pair, "lookup", parallel=2) as eng:
        first = eng.generate(PROMPTS[0], max_tokens=5)
        second = eng.generate(PROMPTS[1], max_tokens=5)
        with pytest.raises(EngineBusyError, match="all 2 sequences"):
            eng.generate(PROMPTS[2], max_tokens=5)
        first.close()
        third = eng.generate(PROMPTS[2], max_tokens=5)
        assert len(third.run().tokens) == 5 and len(second.run().tokens) == 5
        del first, second, third
        held = [eng.generate(p, max_tokens=5) for p in PROMPTS[:2]]
        held.pop()  # dropped without being closed: collected, its sequence free again
        assert len(eng.generate(PROMPTS[3], max_tokens=5).run().tokens) == 5


def test_closing_one_leaves_the_others_exact(tiny_pair, plain):
    with load_tiny(tiny_pair, "model", k=3, parallel=3) as eng:
        gens = [eng.generate(p, max_tokens=40) for p in PROMPTS[:3]]
        rounds = [iter(g) for g in gens]
        for _ in range(3):
            for it in rounds:
                next(it)
        gens[1].close()  # the client went away mid-answer
        assert gens[1].finished
        interleaved([gens[0], gens[2]])
        for i in (0, 2):
            assert gens[i].tokens == alone(plain, PROMPTS[i], 40)
        again = eng.generate(PROMPTS[1], max_tokens=40).run()  # its sequence is free again
        assert again.tokens == alone(plain, PROMPTS[1], 40)


def test_per_request_constraints_logprobs_and_penalties_side_by_side(tiny_pair, plain):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    asks = [dict(json_schema=schema), dict(logprobs=2), dict(repeat_penalty=1.3),
            dict(temperature=0.8, seed=7)]
    with load_tiny(tiny_pair, "lookup", k=4, parallel=4) as eng:
        gens = [eng.generate(p, max_tokens=30, **a) for p, a in zip(PROMPTS, asks, strict=True)]
        events = {i: [] for i in range(4)}
        rounds = [iter(g) for g in gens]
        live = set(range(4))
        while live:
            for i in list(live):
                event = next(rounds[i], None)
                if event is None:
                    live.discard(i)
                else:
                    events[i].append(event)
        for i, (prompt, ask) in enumerate(zip(PROMPTS, asks, strict=True)):
            assert gens[i].tokens == alone(plain, prompt, 30, **ask), ask
        assert all(e.logprobs is not None for e in events[1])
        assert all(e.logprobs is None for e in events[0])


def test_a_long_prompt_is_read_in_chunks_beside_a_running_answer(tiny_pair, plain):
    long_prompt = " ".join(["the cat is in the end"] * 15)  # several n_batch chunks
    with load_tiny(tiny_pair, "lookup", k=4, parallel=2, n_batch=64) as eng:
        short = eng.generate(PROMPTS[0], max_tokens=30)
        rounds = iter(short)
        first = next(rounds)
        long = eng.generate(long_prompt, max_tokens=10)
        assert long.stats.prompt_tokens > 3 * 64
        interleaved([long])  # the short one advances meanwhile (its rounds wait for it)
        assert short.outbox, "the running answer advanced while the long prompt was read"
        rest = list(rounds)
        got = list(first.tokens) + [t for e in rest for t in e.tokens]
        assert got == short.tokens == alone(plain, PROMPTS[0], 30)
        assert long.tokens == alone(plain, long_prompt, 10)


def test_a_conversation_comes_back_to_its_own_sequence(tiny_pair):
    with load_tiny(tiny_pair, "lookup", parallel=3) as eng:
        first = eng.generate(PROMPTS[3], max_tokens=12).run()
        eng.generate(PROMPTS[0], max_tokens=12).run()
        follow = PROMPTS[3] + first.text
        again = eng.generate(follow, max_tokens=4).run()
        assert again.stats.cached_prompt_tokens >= first.stats.prompt_tokens - 1


def test_one_failing_generation_fails_alone(tiny_pair, plain):
    with load_tiny(tiny_pair, "lookup", k=4, parallel=2) as eng:
        good = eng.generate(PROMPTS[0], max_tokens=30)
        bad = eng.generate(PROMPTS[1], max_tokens=30)

        def broken(*args, **kwargs):
            raise RuntimeError("verifier broke")
        bad._verifier.verify = broken
        with pytest.raises(RuntimeError, match="verifier broke"):
            list(bad)
        assert bad.finished
        assert good.run().tokens == alone(plain, PROMPTS[0], 30)


def test_engine_step_and_take_events_drive_every_generation(tiny_pair, plain):
    """What lsd serve's engine loop does: step the engine, read each generation's rounds."""
    with load_tiny(tiny_pair, "lookup", k=4, parallel=2) as eng:
        gens = [eng.generate(Request(p, max_tokens=20)) for p in PROMPTS[:2]]
        tokens: list[list[int]] = [[], []]
        while not all(g.finished for g in gens):
            eng.step()
            for i, gen in enumerate(gens):
                for event in gen.take_events():
                    tokens[i].extend(event.tokens)
        for i in range(2):
            assert tokens[i] == gens[i].tokens == alone(plain, PROMPTS[i], 20)


def test_blocks_of_several_sequences_in_one_decode_match_each_alone(tiny_pair):
    """decode_blocks: each sequence's rows equal what decoding it alone gives, and each
    sequence's cache after many blocks gives a fresh evaluation's logits."""
    rng = np.random.default_rng(3)
    model = Model.load(tiny_pair[0], LoadOptions(n_ctx=256, n_seq=3))
    single = Model.load(tiny_pair[0], LoadOptions(n_ctx=256))
    try:
        history = [[], [], []]
        for _ in range(12):
            blocks = []
            for seq in range(3):
                n = int(rng.integers(1, 6))
                tokens = rng.integers(3, model.n_vocab, n).astype(np.int32)
                blocks.append((model.slots[seq], tokens, int(rng.integers(0, n + 1))))
            views = [v.copy() for v in decode_blocks(model, blocks)]
            for seq, (slot, tokens, n_out) in enumerate(blocks):
                single.truncate(0)
                history[seq].extend(tokens.tolist())
                want = single.decode(np.array(history[seq], np.int32), 0, n_out)
                np.testing.assert_allclose(views[seq], want, rtol=1e-2, atol=1e-2)
                assert slot.n_cached == len(history[seq])
                assert slot.cached_tokens.tolist() == history[seq]
            keep = int(rng.integers(1, len(history[0]) + 1))  # a rejection rewinds one
            model.slots[0].truncate(keep)
            del history[0][keep:]
    finally:
        model.close()
        single.close()


def test_auto_calibrates_once_for_every_sequence(tiny_pair, monkeypatch):
    """Each sequence has its own auto drafter; the machine is the same, so the draft
    model's cost is measured once and every drafter starts from that measurement."""
    from lsd_local.drafters.auto import calibration

    measured = []
    original = calibration.measure

    def counting(*args):
        measured.append(args)
        return original(*args)
    monkeypatch.setattr(calibration, "measure", counting)
    with load_tiny(tiny_pair, "auto", draft=tiny_pair[1], parallel=3) as eng:
        gens = [eng.generate(p, max_tokens=6) for p in PROMPTS[:3]]
        drafters = [gen._parts.drafter for gen in gens]
        # (as made: once they draft with the model, each refines its own estimate)
        assert len({d.draft_token_s for d in drafters}) == 1
        assert drafters[0].draft_token_s is not None
        interleaved(gens)
        assert len(measured) == 1 and len({id(d) for d in drafters}) == 3


def test_calibrate_says_whether_it_measured_in_a_context_too_short_for_the_slope(tiny_pair):
    """In 256 tokens the slope cannot be timed (the prefix needs 256 more than the sizes'
    64): the first call measures the sizes, a second measures nothing and says so."""
    with load_tiny(tiny_pair, "auto", draft=tiny_pair[1], n_ctx=256) as eng:
        assert eng.calibrate() and eng.drafter.needs_slope
        assert not eng.calibrate()


def test_calibrating_before_any_request_leaves_nothing_to_measure(tiny_pair, plain,
                                                                   monkeypatch):
    """`Engine.calibrate` (what `lsd serve` does before it answers) measures the sizes, the
    draft model's step and how t(n) grows with the context on filler tokens: no generation
    then measures anything (no stream waits for it), every sequence's drafter starts from
    it, and each answer is still its greedy answer alone. Nothing is left to measure after."""
    from lsd_local.drafters.auto import calibration

    measured = []

    def spying(name: str, real):
        def spy(*args):
            measured.append(name)
            return real(*args)
        return spy
    for name in ("measure", "measure_slope"):
        monkeypatch.setattr(calibration, name, spying(name, getattr(calibration, name)))
    assert not plain.calibrate()  # (no draft model: nothing to measure)
    with load_tiny(tiny_pair, "auto", draft=tiny_pair[1], parallel=3) as eng:
        assert eng.calibrate() and measured == ["measure"]
        assert eng.target.slots[0].n_cached == 0  # (the filler is no prompt's)
        assert not eng.calibrate()  # (nothing left to measure)
        gens = [eng.generate(p, max_tokens=n) for p, n in zip(PROMPTS[:3], LENGTHS[:3],
                                                                strict=True)]
        drafters = [gen._parts.drafter for gen in gens]
        assert not any(d.needs_calibration or d.needs_slope for d in drafters)
        assert len({d.cost.per_query_context_s for d in drafters}) == 1
        interleaved(gens)
        assert measured == ["measure"]
        for gen, prompt, n in zip(gens, PROMPTS, LENGTHS[:3], strict=False):
            assert gen.tokens == alone(plain, prompt, n), prompt


@pytest.mark.parametrize("drafter", ["model", "multilevel"])
def test_the_draft_model_drafts_for_every_sequence_in_one_batch(tiny_pair, plain, monkeypatch,
                                                                drafter):
    """As llama-server drafts for all its slots in one batch: each drafting step decodes
    every waiting sequence's token in one llama_decode of the draft model, and every answer
    is still what it is alone (one request under a grammar, whose draft is constrained)."""
    import lsd_local.backend.slot as slot
    import lsd_local.sidebyside as sidebyside

    real, draft_decodes = slot.decode_blocks, []

    def counting(model, blocks):
        if model is eng.draft_model:
            draft_decodes.append(len(blocks))
        return real(model, blocks)

    for module in (slot, sidebyside):  # (a slot's own decode, and the batched ones)
        monkeypatch.setattr(module, "decode_blocks", counting)
    grammar = 'root ::= ("the " | "cat " | "is ")+'
    with load_tiny(tiny_pair, drafter, k=4, parallel=4) as eng:
        gens = [eng.generate(p, max_tokens=n, grammar=grammar if i == 3 else None)
                for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS, strict=True))]
        interleaved(gens)
        # (the request under a grammar has its drafter inside Forced)
        forwards = sum(getattr(gen._parts.drafter, "inner", gen._parts.drafter).n_forward
                       for gen in gens)
        for i, (gen, prompt, n) in enumerate(zip(gens, PROMPTS, LENGTHS, strict=True)):
            assert gen.tokens == alone(plain, prompt, n, grammar=grammar if i == 3 else None)
    assert max(draft_decodes) == 4  # every sequence's draft token in one decode
    # (each sequence's forwards, most of them shared: far fewer decodes than forwards)
    assert sum(draft_decodes) == forwards and len(draft_decodes) < 0.5 * forwards


@pytest.mark.parametrize("drafter", ["lookup", "model"])
@pytest.mark.parametrize("mode", ["together", "always"])
def test_a_refused_decode_is_retried_block_by_block(tiny_pair, plain, monkeypatch, mode,
                                                    drafter):
    """llama.cpp refuses a decode (a full KV cache, say) that holds one sequence's block.
    "together": it takes that block alone, and every answer is what it is alone; "always":
    it refuses that block alone too, and only that generation fails. With the draft model,
    its batched drafting decodes are refused the same way."""
    import lsd_local.sidebyside as sidebyside

    real, refused_seq = sidebyside.decode_blocks, []

    def refusing(model, blocks):
        seqs = {slot.seq_id for slot, _, _ in blocks}
        if refused_seq[0] in seqs and (len(blocks) > 1 or mode == "always"):
            raise DecodeRefused("llama_decode failed with code 1")
        return real(model, blocks)

    monkeypatch.setattr(sidebyside, "decode_blocks", refusing)
    with load_tiny(tiny_pair, drafter, k=4, parallel=3) as eng:
        gens = [eng.generate(p, max_tokens=n) for p, n in zip(PROMPTS[:3], LENGTHS[:3],
                                                                 strict=True)]
        refused_seq.append(gens[1]._parts.target.seq_id)
        rounds, failed = {i: iter(g) for i, g in enumerate(gens)}, {}
        while rounds:  # (interleaved, each failure kept)
            for i, it in list(rounds.items()):
                try:
                    if next(it, None) is None:
                        del rounds[i]
                except RuntimeError as exc:
                    failed[i] = str(exc)
                    del rounds[i]
    assert list(failed) == ([1] if mode == "always" else []), failed
    for i, (gen, prompt, n) in enumerate(zip(gens, PROMPTS[:3], LENGTHS[:3], strict=True)):
        assert gen.finished
        if i not in failed:
            assert gen.tokens == alone(plain, prompt, n), prompt


@pytest.mark.parametrize("which", ["target", "draft"])
def test_a_decode_that_fails_after_caching_its_tokens_is_not_decoded_again(
        tiny_pair, plain, monkeypatch, which):
    """NaN logits are found after llama.cpp cached the batch: trying its blocks again (as a
    refused decode's) would put their tokens in twice and verify from a wrong context. The
    generations in it fail; the engine serves the next request exactly."""
    import lsd_local.sidebyside as sidebyside
    from lsd_local.errors import ModelOutputError

    real, failed_once = sidebyside.decode_blocks, []

    def failing_after(model, blocks):
        views = real(model, blocks)
        model_of = eng.target if which == "target" else eng.draft_model
        if model is model_of and len(blocks) > 1 and not failed_once:
            failed_once.append(len(blocks))
            raise ModelOutputError("llama.cpp returned NaN or infinite logits")
        return views

    monkeypatch.setattr(sidebyside, "decode_blocks", failing_after)
    with load_tiny(tiny_pair, "model", k=4, parallel=2) as eng:
        gens = [eng.generate(p, max_tokens=20) for p in PROMPTS[:2]]
        for gen in gens:
            with pytest.raises(ModelOutputError):
                list(gen)
        assert failed_once == [2]
        again = eng.generate(PROMPTS[2], max_tokens=20).run()
        assert again.tokens == alone(plain, PROMPTS[2], 20)


def test_one_read_after_another_gets_every_round(tiny_pair, plain):
    """Generations read one after another: the later ones ran (or failed) while the first
    was read, and their readers still get every round, in order (they got none before)."""
    with load_tiny(tiny_pair, "lookup", k=4, parallel=3) as eng:
        gens = [eng.generate(p, max_tokens=n) for p, n in zip(PROMPTS[:3], LENGTHS[:3],
                                                                 strict=True)]
        for gen, prompt, n in zip(gens, PROMPTS[:3], LENGTHS[:3], strict=True):
            events = list(gen)
            assert [t for e in events for t in e.tokens] == gen.tokens == alone(plain,
                                                                               prompt, n)
            assert "".join(e.text for e in events) == gen.text and events[-1].finish_reason


def test_a_long_answer_is_told_to_weigh_a_short_request_beside_it(tiny_pair):
    """Each step tells every generation's drafter what the others commit, weighed by how much
    sooner they are expected to end: a long answer beside a new short request counts the
    short one's tokens for more than its own, the short one the long one's for less, and a
    generation alone in its step counts nothing. (Near the end of its max_tokens, the long
    one would weigh more: it too would be about to end.)"""
    seen: dict[str, list[float]] = {"long": [], "short": []}

    def recording(name: str, drafter) -> None:
        propose_steps = drafter.propose_steps

        def record(*args, **kwargs):
            seen[name].append(drafter.batch_yield)
            return propose_steps(*args, **kwargs)
        drafter.propose_steps = record
    with load_tiny(tiny_pair, "lookup", k=4, parallel=2) as eng:
        long = eng.generate(PROMPTS[0], max_tokens=300)  # (expected: 62 more at 30)
        recording("long", long._parts.drafter)
        rounds = iter(long)
        while long.stats.generated_tokens < 30:
            next(rounds)
        n_alone = len(seen["long"])
        short = eng.generate(PROMPTS[1], max_tokens=9)
        recording("short", short._parts.drafter)
        short.run()
        for _ in rounds:
            pass
    assert n_alone and set(seen["long"][:n_alone]) == {0.0}  # (alone before it came)
    assert seen["short"] and max(seen["short"]) < 1.0
    assert max(seen["long"]) > 2.0  # (beside it)
    assert seen["long"][-1] == 0.0  # (alone again once the short one ended)


def test_what_a_generation_commits_is_kept_as_a_moving_average(tiny_pair):
    """The step weighs the others by what their rounds commit: a moving average (halved
    each round), so that one long copy does not stop every neighbour's drafting."""
    with load_tiny(tiny_pair, "lookup", k=4, parallel=2) as eng:
        gen = eng.generate(PROMPTS[2], max_tokens=40)
        average, committed = None, []
        for event in gen:
            committed.append(len(event.tokens))
            average = committed[-1] if average is None else (average + committed[-1]) / 2
        assert len(set(committed)) > 1  # (rounds that drafted and rounds that did not)
        assert eng._runner._yields[gen] == pytest.approx(average)


def test_what_the_step_keeps_of_a_generation_goes_with_it(tiny_pair):
    """Each generation's last block and moving average are keyed by the generation itself,
    held weakly: once it is collected nothing of it is left for a later generation (an id()
    key could be reused by one made at the same address)."""
    import gc

    with load_tiny(tiny_pair, "lookup", k=4, parallel=2) as eng:
        gen = eng.generate(PROMPTS[2], max_tokens=12)
        gen.run()
        assert list(eng._runner._yields) == [gen]
        del gen
        gc.collect()
        assert not list(eng._runner._yields) and not list(eng._runner._last_block)


def held_elsewhere(*locks) -> list[bool]:
    """Whether another thread finds each lock held."""
    seen = []

    def probe():
        for lock in locks:
            free = lock.acquire(blocking=False)
            if free:
                lock.release()
            seen.append(not free)
    other = threading.Thread(target=probe)
    other.start()
    other.join()
    return seen


def test_no_generation_starts_while_the_engine_calibrates_or_is_configured(tiny_pair,
                                                                           monkeypatch):
    """`calibrate` and `configure` hold the steps' lock, then the sequences' claim, as
    generate takes them (another thread's generate waits, instead of reading a prompt into
    the cache being measured on): a finished generation that the garbage collector closes
    meanwhile (it leaves the steps, under their lock) does not deadlock against a generate
    that took the steps' lock first (found by an independent review)."""
    import gc

    from lsd_local.drafters.auto import calibration
    from lsd_local.engine import Engine

    seen = []

    def spy(real):
        def inside(*args, **kwargs):
            seen.append(held_elsewhere(eng._runner.lock, eng._claim._lock))
            gc.collect()  # (the finished generation below is closed here)
            return real(*args, **kwargs)
        return inside
    monkeypatch.setattr(calibration, "measure", spy(calibration.measure))
    monkeypatch.setattr(Engine, "_check_speculation", spy(Engine._check_speculation))
    with load_tiny(tiny_pair, "auto", draft=tiny_pair[1], parallel=2) as eng:
        finished = eng.generate(PROMPTS[0], max_tokens=4)
        finished.run()
        cycle = [finished]
        cycle.append(cycle)  # (a user's object cycle holds it)
        del finished, cycle
        assert eng.calibrate()
        eng.configure(k=3)
        assert seen == [[True, True], [True, True]]
        assert eng.generate(PROMPTS[1], max_tokens=3).run().tokens


def test_a_generation_collected_while_another_is_made_gives_its_sequence_back(
        tiny_pair, monkeypatch):
    """An unfinished generation dropped in a reference cycle is closed by the garbage
    collector whenever it runs, maybe while another generation is being made under the
    sequences' claim: its closing gives its sequence back under that claim too, on the same
    thread (a claim that is not reentrant hung there for good)."""
    import gc

    from lsd_local.engine import Engine

    real = Engine._generation

    def making(self, *args):
        gc.collect()  # (the dropped generation is closed here)
        return real(self, *args)
    eng = load_tiny(tiny_pair, "lookup", k=4, parallel=2)
    dropped = eng.generate(PROMPTS[0], max_tokens=40)
    rounds = iter(dropped)
    next(rounds)
    assert not dropped.finished
    cycle = [dropped, rounds]
    cycle.append(cycle)
    del dropped, rounds, cycle
    monkeypatch.setattr(Engine, "_generation", making)
    made = []
    thread = threading.Thread(target=lambda: made.append(
        eng.generate(PROMPTS[1], max_tokens=3).run().tokens), daemon=True)
    thread.start()
    thread.join(timeout=120)  # (a cap for a failure: it ends in well under a second)
    if thread.is_alive():  # (the engine is left open: closing it would wait for that thread)
        pytest.fail("making a generation hung while another was collected")
    eng.close()
    assert made and made[0]


def _cached(eng) -> list[int]:
    return [slot.n_cached for slot in eng.target.slots]


def test_idle_conversations_are_parked_in_the_state_cache(tiny_pair, plain):
    """Side by side with a state cache, a request that starts empties the sequences no
    request holds (llama.cpp scores every decode against every cell in use): one
    conversation's cells at a time, and a conversation comes back from RAM whole."""
    with load_tiny(tiny_pair, "lookup", k=4, parallel=3, draft=tiny_pair[1]) as eng:
        eng.keep_conversations(4)
        first = eng.generate(PROMPTS[3], max_tokens=12).run()
        seq = first._parts.target.seq_id
        other = eng.generate(PROMPTS[0], max_tokens=12).run()
        assert other._parts.target.seq_id == seq  # a lone client stays on its sequence
        assert sum(n > 0 for n in _cached(eng)) == 1
        follow = PROMPTS[3] + first.text
        again = eng.generate(follow, max_tokens=8).run()
        assert again.stats.cached_prompt_tokens >= first.stats.prompt_tokens - 1
        assert again.tokens == alone(plain, follow, 8)
        assert eng.state_cache.restored >= 1


def test_a_running_generation_is_never_parked(tiny_pair, plain):
    with load_tiny(tiny_pair, "lookup", k=4, parallel=3) as eng:
        eng.keep_conversations(4)
        running = eng.generate(PROMPTS[0], max_tokens=40)
        rounds = iter(running)
        head = list(next(rounds).tokens)
        done = [eng.generate(p, max_tokens=6) for p in PROMPTS[1:3]]
        interleaved(done)  # two sequences idle now, their conversations cached
        held = running._parts.target.seq_id
        before = _cached(eng)[held]
        assert sum(n > 0 for n in _cached(eng)) == 3
        short = eng.generate(PROMPTS[3], max_tokens=10)  # starts while the first runs
        interleaved([short])
        cached = _cached(eng)
        assert cached[held] >= before and cached[short._parts.target.seq_id] > 0
        assert sum(n > 0 for n in cached) == 2  # the other idle sequence was parked
        assert head + [t for e in rounds for t in e.tokens] == alone(plain, PROMPTS[0], 40)
        assert short.tokens == alone(plain, PROMPTS[3], 10)


def test_a_conversation_parked_beside_another_comes_back_whole(tiny_pair, plain):
    """Two clients side by side with a draft model: when one client's next request starts,
    the other's idle sequence gives its cells back (target and draft), and that other
    client's next request is prefilled from the parked state, answering as alone."""
    with load_tiny(tiny_pair, "model", k=3, parallel=2) as eng:
        eng.keep_conversations(4)
        first = [eng.generate(p, max_tokens=12) for p in PROMPTS[:2]]
        interleaved(first)
        seqs = [gen._parts.target.seq_id for gen in first]
        assert seqs[0] != seqs[1]
        follow = [p + gen.text for p, gen in zip(PROMPTS[:2], first, strict=True)]
        again = eng.generate(follow[0], max_tokens=8)
        rounds = iter(again)
        next(rounds)  # (its prefill has run)
        assert again._parts.target.seq_id == seqs[0]
        assert eng.target.slots[seqs[1]].n_cached == 0
        assert eng.draft_model.slots[seqs[1]].n_cached == 0
        assert len(eng.state_cache) == 1
        list(rounds)
        back = eng.generate(follow[1], max_tokens=8).run()
        assert back.stats.cached_prompt_tokens >= first[1].stats.prompt_tokens - 1
        assert back.tokens == alone(plain, follow[1], 8)
        assert again.tokens == alone(plain, follow[0], 8)
