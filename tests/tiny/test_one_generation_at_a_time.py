"""One generation at a time per Engine (it has one KV cache): a second one started while the
first is unfinished is refused at `generate()`, across threads too; however a generation
ends (finished, closed, left, a `with` block, collected without ever being iterated) the
engine is free and its grammar is freed."""

from __future__ import annotations

import gc
import threading

import pytest
from tinymodels import load_tiny

from lsd_local import EngineBusyError

CHAT = [{"role": "user", "content": "the cat is"}]
OTHER = [{"role": "user", "content": "a dog is"}]


@pytest.fixture(scope="module")
def eng(tiny_pair):
    with load_tiny(tiny_pair, "lookup") as engine:
        yield engine


def test_a_second_generation_while_the_first_is_unfinished_is_refused(eng, plain):
    """The issue's case: two interleaved generations used to corrupt each other's cache."""
    expected = plain.generate(CHAT, max_tokens=20).run().tokens
    g1 = eng.generate(CHAT, max_tokens=20)
    it1 = iter(g1)
    next(it1)
    with pytest.raises(EngineBusyError, match="finish or close the first"):
        eng.generate(OTHER, max_tokens=20)
    list(it1)
    assert g1.tokens == expected  # untouched by the refused one
    assert eng.generate(OTHER, max_tokens=5).run().finish_reason == "length"


def test_a_generation_never_iterated_holds_the_engine_until_closed(eng):
    pending = eng.generate(CHAT, max_tokens=5)
    with pytest.raises(EngineBusyError):
        eng.generate(OTHER, max_tokens=5)
    pending.close()
    assert pending.finished and list(pending) == []
    assert eng.generate(OTHER, max_tokens=5).run().tokens


@pytest.mark.parametrize("ending", ["close", "collected", "with", "finished", "left"])
def test_however_it_ends_the_grammar_is_freed_and_the_engine_free(eng, ending):
    gen = eng.generate(CHAT, max_tokens=30, grammar="json")
    grammar = gen._state.grammar
    assert grammar._sampler  # a live llama.cpp sampler
    if ending == "close":
        gen.close()
    elif ending == "collected":
        del gen
        gc.collect()  # (CPython frees it at once; collected either way)
    elif ending == "with":
        with gen as inside:
            next(iter(inside))
    elif ending == "finished":
        gen.run()
    else:
        for _ in gen:
            break
    assert grammar._sampler is None
    assert eng.generate(OTHER, max_tokens=3).run().tokens


def test_threads_cannot_interleave_generations(eng):
    """One thread generates; another's generate() is refused while it is unfinished."""
    started, tried = threading.Event(), threading.Event()
    outcome = {}

    def first():
        gen = eng.generate(CHAT, max_tokens=10)
        rounds = iter(gen)
        next(rounds)
        started.set()
        tried.wait()
        outcome["first"] = len(list(rounds)) >= 0 and gen.finish_reason

    def second():
        started.wait()
        try:
            eng.generate(OTHER, max_tokens=10)
        except EngineBusyError as exc:
            outcome["second"] = str(exc)
        tried.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcome["first"] == "length" and "already generating" in outcome["second"]


def test_two_threads_racing_to_start_get_one_generation(eng):
    barrier = threading.Barrier(2)
    results = []

    def start():
        barrier.wait()
        try:
            results.append(eng.generate(CHAT, max_tokens=3))
        except EngineBusyError:
            results.append("refused")

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("refused") == 1
    winner = next(r for r in results if r != "refused")
    assert winner.run().finish_reason == "length"


def test_configure_waits_for_the_unfinished_generation(eng):
    """What a generation uses (drafter, rule) is fixed when it is made."""
    gen = eng.generate(CHAT, max_tokens=5)
    with pytest.raises(EngineBusyError, match="finish or close"):
        eng.configure(rule="fly")
    gen.close()
    eng.configure(rule="fly")
    eng.configure(rule="strict")


def test_closing_the_engine_ends_its_unfinished_generation(tiny_pair):
    engine = load_tiny(tiny_pair, "lookup")
    gen = engine.generate(CHAT, max_tokens=50)
    next(iter(gen))
    engine.close()
    assert gen.finished and engine.target.ctx is None  # the models are freed
