"""Agents on real llama.cpp (a tiny model with a Hermes/Qwen-style template): tool calls
valid by construction under every rule and drafter, in each tool_choice, streamed as
OpenAI does; tool turns rendered for the template; reasoning read apart from the answer."""

from __future__ import annotations

import math

import pytest
from tinymodels import AGENT_ASK as ASK
from tinymodels import AGENT_TOOLS as TOOLS
from tinymodels import TINY_CTX, accept_text, agent_token, stop_bias, streamed_pieces
from tinymodels import valid_call as valid

from lsd_local import Engine, ParameterError
from lsd_local.chat.thinking import REASONING_CLOSE


@pytest.fixture(scope="module")
def agent(tiny_agent, tiny_pair):
    with Engine.load(tiny_agent, drafter="lookup", n_ctx=TINY_CTX) as eng:
        yield eng



@pytest.mark.parametrize("rule", ["strict", "fly", "asd"])
@pytest.mark.parametrize("drafter", ["lookup", "none"])
def test_required_calls_are_valid_under_every_rule(agent, rule, drafter):
    agent.configure(drafter=drafter, rule=rule, k=4 if drafter != "none" else None)
    try:
        for seed, parallel in ((0, False), (1, True)):
            gen = agent.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=120,
                                 parallel_tool_calls=parallel, logit_bias=stop_bias(agent),
                                 seed=seed).run()
            assert gen.tool_calls and all(valid(c) for c in gen.tool_calls), gen.tool_calls
            assert gen.finish_reason == "tool_calls" and gen.text == ""
            assert parallel or len(gen.tool_calls) == 1
    finally:
        agent.configure(drafter="lookup", rule="strict")


def test_a_named_function_is_the_one_called(agent):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    gen = agent.generate(ASK, tools=TOOLS, tool_choice=choice, max_tokens=120,
                         logit_bias=stop_bias(agent)).run()
    assert [c.name for c in gen.tool_calls] == ["get_weather"] and valid(gen.tool_calls[0])


def test_auto_applies_the_grammar_from_the_call_opener_on(agent):
    """Free text until the model opens a call (here pushed to by a bias on <tool_call>),
    then the lazy grammar makes the call valid."""
    opener = agent_token(agent.target.vocab, "<tool_call>")
    gen = agent.generate(ASK, tools=TOOLS, max_tokens=150, parallel_tool_calls=False,
                         logit_bias=stop_bias(agent, {opener: 60.0})).run()
    assert len(gen.tool_calls) == 1 and valid(gen.tool_calls[0])
    assert gen.tokens[0] == opener and gen.finish_reason == "tool_calls"


def test_none_forbids_calls(agent):
    opener = agent_token(agent.target.vocab, "<tool_call>")
    gen = agent.generate(ASK, tools=TOOLS, tool_choice="none", max_tokens=30,
                         logit_bias={opener: 60.0}).run()
    assert opener not in gen.tokens and gen.tool_calls == []


def test_streamed_pieces_reassemble_to_the_calls(agent):
    gen = agent.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=150,
                         logit_bias=stop_bias(agent))
    calls = streamed_pieces(gen)
    assert calls == [(c.id, c.name, c.arguments) for c in gen.tool_calls]


def test_a_tool_round_trip_renders_for_the_template(agent):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    text = agent.prompt_text(messages, tools=TOOLS)
    assert '"name": "get_weather"' in text and "get_weather" in text.split("# Tools")[1]
    assert '"arguments": {"city": "Paris"}' in text  # an object, not a quoted string
    assert "<tool_response>\n18 C, sunny\n</tool_response>" in text
    gen = agent.generate(messages, tools=TOOLS, max_tokens=8).run()
    assert gen.stats.generated_tokens == 8
    with pytest.raises(ParameterError, match="answers no tool call"):
        agent.generate(ASK + [{"role": "tool", "tool_call_id": "x", "content": "1"}])


