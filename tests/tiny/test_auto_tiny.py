"""The auto drafter (cost-aware drafter and K) on real llama.cpp with tiny generated models."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner
from tinymodels import TINY_CTX

from lsd_local import Engine, config
from lsd_local.cli import cli

PROMPTS = ["the cat is", "a b a b a b", "in the end it is the cat is on the mat"]


@pytest.mark.parametrize("drafter, k, with_draft", [("auto", None, True), ("auto", None, False),
                                                    ("lookup", "auto", False),
                                                    ("model", "auto", True),
                                                    ("auto", 3, True)])
def test_auto_strict_equals_greedy(tiny_pair, plain, drafter, k, with_draft):
    draft = tiny_pair[1] if with_draft else None
    drafted = 0
    with Engine.load(tiny_pair[0], draft, drafter=drafter, k=k, p_min=0.0, n_ctx=TINY_CTX) as eng:
        flat_verification(eng, pinned=True)
        for prompt in PROMPTS:
            gen = eng.generate(prompt, max_tokens=120).run()
            drafted += gen.stats.drafted
            assert gen.tokens == plain.generate(prompt, max_tokens=120).run().tokens, prompt
            stats = gen.stats
            assert sum(stats.draft_sources.values()) == stats.rounds
            assert sum(stats.draft_lengths.values()) == stats.rounds
            # ("suffix": lookup found the match in an earlier answer, kept by the index)
            allowed = {"lookup", "suffix", "model", "none"} if with_draft else \
                {"lookup", "suffix", "none"}
            assert set(stats.draft_sources) <= allowed
    assert drafted > 0  # auto did speculate: equal to greedy is not plain decoding's merit


def flat_verification(eng: Engine, pinned: bool = False) -> None:
    """Tell auto that verification costs nearly the same for any batch (as on a GPU), so
    that it drafts whenever a drafter proposes something; on the tiny models the measured
    curve alone may make plain steps the best choice, and then strict == greedy would be
    tested on plain decoding only. What it measures later moves the curve slowly; `pinned`:
    not at all (a test of something else than auto's pricing must not depend on how fast
    this machine runs a tiny model at the moment: a step priced at 20 ms lets the tiny draft
    model pay however slowly a loaded machine runs it; at 1 ms, measured then, it sometimes
    could not, and a test of drafter "model" drafted nothing)."""
    for n in range(1, 66):
        eng.drafter.cost.observe(n, 0.02 + 0.00001 * n)
    if pinned:
        eng.drafter.cost.observe = lambda *args, **kwargs: None


def test_auto_drafts_when_copying_pays(tiny_pair):
    """A prompt that repeats itself: lookup proposals are right, so auto must use them (on
    tiny models verification is nearly free per token, like a GPU)."""
    text = "the cat is on the mat and the dog is in the house " * 6
    with Engine.load(tiny_pair[0], drafter="auto", n_ctx=TINY_CTX) as eng:
        gen = eng.generate(text, max_tokens=150).run()
    assert gen.stats.draft_sources.get("lookup", 0) > 0
    assert gen.stats.accepted_exact > 0


def test_the_round_tells_any_drafter_when_its_batch_grew_the_targets_logits_buffer(
        tiny_pair):
    """The target counts the most logit rows one decode asked for (its llama.cpp logits
    buffer grew to that); every round tells the drafter whether its batch went beyond, so a
    drafter made later, under another configuration, does not take its first batch of a
    size the target already scored for a buffer growth."""
    from lsd_local.drafters.base import Draft, Drafter
    from lsd_local.loop import LoopSettings, RoundState, TokenBuffer, step
    from lsd_local.verify.verifier import Verifier

    class Fixed(Drafter):
        def __init__(self, size):
            self.size, self.told = size, []

        def propose(self, history, k, sampler=None, rng=None, grammar=None):
            return Draft(np.full(min(k, self.size), 7, np.int32))

        def accept(self, n_drafted, n_accept, verify_seconds, grew_logits=False):
            self.told.append((n_drafted + 1, grew_logits))

    with Engine.load(tiny_pair[0], drafter="none", n_ctx=TINY_CTX) as eng:
        target = eng.target
        history = TokenBuffer(target.n_ctx)
        history.set(eng.prompt_tokens("the cat is on the mat"))
        target.decode(history.view()[:-1], 0, 0)
        settings = LoopSettings(100, 8, None)
        state = RoundState(np.random.default_rng(0))
        verifier = Verifier(eng.rule_config, None)
        first, later = Fixed(8), Fixed(5)
        for drafter in (first, first, later, Fixed(12)):
            step(target, drafter, verifier, history, settings, state, 16)
        assert first.told == [(9, True), (9, False)] and later.told == [(6, False)]
        assert target.most_logit_rows == 13

def test_fly_limits_with_auto_equal_strict(tiny_pair, plain):
    drafted = 0
    with Engine.load(tiny_pair[0], tiny_pair[1], drafter="auto", rule="fly", theta=math.inf,
                     p_min=0.0, n_ctx=TINY_CTX) as eng:
        flat_verification(eng, pinned=True)
        for prompt in PROMPTS:
            gen = eng.generate(prompt, max_tokens=80).run()
            assert gen.tokens == plain.generate(prompt, max_tokens=80).run().tokens
            drafted += gen.stats.drafted
    assert drafted > 0


def test_configure_to_auto_and_back(tiny_pair, plain):
    with Engine.load(tiny_pair[0], drafter="lookup", k=8, n_ctx=TINY_CTX) as eng:
        eng.configure(k="auto")
        assert eng.drafter_config.adaptive_k
        assert eng.drafter_config.k_value == config.AUTO_K_CAP["lookup"] == config.LOOKUP_CAP
        assert eng.generate("a b a b", max_tokens=30).run().tokens == \
            plain.generate("a b a b", max_tokens=30).run().tokens
        eng.configure(k=4)
        assert not eng.drafter_config.adaptive_k and eng.drafter_config.k_value == 4
        with pytest.raises(ValueError, match="k"):
            eng.configure(k="sometimes")


def test_cli_defaults_to_auto_and_reports_the_mix(tiny_pair):
    import json

    result = CliRunner().invoke(cli, ["run", str(tiny_pair[0]), "the cat is", "--json",
                                      "--max-tokens", "20", "--ctx", "256"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)["stats"]
    assert sum(stats["draft_sources"].values()) == stats["rounds"]
    fixed = CliRunner().invoke(cli, ["run", str(tiny_pair[0]), "hi", "-k", "auto", "--drafter",
                                     "lookup", "--max-tokens", "5", "--ctx", "256"])
    assert fixed.exit_code == 0, fixed.output


@pytest.mark.parametrize("value", ["0", "many", "-3"])
def test_cli_rejects_bad_k(tiny_pair, value):
    result = CliRunner().invoke(cli, ["run", str(tiny_pair[0]), "hi", "-k", value])
    assert result.exit_code == 2
    assert "Invalid value for '-k'" in result.output


def test_auto_measures_the_draft_model_before_first_trying_it(tiny_pair, plain):
    """With nothing learned, the first request measures the target's t(n) and the draft
    model's step (both caches emptied and rebuilt): the answer is still greedy's, and the
    draft model's best case is known before it is ever tried."""
    with Engine.load(tiny_pair[0], tiny_pair[1], drafter="auto", p_min=0.0,
                     n_ctx=TINY_CTX) as eng:
        assert eng.drafter.needs_calibration
        for prompt in PROMPTS:
            gen = eng.generate(prompt, max_tokens=60).run()
            assert gen.tokens == plain.generate(prompt, max_tokens=60).run().tokens, prompt
        assert not eng.drafter.needs_calibration and eng.drafter.draft_token_s > 0
        # the sizes a long copy is drafted in are measured too, not extrapolated
        assert all(eng.drafter.cost.knows(n) for n in (1, 2, 9, 16, 32))


