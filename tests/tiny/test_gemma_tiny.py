"""Gemma 4's calls and thinking on real llama.cpp: a tiny model whose markers (`<|tool_call>`,
`<|"|>`, `<|channel>`, ...) are control tokens, as in Gemma 4's vocabulary (a control token
shows as nothing unless lsd shows it: a call would lose its strings); the call grammar
checked by llama.cpp's grammar engine on typed, untyped and malformed calls."""

from __future__ import annotations

import json
import math

import pytest
from tinymodels import AGENT_ASK as ASK
from tinymodels import AGENT_TOOLS as TOOLS
from tinymodels import GEMMA_TEMPLATE, TINY_CTX, agent_token, plan_admits, stop_bias
from tinymodels import valid_call as valid

from lsd_local import Engine

Q = '<|"|>'


@pytest.fixture(scope="module")
def gemma(tiny_gemma):
    with Engine.load(tiny_gemma, drafter="lookup", n_ctx=TINY_CTX) as eng:
        yield eng


def test_calls_marked_by_control_tokens_are_read(gemma):
    vocab = gemma.target.vocab
    opener, quote = agent_token(vocab, "<|tool_call>"), agent_token(vocab, Q)
    assert vocab.is_control(opener) and vocab.token_bytes(quote) == b""
    for seed, parallel in ((0, False), (1, True)):
        gen = gemma.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                             parallel_tool_calls=parallel, logit_bias=stop_bias(gemma),
                             seed=seed).run()
        assert gen.tokens[0] == opener and gen.finish_reason == "tool_calls"
        assert gen.tool_calls and all(valid(c) for c in gen.tool_calls) and gen.text == ""
    assert quote in gen.tokens or all(c.name == "now" for c in gen.tool_calls)


def test_thinking_is_reasoning_and_its_budget_closes_it(gemma):
    vocab = gemma.target.vocab
    end = agent_token(vocab, "<channel|>")
    thinking = {"enable_thinking": True}
    assert gemma.prompt_text(ASK, **thinking).endswith("<|turn>model\n")
    assert gemma.prompt_text(ASK).endswith("<|channel>thought\n<channel|>")
    gbnf = 'root ::= "<|channel>thought\\n" [a-z ]{3,12} "<channel|>" [a-z ]{3,12}'
    gen = gemma.generate(ASK, grammar=gbnf, max_tokens=60, temperature=1.0, seed=2,
                         logit_bias=stop_bias(gemma), chat_template_kwargs=thinking).run()
    thought = gen.tokens[gen.tokens.index(agent_token(vocab, "<|channel>")) + 1:
                         gen.tokens.index(end)]
    written = b"".join(vocab.token_bytes(t) for t in thought).decode()
    assert written.startswith("thought\n") and gen.reasoning.strip() == written[8:].strip()
    assert gen.text and "channel" not in gen.text + gen.reasoning
    endless = 'root ::= "<|channel>thought\\n" [a-z ]* "<channel|>" [a-z ]{3,12}'
    gen = gemma.generate(ASK, grammar=endless, max_tokens=40, reasoning_budget=4,
                         logit_bias={end: -math.inf}, chat_template_kwargs=thinking).run()
    assert end in gen.tokens and gen.stats.reasoning_tokens == 4 and gen.text


TRIP = [{"type": "function", "function": {"name": "plan_trip", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "Mode": {"type": "string", "enum": ["car", "train"]},
        "stops": {"type": "array", "items": {"type": "string"}},
        "budget": {"type": "object", "properties": {"eur": {"type": "number"}}},
        "note": {"type": "string"}}, "required": ["city", "days"]}}}]
TRIP_CALL = (f"<|tool_call>call:plan_trip{{budget:{{eur:12.5}},city:{Q}Rome, \"2\"\n{Q},"
             f"days:3,Mode:{Q}train{Q},stops:[{Q}a{Q},{Q}b{Q}]}}<tool_call|>")


@pytest.mark.parametrize("call,whole", [
    (TRIP_CALL, True),
    (TRIP_CALL.replace("budget:{eur:12.5},", "").replace(f",Mode:{Q}train{Q}", ""), True),
    (TRIP_CALL.replace("days:3", f"days:{Q}3{Q}"), False),  # an integer is no string
    (TRIP_CALL.replace("days:3,", ""), False),  # a required key left out
    (TRIP_CALL.replace("train", "boat"), False),  # not one of the enum
    (TRIP_CALL.replace(f"{Q}a{Q}", "a"), False),  # a bare word is no value
    (TRIP_CALL.replace("days:3,", "").replace("{Q}train{Q}", f"{Q}train{Q},days:3"),
     False),  # keys in the template's order only (sorted, ignoring case)
])
def test_the_grammar_admits_typed_calls_and_nothing_else(tiny_agent, call, whole):
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(GEMMA_TEMPLATE, TRIP, "required", False)
    assert plan_admits(tiny_agent, plan, call) == whole
    if whole:
        calls, complete = section_calls(plan.fmt, call)
        assert complete and calls[0].name == "plan_trip"
        assert json.loads(calls[0].arguments)["city"] == 'Rome, "2"\n'