@pytest.mark.parametrize("tools,choice,param", [
    ([{"type": "function", "function": {"name": "a b"}}], "auto", "tools"),
    ([{"type": "retrieval"}], "auto", "tools"),
    (TOOLS, {"type": "function", "function": {"name": "invented"}}, "tool_choice"),
    ([{"type": "function", "function": {"name": "x", "parameters": {"type": "array"}}}],
     "required", "tools"),
])
def test_bad_tools_are_named(agent, tools, choice, param):
    with pytest.raises(ParameterError) as caught:
        agent.generate(ASK, tools=tools, tool_choice=choice)
    assert caught.value.param == param
    assert agent.generate(ASK, max_tokens=3).run().tokens  # and the engine goes on


def test_reasoning_is_read_apart_from_the_answer(agent):
    """A <think> block, here forced by a grammar: the answer's text, the reasoning and the
    events' streams keep them apart."""
    grammar = 'root ::= "<think>" [a-z ]{4,12} "</think>" [a-z ]{4,12}'
    gen = agent.generate(ASK, grammar=grammar, max_tokens=60)
    streamed = {"text": "", "reasoning": ""}
    for event in gen:
        streamed["text"] += event.text
        streamed["reasoning"] += event.reasoning
    assert gen.reasoning and gen.text and "<think>" not in gen.text + gen.reasoning
    assert streamed == {"text": gen.text, "reasoning": gen.reasoning}
    phases = gen.stats.phases()
    assert phases["reasoning"]["tokens"] > 0 and phases["answer"]["tokens"] > 0
    kept = agent.generate(ASK, grammar=grammar, max_tokens=60, reasoning=False).run()
    assert kept.text.startswith("<think>") and kept.reasoning == ""


def test_template_kwargs_reach_the_template(agent):
    off = agent.prompt_text(ASK, enable_thinking=False)
    assert off.endswith("<think>\n\n</think>\n\n") and not agent.prompt_text(ASK).endswith(
        "</think>\n\n")


def test_a_block_the_prompt_opened_is_reasoning(tiny_agent):
    opened = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
              "assistant: <think>\n")
    with Engine.load(tiny_agent, drafter="lookup", n_ctx=TINY_CTX,
                     chat_template=opened) as eng:
        gen = eng.generate(ASK, grammar='root ::= [a-z]{3,6} "</think>" [a-z]{3,6}',
                           max_tokens=40).run()
    assert gen.reasoning and gen.text and "</think>" not in gen.reasoning + gen.text


@pytest.mark.parametrize("opening", ["Let me look.\n```json\n", "```\n", "\n"])
def test_auto_triggers_on_a_call_in_json_form_and_only_then_constrains(agent, opening):
    """The lazy grammar of tool_choice "auto" also starts on a fenced (or bare, first) JSON
    object naming a declared tool, in real llama.cpp: the text before is free (a code fence
    of another kind included), the call's arguments are held to the tool's schema after."""
    from lsd_local.chat.tools import tool_plan
    from lsd_local.grammars import compile_tool_grammar

    vocab = agent.target.vocab
    plan = tool_plan(agent.chat_template, TOOLS, "auto", False)
    grammar = compile_tool_grammar(agent.target, plan)
    before = "```python\nx = {'name': 1}\n```\n" if opening.startswith("Let") else ""
    call = opening + '{"name": "get_weather", "arguments": {"city": "'
    closing = "\n```" if opening.startswith(("Let", "```")) else ""
    letter_o = 3 + ord("O")  # the byte token <0x4F>: "Oslo" is not in the city enum
    try:
        accept_text(grammar, vocab, before + call + 'Rome", "metric": true}}' + closing,
                    probe=(" " + before + call, letter_o))
        assert grammar.allows(vocab.eos_token)
    finally:
        grammar.close()


def test_json_naming_no_declared_tool_leaves_auto_free(agent):
    from lsd_local.chat.tools import tool_plan
    from lsd_local.grammars import compile_tool_grammar

    vocab = agent.target.vocab
    grammar = compile_tool_grammar(agent.target, tool_plan(agent.chat_template, TOOLS, "auto",
                                                           False))
    try:
        accept_text(grammar, vocab, '```json\n{"name": "Oslo", "arguments": {"city": "Oslo"}}'
                    "\n```\nanything { at all")
    finally:
        grammar.close()


OPENED = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
          "assistant: <think>\n")


