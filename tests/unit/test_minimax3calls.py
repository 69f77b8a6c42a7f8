"""Tool calls in MiniMax-M3's form (every tag after the marker `]<]minimax[>[`, an argument a
tag named by its key, objects and arrays as nested tags), read back as they stream; its
reasoning tags, the bare close of an answer that did not reason, and its thinking switch."""

from __future__ import annotations

import json

import pytest
from callstream import feed_in_chunks, growing_prefixes, streamed_arguments
from tinymodels import MINIMAX3_TEMPLATE

from lsd_local.chat.harmonyoutput import output_parser
from lsd_local.chat.minimax3calls import MAX_DEPTH, NS, as_tags, minimax3_section, written_as
from lsd_local.chat.templates import render_chat
from lsd_local.chat.thinking import thinking_of
from lsd_local.chat.tools import detect_format, tool_plan

STOP = {"type": "object", "properties": {"name": {"type": "string"},
                                         "nights": {"type": "integer"}}, "required": ["name"]}
TOOLS = [{"type": "function", "function": {"name": "plan_trip", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "stops": {"type": "array", "items": STOP},
        "tags": {"type": "array", "items": {"type": "string"}},
        "budget": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        "note": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "flags": {"type": "object", "properties": {"fast": {"type": "boolean"}}},
        "extra": {"type": "object"}, "seats": {"type": "array"}, "misc": {}},
    "required": ["city"]}}},
         {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
ARGS = {"city": "Oslo <b>\n & more", "days": 3,
        "stops": [{"name": "Bergen", "nights": 2}, {"name": "Ål"}], "tags": ["a", " b c "],
        "budget": 12.5, "note": "42", "flags": {"fast": True}, "extra": {"k": [1, "x"]},
        "seats": [["a", "b"], ["c"]]}  # (an untyped empty list inside is written as "" is)


def rendered_calls(calls: list[tuple[str, dict]]) -> str:
    """The call block the tests' template writes for `calls` (name, arguments)."""
    messages = [{"role": "user", "content": "plan"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"c{i}", "type": "function",
                     "function": {"name": name, "arguments": json.dumps(arguments)}}
                    for i, (name, arguments) in enumerate(calls)]}]
    text = render_chat(MINIMAX3_TEMPLATE, messages, tools=TOOLS, add_generation_prompt=False)
    return text[text.rindex(NS + "<tool_call>"):text.rindex("[e~[")]


def types() -> dict:
    return tool_plan(MINIMAX3_TEMPLATE, TOOLS, "auto", True).fmt.types()


def test_the_format_and_its_reasoning_tags_are_found_before_hermes_tool_call():
    assert "<tool_call>" in MINIMAX3_TEMPLATE
    assert detect_format(MINIMAX3_TEMPLATE).name == "minimax3"
    assert thinking_of(MINIMAX3_TEMPLATE).open == "<mm:think>"
    assert detect_format(MINIMAX3_TEMPLATE.replace(NS, "")).name == "hermes"


def test_nested_arguments_read_back_as_written_and_only_grow_over_every_prefix():
    """Objects, arrays of objects and of arrays, typed leaves: what the template wrote from
    ARGS reads back as ARGS (the string "42" of a string-or-integer stays a string; a
    nested value the schema does not describe is read by its tags and JSON)."""
    text = rendered_calls([("plan_trip", ARGS), ("now", {})])
    seen, named_at = growing_prefixes(lambda t: minimax3_section(t, types()), text)
    assert [json.loads(s) for s in seen] == [ARGS, {}]
    assert named_at == text.index('">') + 2