def test_calibration_times_the_slope_after_the_whole_prompt_and_keeps_it(tiny_pair, plain):
    """A first prompt too short to time how t(n) grows with the context leaves it unknown;
    the first long one (~390 tokens) times it after all of the prompt but its last token,
    which stays cached for the prefill: the answer is still greedy's, and the statistics
    count those tokens as this request's work (prefill time), not as a cache hit."""
    prompt = ("the cat is on the mat and " * 16)[:400]
    with Engine.load(tiny_pair[0], tiny_pair[1], drafter="auto", n_ctx=TINY_CTX) as eng:
        eng.generate(PROMPTS[0], max_tokens=4).run()
        assert eng.drafter.needs_slope and not eng.drafter.needs_calibration
        n_prompt = len(eng.target.vocab.tokenize(prompt))
        assert n_prompt >= 64 + 256
        eng.reset()
        gen = eng.generate(prompt, max_tokens=20).run()
        assert gen.tokens == plain.generate(prompt, max_tokens=20).run().tokens
        evaluated, seconds = eng._calibration.evaluated
        assert evaluated == n_prompt - 1 and gen.stats.cached_prompt_tokens == 0
        assert gen.stats.prefill_seconds >= seconds > 0
        assert not eng.drafter.needs_slope and eng.drafter.cost.per_query_context_s >= 0.0
        again = eng.generate(prompt, max_tokens=4).run()  # (a real cache hit counts)
        assert again.stats.cached_prompt_tokens > 0


