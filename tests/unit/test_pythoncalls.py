"""Tool calls as Python calls (LFM2's form), read back as they stream: each argument once
its literal is complete, the arguments' JSON text only growing; literals with quotes,
escapes, commas and brackets inside strings; what is not the form ends the section."""

from __future__ import annotations

import json

import pytest

from lsd_local.chat.output import OutputParser
from lsd_local.chat.pythoncalls import json_value, python_section
from lsd_local.chat.tools import detect_format, tool_plan

TEMPLATE = "{{ '<|tool_call_start|>[' + name + '(' }}"
CALLS = ("<|tool_call_start|>[plan_trip(city='Rome, \"Lazio\" (it)', days=3, stops=['a', "
         "\"b\\'c\"], budget={'eur': -12.5, \"ok\": True}, note=None, big=1e999), "
         "now()]<|tool_call_end|>")
FIRST = {"city": 'Rome, "Lazio" (it)', "days": 3, "stops": ["a", "b'c"],
         "budget": {"eur": -12.5, "ok": True}, "note": None, "big": float("inf")}


def test_the_form_is_found_in_the_template():
    assert detect_format(TEMPLATE).name == "pythonic"
    # llama.cpp's own LFM2 template asks for JSON objects between the same markers
    assert detect_format(TEMPLATE + """{{ '{"name": ' + n + ', "arguments": ' }}""").name == \
        "lfm2-json"


def test_every_prefix_gives_arguments_that_only_grow():
    seen: list[str] = []
    for n in range(len(CALLS) + 1):
        calls, end = python_section(CALLS[:n])
        for i, scan in enumerate(calls):
            if i < len(seen):
                assert scan.arguments.startswith(seen[i]), (n, scan.arguments, seen[i])
                seen[i] = scan.arguments
            else:
                seen.append(scan.arguments)
        assert end is None or end == len(CALLS)
    calls, end = python_section(CALLS)
    assert [c.name for c in calls] == ["plan_trip", "now"] and end == len(CALLS)
    assert json.loads(calls[0].arguments) == FIRST and calls[1].arguments == "{}"
    assert '"big": 1e999' in calls[0].arguments  # (a number keeps its text: no Infinity)


@pytest.mark.parametrize("source,value", [
    ("'a'", '"a"'), ('"it\'s"', '"it\'s"'), ("True", "true"), ("None", "null"),
    ("true", "true"), ("(1, 2)", "[1, 2]"), ("007", None), ("os.system", None),
    ("{1, 2}", "[1, 2]"), ("'\\ud800'", '"\\ud800"'),
])
def test_literals_become_json_and_nothing_else_is_run(source, value):
    assert json_value(source) == value


@pytest.mark.parametrize("text,calls,closed", [
    ("<|tool_call_start|>get_weather()<|tool_call_end|>", [], True),  # no list
    ("<|tool_call_start|>[get_weather(city=Oslo)]<|tool_call_end|>", [{}], True),  # a name
    ("<|tool_call_start|>[now() now()]", [{}], True),  # no comma between calls
])
def test_what_is_not_the_form_ends_the_section(text, calls, closed):
    found, end = python_section(text)
    assert [json.loads(c.arguments) for c in found] == calls and (end is not None) == closed


def test_streamed_calls_and_text_around_them():
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in ("plan_trip", "now")]
    parser = OutputParser(tool_plan(TEMPLATE, tools, "auto", True).fmt, False, True)
    text = "Planning." + CALLS
    content, deltas = "", []
    for i in range(0, len(text), 3):
        parts = parser.feed([(text[i:i + 3], None)], i + 3 >= len(text))
        content += "".join(t for t, _ in parts.content)
        deltas += parts.tool_calls
    assert content == "Planning." and [c.name for c in parser.tool_calls] == ["plan_trip", "now"]
    for index, call in enumerate(parser.tool_calls):
        assert "".join(d.arguments for d in deltas if d.index == index) == call.arguments
