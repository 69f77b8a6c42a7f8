"""LFM2's Python-call grammar, checked by llama.cpp's grammar engine: keyword arguments
typed by the schema (strings and enums in single quotes, JSON's numbers, True/False, None),
required ones present, in the schema's order; and what it admits reads back typed."""

from __future__ import annotations

import json

import pytest
from tinymodels import PYTHONIC_TEMPLATE, plan_admits

TRIP = [{"type": "function", "function": {"name": "plan_trip", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "mode": {"enum": ["car", "it's"]}, "fast": {"type": "boolean"},
        "stops": {"type": "array", "items": {"type": "string"}}},
    "required": ["city", "days"]}}}, {"type": "function", "function": {
        "name": "now", "parameters": {"type": "object", "properties": {}}}}]
CALL = ("<|tool_call_start|>[plan_trip(city='Rome, \\'IT\\' (old)', days=3, mode=\"it's\", "
        "fast=True, stops=['a', 'b']), now()]<|tool_call_end|>")


@pytest.mark.parametrize("call,whole", [
    (CALL, True),
    (CALL.replace(", mode=\"it's\", fast=True", ""), True),  # optional ones left out
    (CALL.replace("days=3", "days='3'"), False),  # an integer is no string
    (CALL.replace("fast=True", "fast=true"), False),  # Python's booleans
    (CALL.replace("days=3, ", ""), False),  # a required one left out
    (CALL.replace("mode=\"it's\", fast=True", "fast=True, mode=\"it's\""), False),  # order
    (CALL.replace("mode=\"it's\"", "mode='bus'"), False),  # not one of the enum
])
def test_the_grammar_admits_typed_calls_and_nothing_else(tiny_agent, call, whole):
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(PYTHONIC_TEMPLATE, TRIP, "required", True)
    assert plan_admits(tiny_agent, plan, call) == whole
    if whole:
        calls, complete = section_calls(plan.fmt, call)
        assert complete and [c.name for c in calls] == ["plan_trip", "now"]
        assert json.loads(calls[0].arguments)["city"] == "Rome, 'IT' (old)"


ODD = [{"type": "function", "function": {"name": "odd", "parameters": {
    "type": "object", "properties": {
        "path": {"type": "string"}, "maybe": {"type": ["string", "null"]},
        "level": {"type": "integer", "enum": [1, 2]},
        "sep": {"enum": ["C:\\new", "a\nb", "it's"]}},
    "required": ["path", "level"]}}}]
ODD_CALL = ("<|tool_call_start|>[odd(path='C:\\\\Users', maybe=None, level=2, "
            "sep='C:\\\\new')]<|tool_call_end|>")


@pytest.mark.parametrize("call,whole", [
    (ODD_CALL, True),
    (ODD_CALL.replace("sep='C:\\\\new'", "sep='a\\nb'"), True),
    (ODD_CALL.replace("'C:\\\\Users'", "'C:\\Users'"), False),  # \U: Python reads no such
    (ODD_CALL.replace("level=2", "level=3"), False),  # an enum of integers
    (ODD_CALL.replace("sep='C:\\\\new'", "sep='C:\\new'"), False),  # it would read "C:<LF>ew"
])
def test_the_grammar_admits_only_what_reads_back_as_written(tiny_agent, call, whole):
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(PYTHONIC_TEMPLATE, ODD, "required", False)
    assert plan_admits(tiny_agent, plan, call) == whole
    if whole:
        calls, complete = section_calls(plan.fmt, call)
        arguments = json.loads(calls[0].arguments)
        assert complete and arguments["path"] == "C:\\Users" and arguments["level"] == 2
        assert arguments["sep"] in ODD[0]["function"]["parameters"]["properties"]["sep"]["enum"]

