"""Grammar-forced drafts on real llama.cpp (tiny models): the GBNF reader agrees with
llama.cpp's grammar on what is complete; forced tokens are drafted and accepted under JSON
schemas and tool calls, and never change what strict decoding writes."""

from __future__ import annotations

import random

import pytest
from grammar_examples import EXAMPLES
from test_agents_tiny import stop_bias
from test_grammar_tiny import PROMPTS, SCHEMA, accepts, check_schema_answer
from tinymodels import AGENT_ASK as ASK
from tinymodels import AGENT_TOOLS as TOOLS
from tinymodels import TINY_CTX, load_tiny

from lsd_local import Engine
from lsd_local.drafters.gbnf import GrammarState, parse_gbnf
from lsd_local.grammars import shipped_grammars


def mutations(text: str, rng: random.Random, n: int) -> list[str]:
    """Texts near a valid one: a character dropped, doubled, swapped or replaced."""
    out = []
    for _ in range(n):
        at = rng.randrange(len(text))
        kind = rng.randrange(4)
        other = rng.choice(' {}[]",:0a\n-.')
        out.append({0: text[:at] + text[at + 1:], 1: text[:at] + text[at] + text[at:],
                    2: text[:at] + other + text[at + 1:],
                    3: text[:at] + other + text[at:]}[kind])
    return out


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_reader_and_llama_cpp_agree_on_texts_near_the_examples(plain, name):
    grammar = plain.compile_grammar(name)
    rules = parse_gbnf(shipped_grammars()[name].read_text())
    eos = plain.target.vocab.eos_token
    rng = random.Random(name)
    agreed = {True: 0, False: 0}
    try:
        for example in EXAMPLES[name][0]:
            for text in [example] + mutations(example, rng, 40):
                if "\t" in text or not text.isprintable() and "\n" not in text:
                    continue
                ours = () in GrammarState.start(rules).accept(text).stacks
                assert ours == accepts(grammar, eos, text), (name, text)
                agreed[ours] += 1
    finally:
        grammar.close()
    assert agreed[True] and agreed[False]  # both answers were asked about


@pytest.mark.parametrize("drafter", ["lookup", "model"])
def test_forced_drafts_keep_strict_output_and_are_accepted(tiny_pair, drafter):
    texts, forced_accepted = {}, 0
    with load_tiny(tiny_pair, drafter, k=6) as eng:
        for forced in (True, False):
            eng.configure(forced=forced)
            for prompt in PROMPTS:
                gen = eng.generate(prompt, max_tokens=160, json_schema=SCHEMA).run()
                check_schema_answer(gen.text)
                texts[forced, prompt] = gen.tokens
                if forced:
                    forced_accepted += gen.stats.accepted_by_source.get("forced", 0)
                else:
                    assert "forced" not in gen.stats.drafted_by_source
    with Engine.load(tiny_pair[0], drafter="none", n_ctx=TINY_CTX) as plain:
        for prompt in PROMPTS:
            greedy = plain.generate(prompt, max_tokens=160, json_schema=SCHEMA).run().tokens
            assert texts[True, prompt] == texts[False, prompt] == greedy, prompt
    assert forced_accepted > 20  # the keys of every answer, at least


@pytest.mark.parametrize("rule,params", [("fly", {"theta": float("inf")}),
                                         ("asd", {"budget": 0.0})])
def test_loose_rules_at_their_strict_settings_equal_strict_with_forced_drafts(
        tiny_pair, rule, params):
    with load_tiny(tiny_pair, "lookup", k=6) as strict, \
            load_tiny(tiny_pair, "lookup", k=6, rule=rule, **params) as loose:
        for prompt in PROMPTS:
            want = strict.generate(prompt, max_tokens=160, json_schema=SCHEMA).run()
            got = loose.generate(prompt, max_tokens=160, json_schema=SCHEMA).run()
            assert got.tokens == want.tokens and got.stats.accepted_loose == 0
            assert got.stats.accepted_by_source.get("forced", 0) > 0


def test_tool_calls_draft_the_call_shape(tiny_agent):
    # no suffix index: the second request would draft the whole first answer from it
    with Engine.load(tiny_agent, drafter="lookup", k=8, n_ctx=TINY_CTX, suffix_tokens=0) as agent:
        runs = {}
        for forced in (True, False):
            agent.configure(forced=forced)
            gen = agent.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=120,
                                 logit_bias=stop_bias(agent)).run()
            runs[forced] = gen
        assert runs[True].tokens == runs[False].tokens
        assert [c.name for c in runs[True].tool_calls] == \
            [c.name for c in runs[False].tool_calls]
        stats = runs[True].stats
        assert stats.accepted_by_source.get("forced", 0) >= 5  # '"name": "', the tool's name..
        assert stats.rounds < runs[False].stats.rounds
