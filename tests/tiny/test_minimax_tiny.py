"""MiniMax-M2's call grammar, checked by llama.cpp's grammar engine: parameters in the
schema's order, required ones present, strings as raw text (tags and line breaks included),
other types their JSON; and what it admits reads back typed."""

from __future__ import annotations

import json

import pytest
from tinymodels import MINIMAX_TEMPLATE, plan_admits

TRIP = [{"type": "function", "function": {"name": "plan_trip", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "mode": {"enum": ["car", "train"]}, "note": {"type": "string"}},
    "required": ["city", "days"]}}}]
CALL = ('<minimax:tool_call>\n<invoke name="plan_trip"><parameter name="city">Rome </p>\n2'
        '</parameter>\n<parameter name="days">3</parameter>\n<parameter name="mode">train'
        "</parameter>\n</invoke>\n</minimax:tool_call>")


@pytest.mark.parametrize("call,whole", [
    (CALL, True),
    (CALL.replace('<parameter name="mode">train</parameter>\n', ""), True),  # optional
    (CALL.replace(">3<", ">three<"), False),  # an integer's value is JSON
    (CALL.replace(">train<", ">boat<"), False),  # one of the enum
    (CALL.replace('<parameter name="days">3</parameter>\n', ""), False),  # required
])
def test_the_grammar_admits_typed_calls_and_nothing_else(tiny_agent, call, whole):
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(MINIMAX_TEMPLATE, TRIP, "required", False)
    assert plan_admits(tiny_agent, plan, call) == whole
    if whole:
        calls, complete = section_calls(plan.fmt, call)
        assert complete and json.loads(calls[0].arguments)["city"] == "Rome </p>\n2"
