"""LFM2's Python-call grammar, checked by llama.cpp's grammar engine: keyword arguments
typed by the schema (strings and enums in single quotes, JSON's numbers, True/False, None),
required ones present, in the schema's order; and what it admits reads back typed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tinymodels import PYTHONIC_TEMPLATE

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
    from lsd_local.backend import Grammar, Model, schema_to_gbnf
    from lsd_local.chat.tools import section_calls, tool_plan
    from lsd_local.verify.constrain import allowed_prefix

    plan = tool_plan(PYTHONIC_TEMPLATE, TRIP, "required", True)
    model = Model.load(tiny_agent)
    try:
        grammar = Grammar.compile(model, plan.grammar(schema_to_gbnf)[0], source="test")
        spell = model.vocab.byte_tokens()  # one token per byte: the text exactly
        tokens = np.asarray([spell[b] for b in call.encode()], np.int32)
        assert (allowed_prefix(grammar, tokens) == len(tokens)) == whole
        grammar.close()
    finally:
        model.close()
    if whole:
        calls, complete = section_calls(plan.fmt, call)
        assert complete and [c.name for c in calls] == ["plan_trip", "now"]
        assert json.loads(calls[0].arguments)["city"] == "Rome, 'IT' (old)"
