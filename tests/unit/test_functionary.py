"""Functionary v3.2's messages (chat/functionarycalls.py): the recipient lines are neither
content nor calls, a message to a function is a call, and `>>>` alone opens nothing."""

from __future__ import annotations

import json
import re

import pytest
from callstream import feed_in_chunks, growing_prefixes, single, streamed_arguments

from lsd_local.chat.functionarycalls import functionary_block
from lsd_local.chat.harmonyoutput import output_parser
from lsd_local.chat.tools import detect_format, tool_plan

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
# (llama.cpp's detection strings, as its template has them)
TEMPLATE = "{{ 'Respond in this format:\\n>>>${recipient}\\n${content}' }}{{ '>>>all\\n' }}"
PROMPT = "user\nweather?<|eot|>assistant\n>>>"


def parse(text: str, size: int, tools: bool = True):
    plan = tool_plan(TEMPLATE, TOOLS, "auto", True) if tools else None
    parser = output_parser(TEMPLATE, plan, PROMPT, True)
    content, reasoning, deltas = feed_in_chunks(parser, text, size)
    assert reasoning == ""
    return content, parser.tool_calls, deltas


def test_the_format_is_found_as_llama_cpp_finds_it():
    assert detect_format(TEMPLATE).name == "functionary"
    assert detect_format("{{ '>>>all\\n' }}").name == "generic"


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
@pytest.mark.parametrize("text,content,calls", [
    ("all\nHello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []),
    ('all\nSure.>>>get_weather\n{"city": "Oslo"}>>>now\n{}', "Sure.",
     [("get_weather", {"city": "Oslo"}), ("now", {})]),
    ('get_weather\n{"city": "Oslo"}', "", [("get_weather", {"city": "Oslo"})]),
    # a Python session's prompts name no recipient: text
    ("all\nIn Python:\n>>> x = 1\n>>>print(x)\n1 >>", "In Python:\n>>> x = 1\n>>>print(x)\n1 >>",
     []),
    ("Hello, no recipient line", "Hello, no recipient line", []),
    ("all\nA text to all.>>>all\nand more.", "A text to all.and more.", []),
    ('python\n{"code": "1"}', 'python\n{"code": "1"}', []),  # (no such tool: text)
    ('all\nsee x>>>>now\n{}', "see x", [("now", {})]),  # (as the trigger finds it)
])
def test_recipients_split_the_answer_into_content_and_calls(size, text, content, calls):
    got, tool_calls, deltas = parse(text, size)
    assert got == content
    assert [(c.name, json.loads(c.arguments)) for c in tool_calls] == calls
    for i, call in enumerate(tool_calls):
        assert streamed_arguments(deltas, i) == call.arguments


def test_without_tools_the_answer_line_goes_and_a_call_stays_text():
    assert parse("all\nHi", 2, tools=False)[:2] == ("Hi", [])
    text = 'get_weather\n{"city": "Oslo"}'
    assert parse(text, 2, tools=False)[:2] == (text, [])


def test_no_tool_may_be_named_as_the_answers_recipient():
    from lsd_local.errors import ParameterError

    named_all = [{"type": "function", "function": {"name": "all", "parameters": {}}}]
    with pytest.raises(ParameterError, match="'all'"):
        tool_plan(TEMPLATE, named_all, "auto", True)


def test_a_call_reads_back_as_it_streams():
    text = '>>>get_weather\n{"city": "Oslo"}'
    arguments, named_at = growing_prefixes(single(functionary_block), text)
    assert arguments == ['{"city": "Oslo"}'] and named_at == len(">>>get_weather\n")


def test_lazy_triggers_fire_on_a_function_named_as_recipient_only():
    plan = tool_plan(TEMPLATE, TOOLS, "auto", True)
    _, triggers = plan.grammar(lambda schema: 'root ::= "{}"')
    found = [re.search(p, text) is not None for text in (
        "get_weather\n", "all\nSure.>>>now\n", ">>> x = 1\n", "all\nnow\n")
        for p in triggers[:1]] + [re.search(triggers[1], "all\nSure.>>>now\n") is not None]
    assert found == [True, False, False, False, True]


def test_calls_render_back_with_their_arguments_as_text():
    from lsd_local.chat.templates import render_chat

    template = ("{{ '>>>all' }}{{ '>>>${recipient}' }}{%- for m in messages %}"
                "{%- for c in m.tool_calls or [] %}{{ '>>>' + c.function.name + '\\n' + "
                "c.function.arguments }}{%- endfor %}{%- endfor %}")
    call = {"id": "c1", "type": "function",
            "function": {"name": "now", "arguments": {"tz": "UTC"}}}  # (an object given)
    text = render_chat(template, [{"role": "user", "content": "t?"},
                                  {"role": "assistant", "content": None, "tool_calls": [call]}])
    assert text.endswith('>>>now\n{"tz": "UTC"}')