def test_how_values_are_read_and_written_follows_the_schema():
    assert written_as({"type": "string"}) == written_as({"enum": ["a", "b"]}) == "string"
    assert written_as({"anyOf": [{"type": "integer"}, {"type": "string"}]}) == "string"
    assert written_as({"type": ["null", "string"]}) == "string"
    assert written_as({"anyOf": [{"type": "number"}, {"type": "null"}]}) == "number"
    assert written_as({"anyOf": [{"type": "number"}, {"type": "boolean"}]}) is None
    assert written_as({"anyOf": [{"type": "array", "items": STOP}, {"type": "null"}]}) == \
        "array" == written_as({"type": ["array", "null"]}) == written_as({"items": {}})
    assert written_as({"enum": ["a", 1]}) == "string"  # (llama.cpp: may be a string)
    assert written_as({"properties": {"a": {}}}) == "object"
    assert (as_tags(STOP, 0), as_tags(STOP, MAX_DEPTH)) == (True, False)
    assert as_tags({"type": "array", "items": STOP}, 0)
    assert not as_tags({"type": "object"}, 0) and as_tags({"type": "array"}, 0)


@pytest.mark.parametrize("key", ["a>b", "/x", f"a{NS}b"])
def test_a_key_that_cannot_name_a_tag_is_refused(key):
    """The reader takes a tag's name up to its `>`: a key the template cannot write as a
    tag name is a clear error, not a call read wrong."""
    from lsd_local.errors import ParameterError

    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"o": {"type": "object", "properties": {
            key: {"type": "string"}}}}}}}]
    with pytest.raises(ParameterError, match="cannot name one"):
        tool_plan(MINIMAX3_TEMPLATE, tools, "auto", True)


@pytest.mark.parametrize("properties", [["a"], "a", {"o": {"properties": ["a"]}}])
def test_properties_that_are_no_object_are_a_clear_error_or_ignored(properties):
    from lsd_local.errors import ParameterError

    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": properties}}}]
    if isinstance(properties, dict):  # (nested: that value is read by its tags or JSON)
        assert tool_plan(MINIMAX3_TEMPLATE, tools, "auto", True).fmt.types()
    else:
        with pytest.raises(ParameterError, match="properties"):
            tool_plan(MINIMAX3_TEMPLATE, tools, "auto", True)


def test_a_json_call_after_the_bare_close_stays_text():
    """The lazy grammar's trigger for a JSON call is anchored at the answer's start, which
    the bare close takes: such a call was never held to its schema, so it is not a call
    (as after a reasoning block)."""
    plan = tool_plan(MINIMAX3_TEMPLATE, TOOLS, "auto", True)
    parser = output_parser(MINIMAX3_TEMPLATE, plan, "]~b]ai\n", True)
    text = '</mm:think>{"name": "now", "arguments": {}}'
    content, _, _ = feed_in_chunks(parser, text, 4)
    assert content == text[len("</mm:think>"):] and parser.tool_calls == []