@pytest.mark.parametrize("budget", [0, 5, 17])
def test_a_reasoning_budget_of_n_tokens_yields_at_most_n_then_an_answer(tiny_agent, budget):
    """The prompt opens a <think> block and the model is kept from closing it itself (its
    </think> banned): after `budget` tokens lsd closes it, and the model answers. Strict
    speculation writes what plain decoding writes, inside the block and after."""
    answers = []
    for drafter in ("none", "lookup"):
        with Engine.load(tiny_agent, drafter=drafter, n_ctx=TINY_CTX,
                         chat_template=OPENED) as eng:
            close = agent_token(eng.target.vocab, "</think>")
            gen = eng.generate(ASK, max_tokens=budget + 30, reasoning_budget=budget,
                               logit_bias={close: -math.inf}).run()
            # the model's own reasoning tokens: all of the budget, then what lsd wrote,
            # exactly (the </think> token itself)
            after = b"".join(eng.target.vocab.token_bytes_special(t)
                             for t in gen.tokens[budget:]).decode("utf-8", "replace")
            assert close not in gen.tokens[:budget] and after.startswith(REASONING_CLOSE)
            assert gen.stats.reasoning_tokens == budget
            assert gen.text.strip() and "</think>" not in gen.text + gen.reasoning
            assert gen.tokens.count(close) == 1
            answers.append(gen.tokens)
    assert answers[0] == answers[1]


def test_a_budget_does_not_cut_reasoning_that_is_not_read_apart(tiny_agent):
    """reasoning=False (reasoning_format "none"): the block's text is content, and the
    budget, which acts on reasoning read apart (docs/server.md), writes no close into it."""
    with Engine.load(tiny_agent, drafter="none", n_ctx=TINY_CTX, chat_template=OPENED) as eng:
        close = agent_token(eng.target.vocab, "</think>")
        gen = eng.generate(ASK, max_tokens=12, reasoning_budget=3, reasoning=False,
                           logit_bias={close: -math.inf}).run()
        assert close not in gen.tokens and gen.stats.reasoning_tokens == 0
        assert gen.reasoning == "" and gen.finish_reason == "length"


def test_without_a_budget_the_block_goes_on(tiny_agent):
    with Engine.load(tiny_agent, drafter="none", n_ctx=TINY_CTX, chat_template=OPENED) as eng:
        close = agent_token(eng.target.vocab, "</think>")
        gen = eng.generate(ASK, max_tokens=30, logit_bias={close: -math.inf}).run()
        assert gen.text == "" and gen.stats.reasoning_tokens == 30


@pytest.fixture(scope="module")
def bpe_like_agent(tmp_path_factory):
    """The agent model with tokens that join a closing quote to what follows, as byte-level
    BPE vocabularies have them (Qwen: '"}', '",')."""
    import tinymodels

    spec = tinymodels.TinySpec(words=tuple(tinymodels.WORDS) + tinymodels.AGENT_WORDS
                               + ('"}', '",', '"\n'))
    weights = tinymodels.random_weights(spec, 259 + len(spec.words))
    path = tinymodels.write_gguf(tmp_path_factory.mktemp("bpe") / "agent.gguf", spec, weights,
                                 tinymodels.AGENT_TEMPLATE)
    with Engine.load(path, drafter="none", n_ctx=TINY_CTX) as eng:
        yield eng


def token_of(vocab, piece: bytes) -> int:
    return next(t for t in range(vocab.n_tokens) if vocab.token_bytes(t) == piece)


@pytest.mark.parametrize("opening", ["```json\n", ""])
def test_a_token_that_would_start_the_grammar_on_text_it_rejects_is_refused(bpe_like_agent,
                                                                             opening):
    """`{"name": "now"}` closed by one token: llama.cpp would start the grammar on `{"name":
    "now"}`, which lacks "arguments", and abort the process. The guard refuses that token
    (the model takes another), and a sampled one raises instead of aborting."""
    from lsd_local.chat.tools import tool_plan
    from lsd_local.grammars import compile_tool_grammar

    eng = bpe_like_agent
    vocab = eng.target.vocab
    grammar = compile_tool_grammar(eng.target, tool_plan(eng.chat_template, TOOLS, "auto",
                                                         False))
    try:
        accept_text(grammar, vocab, opening + '{"name": "now')
        quote_brace, quote = token_of(vocab, b'"}'), token_of(vocab, b'"')
        assert not grammar.allows(quote_brace)
        twin = grammar.clone()
        with pytest.raises(ValueError, match="rejects"):
            twin.accept(quote_brace, checked=True)
        twin.close()
        assert grammar.allows(quote) and grammar.allows(token_of(vocab, b'",'))
        grammar.accept(token_of(vocab, b'",'), checked=True)  # starts it: `{"name": "now",`
        assert not grammar.allows(quote_brace)  # now the grammar itself says no
    finally:
        grammar.close()


