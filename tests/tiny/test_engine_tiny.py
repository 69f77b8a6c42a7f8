"""The engine on real llama.cpp with tiny generated GGUF models."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tinymodels import TINY_CTX, load_tiny

from lsd_local import Engine, Origin, ParameterError
from lsd_local.backend import LoadOptions, Model

PROMPTS = ["the cat is", "def f(x): return", "a b a b a b", "in the end it is"]


def greedy(plain: Engine, prompt, max_tokens: int) -> list[int]:
    return plain.generate(prompt, max_tokens=max_tokens).run().tokens


@pytest.mark.parametrize("drafter", ["model", "lookup", "multilevel"])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_strict_equals_greedy(tiny_pair, plain, drafter, k):
    with load_tiny(tiny_pair, drafter, k=k) as eng:
        for prompt in PROMPTS:
            gen = eng.generate(prompt, max_tokens=80).run()
            assert gen.tokens == greedy(plain, prompt, 80), (drafter, prompt)
            assert gen.stats.accepted_loose == 0
        assert gen.stats.drafted > 0 and gen.stats.accepted_exact > 0


@pytest.mark.parametrize("drafter", ["model", "lookup"])
@pytest.mark.parametrize("rule,params", [("fly", {"theta": math.inf}),
                                         ("fly", {"theta": 0.0, "window": 6}),
                                         ("asd", {"budget": 0.0}),
                                         ("asd", {"max_exceptions": 0, "budget": 100.0})])
def test_loose_rules_in_strict_limit_equal_strict(tiny_pair, plain, drafter, rule, params):
    with load_tiny(tiny_pair, drafter, k=6, rule=rule, **params) as eng:
        for prompt in PROMPTS[:2]:
            gen = eng.generate(prompt, max_tokens=60).run()
            assert gen.tokens == greedy(plain, prompt, 60)
            assert gen.stats.accepted_loose == 0


@pytest.mark.parametrize("rule,params", [("fly", {"theta": 0.01, "window": 2}),
                                         ("asd", {"gate": 10.0, "budget": 50.0,
                                                  "max_exceptions": 3})])
def test_loose_rules_accept_mismatches(tiny_pair, rule, params):
    with load_tiny(tiny_pair, "model", k=6, rule=rule, **params) as eng:
        loose = 0
        for prompt in PROMPTS:
            gen = eng.generate(prompt, max_tokens=80).run()
            loose += gen.stats.accepted_loose
        assert loose > 0


def test_origins_and_counters_agree(tiny_pair):
    with load_tiny(tiny_pair, "model", k=4, rule="fly", theta=0.01, window=2) as eng:
        gen = eng.generate(PROMPTS[0], max_tokens=80)
        events = list(gen)
    origins = [o for e in events for o in e.origins]
    assert origins.count(Origin.DRAFT_LOOSE) == gen.stats.accepted_loose
    assert origins.count(Origin.DRAFT_EXACT) == gen.stats.accepted_exact
    assert origins.count(Origin.TARGET) == gen.stats.rounds
    assert len(origins) == gen.stats.generated_tokens == len(gen.tokens)
    assert "".join(e.text for e in events) == gen.text
    assert gen.stats.tau == pytest.approx(len(origins) / len(events))


@pytest.mark.parametrize("drafter,rule", [("model", "fly"), ("multilevel", "asd"),
                                          ("lookup", "strict")])
def test_kv_cache_consistent_after_many_rounds(tiny_pair, drafter, rule):
    """Logits from the cache after >= 50 rounds equal a fresh evaluation of the same tokens."""
    with load_tiny(tiny_pair, drafter, k=4, rule=rule, theta=0.01, budget=20.0) as eng:
        gen = eng.generate(PROMPTS[1], max_tokens=300).run()
        assert gen.stats.rounds >= 50
        history = np.array(eng.prompt_tokens(PROMPTS[1]) + gen.tokens, np.int32)
        n = len(history)
        cached_row = eng.target.decode(history[n - 1:], n - 1, 1)[0].copy()
        eng.target.truncate(n - 1)
    fresh = Model.load(tiny_pair[0], LoadOptions(n_ctx=TINY_CTX))
    try:
        fresh_row = fresh.decode(history, 0, 1)[0]
        # The KV cache is f16 and batch shapes differ, so allow rounding-level differences;
        # a stale or misplaced cache entry changes logits by whole units.
        np.testing.assert_allclose(cached_row, fresh_row, rtol=1e-2, atol=1e-2)
        assert int(np.argmax(cached_row)) == int(np.argmax(fresh_row))
    finally:
        fresh.close()


def test_multi_turn_reuses_the_prompt_prefix(tiny_pair, plain):
    with load_tiny(tiny_pair, "model", k=4) as eng:
        messages = [{"role": "user", "content": "the cat is"}]
        first = eng.generate(messages, max_tokens=20).run()
        messages += [{"role": "assistant", "content": first.text},
                     {"role": "user", "content": "and the dog?"}]
        second = eng.generate(messages, max_tokens=20).run()
        assert second.stats.cached_prompt_tokens >= first.stats.prompt_tokens - 1
        assert second.tokens == greedy(plain, messages, 20)


def test_draft_kv_is_reused_across_rounds(tiny_pair):
    with load_tiny(tiny_pair, "model", k=4) as eng:
        gen = eng.generate(PROMPTS[0], max_tokens=100).run()
        drafter = eng._drafter
        # Without reuse every round would re-evaluate the whole history.
        n_prompt = gen.stats.prompt_tokens
        assert drafter.n_evaluated < n_prompt + gen.stats.generated_tokens + gen.stats.drafted
        assert drafter.n_evaluated < gen.stats.rounds * n_prompt


def test_multilevel_drafts_equal_model_drafts_in_fewer_passes(tiny_pair):
    with load_tiny(tiny_pair, "model", k=6) as model_eng, \
            load_tiny(tiny_pair, "multilevel", k=6) as ml:
        a = model_eng.generate("a b a b a b", max_tokens=120).run()
        b = ml.generate("a b a b a b", max_tokens=120).run()
        assert a.tokens == b.tokens
        assert a.stats.accepted_per_round == b.stats.accepted_per_round
        assert ml._drafter.n_forward < model_eng._drafter.n_forward


@pytest.mark.parametrize("drafter,rule", [("model", "strict"), ("lookup", "fly"),
                                          ("multilevel", "strict")])
def test_same_seed_same_sampled_output(tiny_pair, drafter, rule):
    # (no suffix index: with one, the second run's drafts come from the first's answer, and
    # what a loose rule or speculative sampling keeps depends on the drafts: docs/drafting.md)
    with load_tiny(tiny_pair, drafter, k=4, rule=rule, suffix_tokens=0) as eng:
        runs = [eng.generate(PROMPTS[0], max_tokens=40, temperature=0.9, seed=s).run().tokens
                for s in (1, 1, 2)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_sampled_first_token_follows_the_target(tiny_pair):
    """Speculative sampling through real llama.cpp: the first generated token's frequencies
    match the target's sampling distribution (chi-square over the top tokens)."""
    from lsd_local.config import SamplerSettings
    from lsd_local.verify.sampling import sampling_probs
    settings = SamplerSettings(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    with load_tiny(tiny_pair, "model", k=3) as eng:
        prompt_ids = eng.prompt_tokens(PROMPTS[0])
        eng.target.truncate(0)
        p = sampling_probs(eng.target.decode(prompt_ids, 0, 1)[0], settings)
        eng.target.truncate(0)
        counts = np.zeros(len(p))
        for seed in range(1500):
            tokens = eng.generate(PROMPTS[0], max_tokens=2, temperature=1.0, top_k=6,
                                  top_p=1.0, min_p=0.0, seed=seed).run().tokens
            counts[tokens[0]] += 1
    support = p > 0
    assert counts[~support].sum() == 0
    expected = p[support] * counts.sum()
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    assert chi2 < 20.52  # df = 5, p = 0.001


def test_asd_refuses_sampling(tiny_pair):
    with load_tiny(tiny_pair, "lookup", rule="asd") as eng, \
            pytest.raises(ParameterError, match="greedy"):
        eng.generate("x", temperature=0.5)


def test_configure_switches_drafter_k_and_rule(tiny_pair, plain):
    with load_tiny(tiny_pair, "model", k=4) as eng:
        first = eng.generate(PROMPTS[0], max_tokens=40).run()
        eng.configure(drafter="lookup", k=6)
        assert eng.drafter_config.k_value == 6 and eng.drafter_config.drafter == "lookup"
        second = eng.generate(PROMPTS[0], max_tokens=40).run()
        eng.configure(rule="fly", theta=0.01, window=2)
        assert eng.rule_config.rule == "fly" and eng.rule_config.theta == 0.01
        eng.configure(drafter="multilevel")
        assert eng.drafter_config.k_value == 4  # the new drafter's default K
        loose = eng.generate(PROMPTS[0], max_tokens=40).run()
        eng.configure(rule="strict")
        assert eng.rule_config.theta == 0.01  # other parameters are kept
        # an earlier Generation keeps its own tokens
        assert first.tokens == second.tokens == greedy(plain, PROMPTS[0], 40)
        assert loose.stats.generated_tokens == 40
    with load_tiny(tiny_pair, "lookup") as eng, \
            pytest.raises(ParameterError, match="needs a draft model"):
        eng.configure(drafter="model")


def test_prefill_longer_than_a_batch_is_chunked(tiny_pair):
    """A prompt longer than n_batch is evaluated in chunks with the same result."""
    tokens = np.random.default_rng(3).integers(3, 279, size=300).astype(np.int32)
    rows = []
    for n_batch in (64, 512):
        model = Model.load(tiny_pair[0], LoadOptions(n_ctx=512, n_batch=n_batch))
        try:
            rows.append(model.decode(tokens, 0, 2).copy())
            assert model.n_cached == 300 and model.cached_tokens.tolist() == tokens.tolist()
        finally:
            model.close()
    np.testing.assert_allclose(rows[0], rows[1], rtol=1e-2, atol=1e-2)
    assert rows[0].shape == (2, 279)


def test_closing_a_generation_ends_the_request_and_frees_the_engine(plain):
    gen = plain.generate("the cat is", max_tokens=50)
    first = next(iter(gen))
    assert first.tokens
    gen.close()
    assert list(gen) == []  # ended for good
    again = plain.generate("the cat is", max_tokens=5).run()  # not "already generating"
    assert again.finish_reason == "length" and len(again.tokens) == 5
    broken = plain.generate("the cat is", max_tokens=50)
    for _ in broken:
        break  # leaving the loop early ends the request too
    assert plain.generate("a b", max_tokens=3).run().tokens


def test_a_closed_engine_says_so_instead_of_crashing(tiny_pair):
    """Its models are freed: a call would read freed memory (found: llama.cpp aborted the
    process with std::out_of_range). Closing again is harmless."""
    from lsd_local.kernels.warmup import process_warmup

    engine = Engine.load(tiny_pair[0], drafter="none", n_ctx=TINY_CTX)
    assert engine.generate("the cat is", max_tokens=2).run().tokens
    pending = engine.generate("the cat is", max_tokens=2)  # made now, iterated after close
    engine.close()
    process_warmup().request_started()  # another engine's request is running meanwhile
    in_flight = process_warmup()._in_flight
    for call in (lambda: engine.generate("the cat is", max_tokens=2),
                 lambda: engine.prompt_tokens("the cat"), engine.reset,
                 lambda: engine.compile_grammar("json"), pending.run,
                 lambda: engine.configure(engine.drafter_config, engine.rule_config)):
        with pytest.raises(RuntimeError, match="Engine is closed"):
            call()
    assert process_warmup()._in_flight == in_flight  # no request was counted as ended
    process_warmup().request_ended()
    engine.close()


def test_logits_view_equals_llama_cpp_pythons_own_pointer(tiny_pair):
    """The cached logits view reads what llama_get_logits points at, decode after decode, as
    the number of requested rows grows and shrinks (llama.cpp may move its output buffer: the
    view must follow it whenever it does)."""
    import ctypes

    import llama_cpp as ll

    rng = np.random.default_rng(11)
    model = Model.load(tiny_pair[0], LoadOptions(n_ctx=TINY_CTX))
    try:
        for rows in (1, 2, 1, 8, 33, 1, 64, 3, 1):
            tokens = rng.integers(3, model.n_vocab, size=rows + 2).astype(np.int32)
            got = model.decode(tokens, model.n_cached, rows).copy()
            pointer = ll.llama_get_logits(model.ctx)
            expected = np.ctypeslib.as_array(pointer, shape=(rows, model.n_vocab))
            assert model.logits._address == ctypes.addressof(pointer.contents)
            assert got.shape == (rows, model.n_vocab)
            np.testing.assert_array_equal(got, expected)
            assert np.isfinite(got).all() and got.std() > 0  # real logits, not a zero buffer
        with pytest.raises(ValueError, match="3 logit rows for 2 tokens"):
            model.decode(np.array([5, 6], np.int32), model.n_cached, 3)  # rows it cannot have
    finally:
        model.close()
