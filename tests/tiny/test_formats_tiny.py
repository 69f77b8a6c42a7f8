"""Tool-call formats other than Hermes on real llama.cpp: the tiny agent model with a
Qwen3-Coder-style template (calls as XML tags). Calls are valid by construction in each
tool_choice, streamed as OpenAI streams them, and a tool turn renders back."""

from __future__ import annotations

import json

import pytest
from tinymodels import AGENT_ASK as ASK
from tinymodels import AGENT_TOOLS as TOOLS
from tinymodels import TINY_CTX, XML_TEMPLATE, agent_token

from lsd_local import Engine, RuleConfig


def valid(call) -> bool:
    """A call names a tool and its arguments are what that tool's schema admits."""
    args = json.loads(call.arguments)
    if call.name == "now":
        return args == {}
    return call.name == "get_weather" and args["city"] in ("Paris", "Rome") and \
        isinstance(args["metric"], bool) and set(args) == {"city", "metric"}


@pytest.fixture(scope="module")
def xml_agent(tiny_agent):
    with Engine.load(tiny_agent, drafter="lookup", n_ctx=TINY_CTX,
                     chat_template=XML_TEMPLATE) as eng:
        yield eng


def stop_bias(eng, extra=None) -> dict:
    return {eng.target.vocab.eos_token: 30.0, **(extra or {})}


@pytest.mark.parametrize("rule", ["strict", "fly"])
def test_required_xml_calls_are_valid_and_parallel_when_asked(xml_agent, rule):
    for seed, parallel in ((0, False), (1, True), (2, True)):
        gen = xml_agent.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                                 parallel_tool_calls=parallel, logit_bias=stop_bias(xml_agent),
                                 seed=seed, rule=RuleConfig(rule)).run()
        assert gen.tool_calls and all(valid(c) for c in gen.tool_calls), gen.tool_calls
        assert gen.finish_reason == "tool_calls" and gen.text == ""
        assert parallel or len(gen.tool_calls) == 1
        written = b"".join(xml_agent.target.vocab.token_bytes(t) for t in gen.tokens)
        assert b"<function=" in written  # the XML form


def test_a_named_xml_call_writes_typed_parameters(xml_agent):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    for seed in range(3):
        gen = xml_agent.generate(ASK, tools=TOOLS, tool_choice=choice, max_tokens=200,
                                 logit_bias=stop_bias(xml_agent), seed=seed).run()
        assert [c.name for c in gen.tool_calls] == ["get_weather"]
        assert valid(gen.tool_calls[0])  # city from the enum, metric a JSON boolean
        written = b"".join(xml_agent.target.vocab.token_bytes(t) for t in gen.tokens)
        assert b"<parameter=city>" in written and b"<parameter=metric>" in written


def test_auto_xml_call_after_the_opener(xml_agent):
    opener = agent_token(xml_agent.target.vocab, "<tool_call>")
    gen = xml_agent.generate(ASK, tools=TOOLS, max_tokens=200, parallel_tool_calls=False,
                             logit_bias=stop_bias(xml_agent, {opener: 60.0})).run()
    assert len(gen.tool_calls) == 1 and valid(gen.tool_calls[0])
    assert gen.tokens[0] == opener and gen.finish_reason == "tool_calls"


def test_streamed_xml_pieces_reassemble_to_the_calls(xml_agent):
    gen = xml_agent.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                             logit_bias=stop_bias(xml_agent), seed=3)
    calls = {}
    for event in gen:
        for piece in event.tool_calls:
            if piece.name is not None:
                calls[piece.index] = [piece.id, piece.name, ""]
            calls[piece.index][2] += piece.arguments
    assert calls and [tuple(calls[i]) for i in sorted(calls)] == [
        (c.id, c.name, c.arguments) for c in gen.tool_calls]


def test_a_tool_round_trip_renders_as_xml(xml_agent):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "metric": true}'}}
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    text = xml_agent.prompt_text(messages, tools=TOOLS)
    assert "<function=get_weather>\n<parameter=city>\nParis\n</parameter>" in text
    assert "<parameter=metric>\ntrue\n</parameter>" in text
    gen = xml_agent.generate(messages, tools=TOOLS, max_tokens=8).run()  # it goes on
    assert gen.stats.prompt_tokens > 0