def test_a_call_written_while_reasoning_does_not_start_the_grammar(bpe_like_agent):
    from lsd_local.chat.tools import tool_plan
    from lsd_local.grammars import compile_tool_grammar

    eng = bpe_like_agent
    vocab = eng.target.vocab
    grammar = compile_tool_grammar(eng.target, tool_plan(eng.chat_template, TOOLS, "auto",
                                                         False))
    try:
        accept_text(grammar, vocab, '<think>\nI could call:\n```json\n{"name": "now')
        assert not grammar.allows(token_of(vocab, b'"'))  # a call in reasoning is not one
        accept_text(grammar, vocab, 'X</think>\n```json\n{"name": "now')
        assert grammar.allows(token_of(vocab, b'"'))
    finally:
        grammar.close()


def test_a_budget_lsd_cannot_close_is_dropped_not_an_error(tiny_agent):
    """Where writing the block's end would break the request's grammar or run past
    max_tokens, the model goes on as without a budget (found by an independent review: a
    ValueError after the cache had taken the tokens, and 9 tokens for max_tokens 4)."""
    with Engine.load(tiny_agent, drafter="none", n_ctx=TINY_CTX, chat_template=OPENED) as eng:
        gen = eng.generate(ASK, grammar="root ::= [a-z]{3,30}", max_tokens=20,
                           reasoning_budget=3).run()
        assert "</think>" not in gen.reasoning and len(gen.tokens) <= 20
        close = agent_token(eng.target.vocab, "</think>")
        short = eng.generate(ASK, max_tokens=4, reasoning_budget=3,
                             logit_bias={close: -math.inf}).run()
        assert len(short.tokens) <= 4 and short.finish_reason == "length"


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                  "function": {"name": "get_weather"}}])
def test_a_required_call_follows_the_reasoning_the_prompt_opened(tiny_agent, choice):
    """A template that opens <think> itself (DeepSeek-R1 distills, Apriel 1.6 always): the
    model reasons first, then makes the call it must make; the grammar used to hold from
    the first token, so the call was written inside the block and read as reasoning (found
    by an independent review)."""
    template = OPENED.replace("{% endfor %}", "{% endfor %}{{ tools | tojson }}\n")
    with Engine.load(tiny_agent, drafter="none", n_ctx=TINY_CTX, chat_template=template) as eng:
        letter = eng.target.vocab.byte_tokens()[ord("a")]  # (reasoning in whole characters:
        # the close cannot follow half a UTF-8 sequence)
        for budget in (0, 4):
            gen = eng.generate(ASK, tools=TOOLS, tool_choice=choice, max_tokens=120,
                               reasoning_budget=budget,
                               logit_bias=stop_bias(eng, {letter: 20.0})).run()
            assert gen.finish_reason == "tool_calls" and len(gen.tool_calls) >= 1, gen.text
            assert all(valid(c) for c in gen.tool_calls) and gen.text == ""
            assert gen.stats.reasoning_tokens == budget


def test_a_required_call_follows_an_opened_block_whose_reasoning_stays_content(tiny_agent):
    """reasoning=False (the text of the reasoning stays content) changes nothing about what
    the model writes: the block the prompt opened is closed before the call it must make.
    The grammar used to hold from the first token there, so the close was refused and the
    call was written inside the block (found by an independent review)."""
    template = OPENED.replace("{% endfor %}", "{% endfor %}{{ tools | tojson }}\n")
    with Engine.load(tiny_agent, drafter="none", n_ctx=TINY_CTX, chat_template=template) as eng:
        vocab = eng.target.vocab
        close = vocab.tokenize_bytes(b"</think>")
        assert len(close) == 1  # (the bias below makes the model close the block at once)
        gen = eng.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=120,
                           reasoning=False, logit_bias=stop_bias(eng, {close[0]: 30.0})).run()
        assert gen.finish_reason == "tool_calls" and len(gen.tool_calls) >= 1, gen.text
        assert all(valid(c) for c in gen.tool_calls)
        assert gen.text.strip() == "</think>" and gen.reasoning == ""


