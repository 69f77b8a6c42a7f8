"""Tool calls in JSON form (chat/jsoncalls.py): the reader's scan and the lazy grammar's
trigger agree on what opens a call; a fenced or bare JSON object naming a declared tool is a
call, streamed as any other; JSON that names no declared tool, and code fences, stay text."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_local.chat import jsoncalls
from lsd_local.chat.output import OutputParser
from lsd_local.chat.tools import FORMATS

NAMES = ("get_weather", "now", "web.search-v2")
# what Qwen2.5-Coder 1.5B answered to "What is the weather in Oslo in celsius? Use the tool."
QWEN_ANSWER = ('```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Oslo",\n'
               '    "unit": "celsius"\n  }\n}\n```')


@pytest.mark.parametrize("text,state,brace", [
    ('```json\n{"name": "now"', "yes", 8),
    ('```\n  {"name":"get_weather"', "yes", 6),
    ('```json \n{ "name" : "web.search-v2"', "yes", 9),
    ('```json\n{\n  "name":\n "now"', "yes", 8), ("```json\n{\n  ", "maybe", 0),
    ('```json\n{\n' + " " * 21 + '"name": "now"', "no", 0),
    ("``", "maybe", 0), ("```js", "maybe", 0), ('```json\n{"name": "get_', "maybe", 0),
    ('```json\n{"na', "maybe", 0), ("```json\n", "maybe", 0),
    ("```python\n", "no", 0), ('```json\n{"name": "get_time"', "no", 0),
    ('```json\n{"title": "x"', "no", 0), ('```json\n{  "name"', "no", 0),
    ('```json {"name": "now"', "no", 0), ('```json\n["now"]', "no", 0),
])
def test_a_fence_opens_a_call_only_naming_a_declared_tool(text, state, brace):
    assert jsoncalls.fenced_call(text, NAMES) == (state, brace)


@pytest.mark.parametrize("text,state,brace", [
    ('{"name": "now"', "yes", 0), ('\n {"name": "now"', "yes", 2), ("  ", "maybe", 0),
    ('{"name": "no', "maybe", 0), ('{"name": "John", "age": 30}', "no", 0),
    ("Sure: {", "no", 0)])
def test_a_bare_object_opens_a_call_only_naming_a_declared_tool(text, state, brace):
    assert jsoncalls.bare_call(text, NAMES) == (state, brace)


OPENERS = st.tuples(st.sampled_from(["```", "``", "```json", "```jso", "```py"]),
                    st.sampled_from(["", " ", "\t ", "x"]), st.sampled_from(["\n", "", "\r"]),
                    st.sampled_from(["", "  ", "\n"]),
                    st.sampled_from(["{", "{ ", "{  ", "[", "{\n", "{\n\t  ", "{\n" + " " * 21]),
                    st.sampled_from(['"name"', '"nam', '"title"']),
                    st.sampled_from([":", " :", " : ", ":  "]), st.sampled_from(['"', "", " \""]),
                    st.sampled_from([*NAMES, "get", "nowt", "web.searchxv2"]),
                    st.sampled_from(['"', "", '",']))


@settings(max_examples=400, deadline=None)
@given(parts=OPENERS, before=st.sampled_from(["", "Sure.\n", "a ` b\n"]))
def test_the_reader_and_the_grammar_trigger_agree(parts, before):
    """What llama.cpp's trigger (the same pattern, searched) starts the grammar on is what
    the reader reads as a call, from the same "{"."""
    text = before + "".join(parts)
    fence = re.compile(jsoncalls.trigger_patterns(NAMES)[0])
    found = fence.search(text)
    reader = None
    for at in [m.start() for m in re.finditer("`", text)]:
        state, brace = jsoncalls.fenced_call(text[at:], NAMES)
        if state == "yes":
            reader = at + brace
            break
    assert (found.start(1) if found else None) == reader, text


def read(text: str, cuts: list[int], names=NAMES, fmt="hermes"):
    parser = OutputParser(FORMATS[fmt], json_names=names)
    cuts = sorted({c for c in cuts if 0 < c < len(text)})
    pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)], strict=True)]
    content, arguments = "", {}
    for i, piece in enumerate(pieces):
        parts = parser.feed([(piece, 0)], final=i == len(pieces) - 1)
        content += "".join(t for t, _ in parts.content)
        for delta in parts.tool_calls:
            arguments[delta.index] = arguments.get(delta.index, "") + delta.arguments
    calls = [(c.name, json.loads(c.arguments)) for c in parser.tool_calls]
    assert [json.loads(arguments[i]) for i in sorted(arguments)] == [a for _, a in calls]
    return content, calls


CASES = [
    (QWEN_ANSWER, "", [("get_weather", {"city": "Oslo", "unit": "celsius"})]),
    ("I will check.\n" + QWEN_ANSWER + "\n", "I will check.\n",
     [("get_weather", {"city": "Oslo", "unit": "celsius"})]),
    ('{"name": "now", "arguments": {}}', "", [("now", {})]),
    ('```json\n{"name": "now", "arguments": {}}\n```\n```json\n{"name": "get_weather", '
     '"arguments": {"city": "Rome"}}\n```', "", [("now", {}), ("get_weather", {"city": "Rome"})]),
    # not calls: JSON that names no declared tool, code, JSON after other text
    ('Here is an example:\n```json\n{"name": "John", "age": 30}\n```',
     'Here is an example:\n```json\n{"name": "John", "age": 30}\n```', []),
    ("```python\nprint(1)\n```", "```python\nprint(1)\n```", []),
    ('Example: {"name": "now", "arguments": {}}', 'Example: {"name": "now", "arguments": {}}',
     []),
    ("Use `now` or ``get_weather``.", "Use `now` or ``get_weather``.", []),
]


@settings(max_examples=150, deadline=None)
@given(case=st.sampled_from(CASES), cuts=st.lists(st.integers(0, 160), max_size=10))
def test_calls_in_json_form_read_the_same_in_any_chunks(case, cuts):
    text, content, calls = case
    assert read(text, cuts) == (content, calls)


def test_without_declared_names_json_stays_text():
    assert read(QWEN_ANSWER, [], names=()) == (QWEN_ANSWER, [])


def test_the_template_form_still_comes_first():
    text = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
    assert read(text, [5, 20]) == ("", [("now", {})])