def test_a_schema_nested_past_the_depth_is_typed_no_deeper():
    """A request's schema may nest a thousand levels: its types stop at MAX_DEPTH (the
    reader reads deeper values by their tags or JSON)."""
    deep: dict = {"type": "integer"}
    for _ in range(1000):
        deep = {"type": "object", "properties": {"a": deep}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": deep}}]
    known = tool_plan(MINIMAX3_TEMPLATE, tools, "auto", True).fmt.types()
    assert max(len(path) for _, path in known) == MAX_DEPTH + 1


@pytest.mark.parametrize("text,calls", [
    (f"{NS}<tool_call>\nNo call here.", []),  # text that is no invoke ends the block
    (f'{NS}<tool_call>{NS}<invoke name="now">oops{NS}</invoke>', [{}]),  # no element
    (f'{NS}<tool_call>{NS}<invoke name="plan_trip">{NS}<city>Rome{NS}</days>', [{}]),
    (f'{NS}<tool_call>{NS}<invoke name="plan_trip">{NS}<days>3{NS}<x>', [{}]),
    (f'{NS}<tool_call>{NS}<invoke name="plan_trip">{NS}<city>A{NS}</city>{NS}</tags>',
     [{"city": "A"}]),
])
def test_text_that_is_not_the_form_ends_the_call_and_the_block(text, calls):
    found, end = minimax3_section(text, types())
    assert [json.loads(c.arguments) for c in found] == calls and end is not None
    assert all(c.complete for c in found)


@pytest.mark.parametrize("value,arguments", [
    (f"{NS}<stops>{NS}</stops>", {"stops": []}),  # an empty array is written empty
    (f"{NS}<flags>{NS}</flags>", {"flags": {}}),
    (f"{NS}<days> 7 {NS}</days>", {"days": 7}),
    (f"{NS}<city> 7 {NS}</city>", {"city": " 7 "}),  # a string keeps its text as written
    (f"{NS}<misc>{NS}<item>1{NS}</item>{NS}<item>b{NS}</item>{NS}</misc>",
     {"misc": [1, "b"]}),  # (items where the schema says nothing)
    (f"{NS}<misc>{NS}<a>1{NS}</a>{NS}<item>b{NS}</item>{NS}</misc>",
     {"misc": {"a": 1, "item": "b"}}),
    (f"{NS}<extra>{{\"a\": 1}}{NS}</extra>", {"extra": {"a": 1}}),  # JSON, as llama.cpp writes
    (f"{NS}<tags>\n{NS}<item>x{NS}</item>\n{NS}</tags>", {"tags": ["x"]}),
])
def test_values_as_the_schema_takes_them(value, arguments):
    text = f'{NS}<tool_call>\n{NS}<invoke name="plan_trip">{value}{NS}</invoke>\n{NS}</tool_call>'
    found, end = minimax3_section(text, types())
    assert json.loads(found[0].arguments) == arguments and end == len(text)


@pytest.mark.parametrize("size", [1, 2, 5, 13, 1000])
def test_reasoning_content_and_calls_split_as_they_stream(size):
    plan = tool_plan(MINIMAX3_TEMPLATE, TOOLS, "auto", True)
    calls = rendered_calls([("plan_trip", ARGS), ("now", {})])
    answer = "<mm:think>Where to?</mm:think>\nLet me plan." + calls
    parser = output_parser(MINIMAX3_TEMPLATE, plan, "]~b]ai\n", True)
    content, reasoning, deltas = feed_in_chunks(parser, answer, size)
    assert (content, reasoning) == ("Let me plan.", "Where to?")
    assert [json.loads(c.arguments) for c in parser.tool_calls] == [ARGS, {}]
    assert [streamed_arguments(deltas, i) for i in range(2)] == \
        [c.arguments for c in parser.tool_calls]


@pytest.mark.parametrize("size", [1, 3, 100])
@pytest.mark.parametrize("answer,content", [
    ("</mm:think>Hello.", "Hello."),  # the bare close of an answer that did not reason
    ("\n</mm:think>\nHello.", "Hello."),
    ("</mm:thin", "</mm:thin"),  # a piece of it, and nothing after: text
    ("Hello </mm:think> there.", "Hello </mm:think> there."),  # not at the start: text
])
def test_an_answer_without_reasoning_drops_its_bare_close(size, answer, content):
    parser = output_parser(MINIMAX3_TEMPLATE, None, "]~b]ai\n", True)
    assert feed_in_chunks(parser, answer, size)[:2] == (content, "")


def test_the_prompt_may_open_the_reasoning_and_enable_thinking_switches_it():
    ask = [{"role": "user", "content": "hi"}]
    assert render_chat(MINIMAX3_TEMPLATE, ask).endswith("]~b]ai\n")  # (the model decides)
    assert render_chat(MINIMAX3_TEMPLATE, ask, enable_thinking=True).endswith("<mm:think>")
    assert render_chat(MINIMAX3_TEMPLATE, ask, enable_thinking=False).endswith("</mm:think>")
    assert render_chat(MINIMAX3_TEMPLATE, ask, enable_thinking=False,
                       thinking_mode="adaptive").endswith("]~b]ai\n")  # (the request's own)
    prompt = render_chat(MINIMAX3_TEMPLATE, ask, enable_thinking=True)
    parser = output_parser(MINIMAX3_TEMPLATE, None, prompt, True)
    assert feed_in_chunks(parser, "Hmm.</mm:think>Hi!", 4)[:2] == ("Hi!", "Hmm.")