def test_calibration_measures_the_sizes_that_fit_the_batch(tiny_pair, plain):
    """With a fixed K of 4 and a batch of 16 tokens per decode (what `n_batch` allows), a
    block of 32 is never verified: calibration measures the sizes that fit, and the answer
    is still greedy's."""
    with Engine.load(tiny_pair[0], tiny_pair[1], drafter="auto", k=4, n_batch=16,
                     n_ctx=TINY_CTX) as eng:
        assert eng.target.n_batch == 16
        for prompt in PROMPTS:
            gen = eng.generate(prompt, max_tokens=30).run()
            assert gen.tokens == plain.generate(prompt, max_tokens=30).run().tokens, prompt
        assert eng.drafter.draft_token_s > 0
        assert eng.drafter.cost.knows(16) and not eng.drafter.cost.knows(32)


def test_auto_on_an_engine_with_a_batch_smaller_than_its_longest_block(tiny_pair, plain):
    """auto's K is a cap (63: a block of 64), not a request: an engine loaded with a batch of
    32 tokens per decode switches to auto without an error and drafts at most 31, still
    greedy's answer. A fixed K past the batch stays a named error."""
    with Engine.load(tiny_pair[0], drafter="lookup", k=4, n_batch=32, n_ctx=TINY_CTX) as eng:
        assert eng.target.n_batch == 32
        eng.configure(drafter="auto")
        for prompt in PROMPTS:
            gen = eng.generate(prompt, max_tokens=40).run()
            assert gen.tokens == plain.generate(prompt, max_tokens=40).run().tokens, prompt
        with pytest.raises(config.ParameterError, match="invalid k: .*n_batch"):
            eng.configure(k=40)


def test_auto_learns_where_the_answer_starts_and_reads_it(tiny_pair):
    """The engine tells auto the prompt's length (a match after it is the answer's own) and
    gives it the target vocabulary's text, so that it can tell code from prose."""
    with Engine.load(tiny_pair[0], drafter="auto", n_ctx=TINY_CTX) as eng:
        prompt = "in the end it is the cat is on the mat"
        told = []
        begin = eng.drafter.begin
        eng.drafter.begin = lambda family=None, n_prompt=None: (
            told.append(n_prompt), begin(family, n_prompt))
        eng.generate(prompt, max_tokens=8).run()
        context = eng.drafter.context
        assert told == [len(eng.prompt_tokens(prompt))] == [context.start]
        assert context.token_bytes is not None
        assert context.token_bytes(eng.target.vocab.tokenize("cat", add_special=False)[0])
