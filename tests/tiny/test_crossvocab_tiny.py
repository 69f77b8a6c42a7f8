"""Cross-vocabulary drafting on real llama.cpp: the tiny target with a tiny draft of another
vocabulary (other word pieces, other size; both spell any text with byte tokens)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from tinymodels import TINY_CTX

from lsd_local import Engine
from lsd_local.cli import cli

# the other vocabulary has 2 more word pieces, so its tiny model is larger than the target's:
# a warning that is right but beside the point here
pytestmark = pytest.mark.filterwarnings("ignore:.*is larger than the target:UserWarning")
PROMPTS = ["the cat is", "def f(x): return", "héllo wörld ✓ the cat ½ is", "a b a b a b"]


def load(tiny_pair, other, drafter, **kw):
    kw.setdefault("p_min", 0.0)
    return Engine.load(tiny_pair[0], other, drafter=drafter, n_ctx=TINY_CTX, **kw)


@pytest.mark.parametrize("drafter,k", [("model", 4), ("multilevel", 3), ("auto", None)])
def test_strict_equals_greedy_across_vocabularies(tiny_pair, tiny_other_vocab, plain, drafter,
                                                  k):
    with load(tiny_pair, tiny_other_vocab, drafter, k=k) as eng:
        assert eng.cross_vocab
        drafted = 0
        for prompt in PROMPTS:
            gen = eng.generate(prompt, max_tokens=60).run()
            want = plain.generate(prompt, max_tokens=60).run()
            assert gen.tokens == want.tokens and gen.text == want.text, prompt
            drafted += gen.stats.draft_sources.get("cross-vocab", 0)
        if drafter != "auto":  # auto may rightly prefer plain steps for a useless draft
            assert drafted > 0


def test_draft_cache_is_reused_across_rounds(tiny_pair, tiny_other_vocab):
    with load(tiny_pair, tiny_other_vocab, "model", k=4) as eng:
        gen = eng.generate("the cat is on the mat and the dog", max_tokens=80).run()
        drafter = eng._drafter
        context = len(drafter._fixed_ids)
        # without reuse every round would evaluate the whole context again (>= context each)
        assert drafter.n_evaluated < context + gen.stats.rounds * (4 + 1 + 4)
        assert drafter.n_evaluated < gen.stats.rounds * context / 2


def test_the_draft_reads_the_same_conversation_text(tiny_pair, tiny_other_vocab):
    messages = [{"role": "user", "content": "the cat ½ is"}]
    with load(tiny_pair, tiny_other_vocab, "model", k=3) as eng:
        gen = eng.generate(messages, max_tokens=5).run()
        drafter = eng._drafter
        prompt = eng.prompt_tokens(messages)
        target_text = drafter.target.text(prompt[1:])  # the target's BOS is not text
        draft_text = drafter.draft.text(drafter._fixed_ids[1:])  # nor the draft's
        # the other vocabulary has no '▁' piece: its tokenizer spells a space as U+2581 bytes
        assert draft_text.replace("▁".encode(), b" ").strip() == target_text.strip()
        assert gen.tokens


@pytest.mark.parametrize("rule,params", [("fly", {"theta": 0.0, "window": 1}),
                                         ("fly", {"theta": float("inf")}),
                                         ("asd", {"gate": 100.0, "budget": 1e4})])
def test_every_rule_runs_across_vocabularies(tiny_pair, tiny_other_vocab, plain, rule, params):
    with load(tiny_pair, tiny_other_vocab, "model", k=4, rule=rule, **params) as eng:
        for prompt in PROMPTS:
            gen = eng.generate(prompt, max_tokens=40).run()
            assert gen.stats.generated_tokens == 40
            if params.get("theta") == float("inf"):
                assert gen.tokens == plain.generate(prompt, max_tokens=40).run().tokens


def test_sampling_and_grammar_across_vocabularies(tiny_pair, tiny_other_vocab):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    with load(tiny_pair, tiny_other_vocab, "model", k=3) as eng:
        first = eng.generate("the cat", max_tokens=30, temperature=0.9, seed=3).run()
        again = eng.generate("the cat", max_tokens=30, temperature=0.9, seed=3).run()
        assert first.tokens == again.tokens  # seeded: reproducible
        gen = eng.generate("the cat", max_tokens=60, json_schema=schema).run()
        assert isinstance(json.loads(gen.text)["a"], int)


def test_cli_says_it_drafts_through_text(tiny_pair, tiny_other_vocab):
    result = CliRunner().invoke(cli, ["run", str(tiny_pair[0]), "the cat is", "--raw",
                                      "--draft", str(tiny_other_vocab), "--drafter", "model",
                                      "-k", "3", "--max-tokens", "20", "--json"])
    assert result.exit_code == 0, result.output
    assert "another vocabulary" in result.stderr and "cross-vocabulary" in result.stderr
    stats = json.loads(result.stdout.strip().splitlines()[-1])["stats"]
    assert stats["generated_tokens"] == 20 and np.isfinite(stats["decode_tokens_per_second"])
