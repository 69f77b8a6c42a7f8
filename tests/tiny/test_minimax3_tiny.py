"""MiniMax-M3's call grammar, checked by llama.cpp's grammar engine: arguments in the
schema's order, objects and arrays as nested tags, strings as raw text without the marker,
other types their JSON; and what it admits reads back typed. Also the rule that keeps a
marker out of text (gbnfparts.until_rules), for markers whose start repeats inside them."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from tinymodels import MINIMAX3_TEMPLATE, plan_admits

from lsd_local.chat.minimax3calls import NS

ITEM = {"type": "object", "properties": {"name": {"type": "string"},
                                         "n": {"type": "integer"}}, "required": ["name"]}
TOOLS = [{"type": "function", "function": {"name": "order", "parameters": {
    "type": "object", "properties": {
        "shop": {"type": "string"}, "items": {"type": "array", "items": ITEM},
        "tags": {"type": "array", "items": {"enum": ["fast", "cheap"]}},
        "when": {"type": "object", "properties": {"day": {"type": "integer"}}},
        "limit": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        "ids": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
        "box": {"type": ["object", "null"], "properties": {"w": {"type": "integer"}}},
        "any": {"type": "array"}, "kind": {"enum": ["a", 1]}},
    "required": ["shop", "items"]}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
ARGS = {"shop": "Bo's <deli>\n", "items": [{"name": "tea", "n": 2}, {"name": "jam"}],
        "tags": ["fast"], "when": {"day": 3}, "limit": 9.5, "ids": [1, 2], "box": {"w": 4},
        "any": [1, "x"], "kind": "a"}  # (Optional[...]s, untyped items, a mixed enum)


def call_text(arguments: dict) -> str:
    """The call block MINIMAX3_TEMPLATE writes for order(arguments) and now()."""
    from lsd_local.chat.templates import render_chat

    calls = [{"id": f"c{i}", "type": "function",
              "function": {"name": name, "arguments": json.dumps(args)}}
             for i, (name, args) in enumerate([("order", arguments), ("now", {})])]
    text = render_chat(MINIMAX3_TEMPLATE, [{"role": "user", "content": "buy"},
                                           {"role": "assistant", "tool_calls": calls}],
                       tools=TOOLS, add_generation_prompt=False)
    return text[text.rindex(NS + "<tool_call>"):text.rindex("[e~[")]


WHOLE = call_text(ARGS)


@pytest.mark.parametrize("call,whole", [
    (WHOLE, True),
    (call_text({"shop": "x", "items": []}), True),  # optional ones left out, an empty array
    (WHOLE.replace(f"{NS}<n>2{NS}</n>", f"{NS}<n>two{NS}</n>"), False),  # an integer is JSON
    (WHOLE.replace(f"{NS}<item>fast", f"{NS}<item>slow"), False),  # one of the enum
    (WHOLE.replace(f"{NS}<name>jam{NS}</name>", ""), False),  # a required key
    (WHOLE.replace(f"{NS}<day>3{NS}</day>", f"{NS}<hour>3{NS}</hour>"), False),  # no such key
    (WHOLE.replace("Bo's", f"Bo{NS}s"), False),  # no marker inside a string
    (WHOLE.replace(f"{NS}<limit>9.5", f"{NS}<limit>null"), True),
    ("</mm:think>" + WHOLE, True),  # (an answer that did not reason starts so)
    ("<mm:think>Which shop?</mm:think>\n" + WHOLE, True),
    ("\n" + WHOLE, False),  # (no blank before a call that is the whole answer)
])
def test_the_grammar_admits_typed_nested_calls_and_nothing_else(tiny_agent, call, whole):
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(MINIMAX3_TEMPLATE, TOOLS, "required", True)
    assert plan_admits(tiny_agent, plan, call, ends=whole) == whole
    if call == WHOLE:  # (what the template wrote is what the reader reads)
        calls, complete = section_calls(plan.fmt, call)
        assert complete and [json.loads(c.arguments) for c in calls] == [ARGS, {}]


@pytest.mark.parametrize("end", [NS, "aab", "abcab", "[BEGIN FINAL RESPONSE]", "a-]\\"])
def test_text_until_a_marker_stops_exactly_where_the_marker_is_whole(tiny_agent, end):
    """`until_rules(end)`: any text without `end`. Over random texts of `end`'s characters
    (and one other), llama.cpp's engine admits a text whole when `end` is not in it, and up
    to one character short of `end`'s first whole occurrence when it is: a partial match
    that breaks falls back to what the text still ends with of `end` (for `]<]minimax[>[`,
    after `]<]<`: the `]<`)."""
    from lsd_local.backend import Grammar, Model
    from lsd_local.chat.gbnfparts import until_rules
    from lsd_local.verify.constrain import allowed_prefix

    model = Model.load(tiny_agent)
    try:
        grammar_text = "root ::= t\n" + "\n".join(until_rules("t", end))
        spell = model.vocab.byte_tokens()
        rng = random.Random(7)
        alphabet = sorted(set(end)) + ["x"]
        texts = [end[:i] + end for i in range(len(end))] + \
            ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
             for _ in range(150)]
        for text in texts:
            grammar = Grammar.compile(model, grammar_text, source="test")
            try:
                tokens = np.asarray([spell[b] for b in text.encode()], np.int32)
                want = text.find(end) + len(end) - 1 if end in text else len(text)
                assert allowed_prefix(grammar, tokens) == len(text[:want].encode()), text
            finally:
                grammar.close()
    finally:
        model.close()
