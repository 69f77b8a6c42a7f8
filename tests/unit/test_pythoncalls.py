"""Tool calls as Python calls (LFM2's form), read back as they stream: each argument once
its literal is complete, the arguments' JSON text only growing; literals with quotes,
escapes, commas and brackets inside strings; what is not the form ends the section."""

from __future__ import annotations

import json

import pytest
from callstream import feed_in_chunks, growing_prefixes, streamed_arguments

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
    # LFM2.5's plain tool list, LFM2's marked one: Python calls whatever the template shows
    # (as llama.cpp reads them)
    for sign in ("{{ 'List of tools: [' }}", "{{ '<|tool_list_start|>[' }}"):
        assert detect_format(sign).name == "pythonic"


def test_every_prefix_gives_arguments_that_only_grow():
    growing_prefixes(python_section, CALLS)
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
    content, _, deltas = feed_in_chunks(parser, "Planning." + CALLS, 3)
    calls = parser.tool_calls
    assert content == "Planning." and [c.name for c in calls] == ["plan_trip", "now"]
    assert [streamed_arguments(deltas, i) for i in range(2)] == [c.arguments for c in calls]


@pytest.mark.parametrize("text", [
    "<|tool_call_start|>[(", "<|tool_call_start|>[f(a={[1]})]", "<|tool_call_start|>[f(a={{}})]",
    "<|tool_call_start|>[f(a=" + "[" * 1200 + "]" * 1200 + ")]<|tool_call_end|>",
    "<|tool_call_start|>[f(x y=1)]", "<|tool_call_start|>[f(a='\\x')]<|tool_call_end|>",
])
def test_text_that_is_not_the_form_ends_without_an_error(text):
    calls, end = python_section(text)
    assert end is not None and all(json.loads(c.arguments) is not None for c in calls
                                   if c.complete)


def test_json_words_inside_lists_and_dicts_and_unicode_keywords_read():
    calls, _ = python_section("<|tool_call_start|>[f(città={'a': true, 'b': [null]})]"
                              "<|tool_call_end|>")
    assert json.loads(calls[0].arguments) == {"città": {"a": True, "b": [None]}}


def test_a_real_lfm25_template_reading_arguments_by_key_is_python_calls():
    assert detect_format('{{- tool_call["function"]["arguments"] -}}'
                         "{{- '<|tool_call_start|>[' -}}").name == "pythonic"