def test_lsd_serve_speaks_gemma_to_an_openai_client(tiny_gemma):
    """Through lsd serve and the openai client: a call (whole and streamed, the same), then
    the tool's result sent back, rendered on the model's turn; greedy."""
    import serving

    def streamed(stream) -> list:
        calls: dict = {}
        for chunk in stream:
            for piece in (chunk.choices[0].delta.tool_calls or ()) if chunk.choices else ():
                if piece.id:
                    calls[piece.index] = [piece.function.name, ""]
                calls[piece.index][1] += piece.function.arguments or ""
        return list(calls.values())

    with serving.Server(tiny_gemma, "--ctx", str(TINY_CTX), "--drafter", "lookup") as srv:
        client = srv.client()
        ask = {"model": "x", "messages": ASK, "max_tokens": 200, "tools": TOOLS,
               "tool_choice": "required", "extra_body": {"logit_bias": {"2": 30}}}
        message = client.chat.completions.create(**ask).choices[0].message
        assert message.tool_calls and message.content is None
        assert streamed(client.chat.completions.create(**ask, stream=True)) == [
            [c.function.name, c.function.arguments] for c in message.tool_calls]
        results = [{"role": "tool", "tool_call_id": c.id, "content": '{"temp": 18}'}
                   for c in message.tool_calls]
        follow = client.chat.completions.create(**{
            **ask, "tool_choice": "none", "max_tokens": 6,
            "messages": ASK + [message.model_dump(exclude_none=True)] + results})
        assert follow.choices[0].finish_reason in ("stop", "length")
        assert follow.usage.prompt_tokens > 0


def test_auto_applies_the_grammar_from_the_control_token_opener_on(gemma):
    """With "auto", free text until the model opens a call (pushed to by a bias on the
    opener, a control token that shows as nothing unless lsd shows it); then the lazy
    grammar makes the call valid."""
    opener = agent_token(gemma.target.vocab, "<|tool_call>")
    for seed in range(3):
        gen = gemma.generate(ASK, tools=TOOLS, max_tokens=150, parallel_tool_calls=False,
                             logit_bias=stop_bias(gemma, {opener: 60.0}), seed=seed).run()
        assert len(gen.tool_calls) == 1 and valid(gen.tool_calls[0]), gen.tool_calls
        assert gen.tokens[0] == opener and gen.finish_reason == "tool_calls"


def test_an_opener_token_inside_the_thought_channel_is_no_call(tiny_gemma):
    """The prompt opens the thought channel (as the newer Gemma 4 template does with
    enable_thinking) and the model is pushed to the opener's token: inside the channel it
    is refused (a call there would be filed as reasoning and lost); once the channel is
    closed, the call comes, valid."""
    opened = GEMMA_TEMPLATE.replace(
        r"{%- if not enable_thinking | default(false) -%}{{- '<|channel>thought\n<channel|>' "
        r"-}}{%- endif -%}", r"{{- '<|channel>thought\n' -}}")
    assert opened != GEMMA_TEMPLATE
    with Engine.load(tiny_gemma, drafter="lookup", n_ctx=TINY_CTX, chat_template=opened) as eng:
        vocab = eng.target.vocab
        opener, close = agent_token(vocab, "<|tool_call>"), agent_token(vocab, "<channel|>")
        for seed in range(3):
            gen = eng.generate(ASK, tools=TOOLS, max_tokens=80, parallel_tool_calls=False,
                               logit_bias={opener: 60.0, close: 8.0},
                               seed=seed).run()
            assert close in gen.tokens and opener not in gen.tokens[:gen.tokens.index(close)]
            assert "tool_call" not in gen.reasoning
            assert len(gen.tool_calls) == 1 and valid(gen.tool_calls[0])


ODD = [{"type": "function", "function": {"name": "odd", "parameters": {
    "type": "object", "properties": {
        "level": {"enum": [1, 2]}, "size": {"type": ["integer", "null"]},
        "x:y": {"type": "string"}, "zip": {}}, "required": ["level", "x:y"]}}}]
ODD_CALL = f"<|tool_call>call:odd{{level:2,size:null,{Q}x:y{Q}:{Q}v{Q},zip:0}}<tool_call|>"


@pytest.mark.parametrize("call,whole", [
    (ODD_CALL, True),
    (ODD_CALL.replace("level:2", "level:3"), False),  # an enum of numbers
    (ODD_CALL.replace("size:null", f"size:{Q}1{Q}"), False),  # integer or null, no string
    (ODD_CALL.replace("zip:0", "zip:08540"), False),  # a number JSON cannot read
    (ODD_CALL.replace(f"{Q}x:y{Q}:", "x:y:"), False),  # a key with ":" only between marks
])
def test_the_grammar_types_scalars_and_writes_odd_keys_readably(tiny_agent, call, whole):
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(GEMMA_TEMPLATE, ODD, "required", False)
    assert plan_admits(tiny_agent, plan, call) == whole
    if whole:
        calls, _ = section_calls(plan.fmt, call)
        assert json.loads(calls[0].arguments) == {"level": 2, "size": None, "x:y": "v", "zip": 0}
