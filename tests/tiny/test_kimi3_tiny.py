"""Kimi K3 on real llama.cpp: its call grammar checked by llama.cpp's grammar engine (each
argument's section saying its type, values raw or JSON by the schema, no blanks between
sections, an empty response section before the calls), and a required call after the think
section its prompt opens, closed by a reasoning budget."""

from __future__ import annotations

import json

import pytest
from tinymodels import AGENT_ASK as ASK
from tinymodels import AGENT_TOOLS, KIMI3_TEMPLATE, TINY_CTX, plan_admits, stop_bias
from tinymodels import valid_call as valid

from lsd_local import Engine

TRIP = [{"type": "function", "function": {"name": "plan_trip", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "mode": {"enum": ["car", "train"]}, 'a "b"': {"type": "boolean"},
        "stops": {"type": ["integer", "null"]}, "note": {}},
    "required": ["city", "days"]}}}]
CALL = ('<|open|>tools<|sep|><|open|>call tool="plan_trip" index="1"<|sep|><|open|>argument '
        'key="city" type="string"<|sep|>Rome </p>\n2<|close|>argument<|sep|><|open|>argument '
        'key="days" type="number"<|sep|>3<|close|>argument<|sep|><|open|>argument key="mode" '
        'type="string"<|sep|>train<|close|>argument<|sep|><|open|>argument key="a &quot;b&quot;" '
        'type="boolean"<|sep|>true<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools'
        "<|sep|>")


@pytest.mark.parametrize("call,whole", [
    (CALL, True),
    ("<|open|>response<|sep|><|close|>response<|sep|>" + CALL, True),  # (empty, as written)
    (CALL + "<|close|>message<|sep|>", True),
    ("<|close|>response<|sep|>" + CALL, True),  # (thinking off: the prompt opened it)
    (CALL.replace("<|close|>call", '<|open|>argument key="stops" type="number"<|sep|>2'
                  '<|close|>argument<|sep|><|open|>argument key="note" type="string"<|sep|>'
                  "any text<|close|>argument<|sep|><|close|>call"), True),
    (CALL.replace("<|close|>call", '<|open|>argument key="stops" type="string"<|sep|>2'
                  "<|close|>argument<|sep|><|close|>call"), False),  # (JSON: not "string")
    ("<|open|>response<|sep|>Hi<|close|>response<|sep|>" + CALL, False),  # (calls only)
    (CALL.replace('type="number"', 'type="string"'), False),  # the type the schema says
    (CALL.replace(">3<", ">three<"), False),  # an integer's value is JSON
    (CALL.replace(">train<", ">boat<"), False),  # one of the enum
    (CALL.replace("<|sep|><|open|>call", "<|sep|>\n<|open|>call"), False),  # no blanks
    (CALL.replace("<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument"
                  "<|sep|>", ""), False),  # a required one
])
def test_the_grammar_admits_typed_calls_and_nothing_else(tiny_agent, call, whole):
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(KIMI3_TEMPLATE, TRIP, "required", False)
    assert plan_admits(tiny_agent, plan, call, ends=whole) == whole
    if call == CALL:
        calls, complete = section_calls(plan.fmt, call)
        assert complete and json.loads(calls[0].arguments) == {
            "city": "Rome </p>\n2", "days": 3, "mode": "train", 'a "b"': True}


def test_a_required_call_follows_the_think_section_a_budget_closes(tiny_kimi3):
    """Thinking on, the prompt opens the think section: a spent reasoning budget writes its
    close and the response section's opener, then the calls the request requires."""
    with Engine.load(tiny_kimi3, drafter="none", n_ctx=TINY_CTX,
                     chat_template=KIMI3_TEMPLATE) as eng:
        letter = eng.target.vocab.byte_tokens()[ord("a")]
        for budget in (0, 4):
            gen = eng.generate(ASK, tools=AGENT_TOOLS, tool_choice="required", max_tokens=200,
                               parallel_tool_calls=False,
                               reasoning_budget=budget,
                               chat_template_kwargs={"enable_thinking": True},
                               logit_bias=stop_bias(eng, {letter: 20.0})).run()
            assert gen.finish_reason == "tool_calls" and gen.tool_calls, gen.text
            assert all(valid(c) for c in gen.tool_calls) and gen.text == ""
            assert gen.stats.reasoning_tokens == budget and len(gen.reasoning) == budget