@pytest.mark.parametrize("markers", [None, ("<|START_THINKING|>", "<|END_THINKING|>")])
def test_a_call_in_a_block_the_prompt_opened_does_not_start_the_grammar(bpe_like_agent,
                                                                        markers):
    """A template that opens <think> itself (DeepSeek-R1 distills), or Command R7B's
    thinking: the generated text holds no opener, yet a call written before the block's
    close is reasoning, not a call."""
    from lsd_local.chat.tools import tool_plan
    from lsd_local.grammars import compile_tool_grammar

    eng = bpe_like_agent
    vocab = eng.target.vocab
    grammar = compile_tool_grammar(eng.target, tool_plan(eng.chat_template, TOOLS, "auto",
                                                         False))
    close = "</think>" if markers is None else markers[1]
    try:
        if markers is not None:
            grammar.reasoning_markers(*markers)
        grammar.begin_in_reasoning()
        accept_text(grammar, vocab, 'I could call:\n```json\n{"name": "now')
        assert not grammar.allows(token_of(vocab, b'"'))
        accept_text(grammar, vocab, f'X{close}\n```json\n{{"name": "now')
        assert grammar.allows(token_of(vocab, b'"'))
    finally:
        grammar.close()


@pytest.mark.parametrize("ends", [(), ("<tool_call>",)])
def test_a_call_s_opener_ends_the_reasoning_only_where_the_family_says_so(bpe_like_agent,
                                                                           ends):
    """Ling 3's reasoning may run into a call without its close (llama.cpp ends it at
    `<tool_call>`): with the opener among the block's ends, its token may start the grammar
    inside the block the prompt opened; for any other family it may not (the guard refused
    it there, so a Ling 3 model had to close a block it was not trained to close)."""
    from lsd_local.chat.tools import tool_plan
    from lsd_local.grammars import compile_tool_grammar

    eng = bpe_like_agent
    vocab = eng.target.vocab
    opener = agent_token(vocab, "<tool_call>")
    grammar = compile_tool_grammar(eng.target, tool_plan(eng.chat_template, TOOLS, "auto",
                                                         False))
    try:
        grammar.reasoning_markers("<think>", "</think>", ends)
        grammar.begin_in_reasoning()
        accept_text(grammar, vocab, "I need the weather.\n")
        assert grammar.allows(opener) == bool(ends)
        if ends:
            grammar.accept(opener, checked=True)  # (the grammar holds from here)
            assert not grammar.allows(token_of(vocab, b"x"))
    finally:
        grammar.close()


def test_a_schema_holds_with_tool_choice_none(agent):
    """No call may be made, so the request's JSON schema is the answer's grammar (it was
    dropped once: only the absent tool grammar was compiled)."""
    import json

    schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
              "required": ["city"], "additionalProperties": False}
    for seed in range(3):
        gen = agent.generate(ASK, tools=TOOLS, tool_choice="none", json_schema=schema,
                             max_tokens=60, temperature=1.0, seed=seed,
                             logit_bias=stop_bias(agent)).run()
        assert json.loads(gen.text)["city"] in ("Paris", "Rome") and not gen.tool_calls


def test_a_question_about_the_reasoning_markers_opens_no_reasoning(agent):
    """The user's text spells <think> (and [THINK], Magistral's): the answer does not start
    inside a reasoning block, so the call the model opens is a call, not reasoning."""
    opener = agent_token(agent.target.vocab, "<tool_call>")
    ask = [{"role": "user", "content": "What do <think> and [THINK] mean? Also: the weather "
                                       "in Paris?"}]
    gen = agent.generate(ask, tools=TOOLS, max_tokens=150, parallel_tool_calls=False,
                         logit_bias=stop_bias(agent, {opener: 60.0})).run()
    assert len(gen.tool_calls) == 1 and valid(gen.tool_calls[0]) and gen.reasoning == ""
    assert "<think> and [THINK]" in agent.prompt_text(ask)  # (the prompt itself unchanged)
