"""Sampling controls with speculation on, on real llama.cpp: penalties and logit biases give
exactly plain decoding's tokens (greedy) and its distribution (sampled), and logprobs are
the target's own, as a plain evaluation of the same tokens gives them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tinymodels import TINY_CTX, load_tiny

from lsd_local import ParameterError
from lsd_local.backend import LoadOptions, Model
from lsd_local.config import PenaltySettings, SamplerSettings
from lsd_local.verify.penalties import penalize_reference
from lsd_local.verify.sampling import sampling_probs

PROMPT = "the cat is on the mat and the dog is"
CONTROLS = [{"repeat_penalty": 1.5}, {"presence_penalty": 1.2},
            {"frequency_penalty": 0.7, "repeat_last_n": 16},
            {"logit_bias": {"270": 4.0, "262": -math.inf}},
            {"repeat_penalty": 1.3, "repeat_last_n": -1, "presence_penalty": -0.5}]


@pytest.mark.parametrize("controls", CONTROLS)
@pytest.mark.parametrize("drafter", ["lookup", "model", "multilevel"])
def test_strict_speculation_with_penalties_equals_plain_decoding_with_them(
        tiny_pair, plain, drafter, controls):
    expected = plain.generate(PROMPT, max_tokens=60, **controls).run().tokens
    assert expected != plain.generate(PROMPT, max_tokens=60).run().tokens  # they act
    with load_tiny(tiny_pair, drafter, k=5, max_ngram=4, min_ngram=1) as eng:
        gen = eng.generate(PROMPT, max_tokens=60, **controls).run()
    assert gen.tokens == expected
    assert gen.stats.drafted > 0 and (drafter == "lookup" or gen.stats.accepted > 0)
    if "logit_bias" in controls:
        assert 262 not in gen.tokens  # banned


def fresh_rows(path, prompt_ids: list[int], generated: list[int]) -> np.ndarray:
    """A plain evaluation, as plain decoding makes it (the prompt in one batch, then one
    token at a time): the rows that predict each generated token, float32[n, V]."""
    model = Model.load(path, LoadOptions(n_ctx=TINY_CTX))
    try:
        tokens = prompt_ids + generated[:-1]
        model.decode(np.asarray(prompt_ids[:-1], np.int32), 0, 0)
        return np.concatenate([model.decode(np.asarray([token], np.int32), pos, 1).copy()
                               for pos, token in enumerate(tokens[len(prompt_ids) - 1:],
                                                           len(prompt_ids) - 1)])
    finally:
        model.close()


def log_softmax(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float64)
    peak = rows.max(axis=1, keepdims=True)
    return rows - peak - np.log(np.exp(rows - peak).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("controls", [{}, {"repeat_penalty": 1.4, "logit_bias": {"270": 3}}])
def test_logprobs_are_what_a_plain_evaluation_gives(tiny_pair, controls):
    with load_tiny(tiny_pair, "model", k=6) as eng:
        prompt_ids = eng.prompt_tokens(PROMPT * 2)
        gen = eng.generate(PROMPT * 2, max_tokens=40, logprobs=5, **controls)
        items = [lp for event in gen for lp in event.logprobs]
    assert gen.stats.accepted > 0  # drafted tokens' logprobs come from the block's rows
    assert [lp.token for lp in items] == gen.tokens
    rows = fresh_rows(tiny_pair[0], prompt_ids, gen.tokens)
    if controls:
        settings = PenaltySettings(controls.get("repeat_penalty", 1.0),
                                   logit_bias=((270, 3.0),))
        for i in range(len(rows)):
            penalize_reference(rows[i:i + 1], np.asarray(prompt_ids + gen.tokens[:i]),
                               np.zeros(0, np.int32), settings)
    expected = log_softmax(rows)
    for i, lp in enumerate(items):
        assert lp.logprob == pytest.approx(expected[i, lp.token], abs=1e-4)
        top = np.argsort(-expected[i], kind="stable")[:5]
        assert [t for t, _ in lp.top] == top.tolist()
        assert [p for _, p in lp.top] == pytest.approx(expected[i, top].tolist(), abs=1e-4)


def test_no_logprobs_unless_asked(tiny_pair):
    with load_tiny(tiny_pair, "lookup") as eng:
        assert all(e.logprobs is None for e in eng.generate(PROMPT, max_tokens=8))


def test_sampled_speculation_with_a_penalty_follows_the_penalized_target(tiny_pair):
    """The second token, after a first one the draft model proposed, follows the target's
    distribution penalized with the counts that include the draft's first token."""
    sampler = SamplerSettings(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    penalty = PenaltySettings(repeat_penalty=2.0, presence_penalty=1.5)
    with load_tiny(tiny_pair, "model", k=3) as eng:
        prompt_ids = eng.prompt_tokens(PROMPT)
        firsts, seconds = [], []
        for seed in range(1200):
            tokens = eng.generate(PROMPT, max_tokens=2, temperature=1.0, top_k=6, top_p=1.0,
                                  min_p=0.0, seed=seed, repeat_penalty=2.0,
                                  presence_penalty=1.5).run().tokens
            firsts.append(tokens[0])
            seconds.append(tokens[1])
    first = max(set(firsts), key=firsts.count)
    rows = fresh_rows(tiny_pair[0], prompt_ids, [first, 0])
    penalize_reference(rows[1:2], np.asarray(prompt_ids + [first]), np.zeros(0, np.int32),
                       penalty)
    p = sampling_probs(rows[1], sampler)
    counts = np.bincount([s for f, s in zip(firsts, seconds, strict=True) if f == first],
                         minlength=len(p)).astype(float)
    support = p > 0
    assert counts[~support].sum() == 0
    expected = p[support] * counts.sum()
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    assert chi2 < 20.52  # df = 5, p = 0.001


@pytest.mark.parametrize("kwargs,param", [
    ({"logit_bias": {"100000": 1}}, "logit_bias"), ({"logit_bias": {"5": 200}}, "logit_bias"),
    ({"logprobs": 21}, "top_logprobs"), ({"presence_penalty": 3}, "presence_penalty"),
    ({"repeat_penalty": 0}, "repeat_penalty")])
def test_bad_controls_are_named(plain, kwargs, param):
    with pytest.raises(ParameterError) as caught:
        plain.generate(PROMPT, **kwargs)
    assert caught.value.param == param
