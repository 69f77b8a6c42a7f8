"""Tool calls in Gemma 4's form (`<|tool_call>call:NAME{key:value}<tool_call|>`, bare keys,
strings between `<|"|>` marks), read back as they stream: the name once its "{" comes, the
arguments as JSON text that only grows; tool results merged into the model's turn for an
older Gemma 4 template."""

from __future__ import annotations

import json

import pytest
from callstream import feed_in_chunks, growing_prefixes, single, streamed_arguments

from lsd_local.chat.gemmacalls import gemma_block, template_messages
from lsd_local.chat.output import OutputParser
from lsd_local.chat.thinking import GEMMA_THINK, thinking_of
from lsd_local.chat.tools import detect_format, tool_plan

Q = '<|"|>'
TOOLS = [{"type": "function", "function": {"name": "plan_trip", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"]}}}]
TEMPLATE = "{{- '<|tool_call>call:' + name }}{{ '<|channel>thought\\n<channel|>' }}"
CALL = (f"<|tool_call>call:plan_trip{{budget:{{eur:-12.5,hard:false}},city:{Q}Rome, \"Lazio\""
        f"\n{{x}}{Q},days:3,note:null,stops:[{Q}a{Q},[1,2],{{}}]}}<tool_call|>")
ARGUMENTS = {"budget": {"eur": -12.5, "hard": False}, "city": 'Rome, "Lazio"\n{x}', "days": 3,
             "note": None, "stops": ["a", [1, 2], {}]}


def test_the_format_and_its_thinking_are_found_in_the_template():
    assert detect_format(TEMPLATE).name == "gemma"
    assert detect_format("{{ '<tool_call>' }}").name == "hermes"
    assert thinking_of(TEMPLATE) is GEMMA_THINK


def test_a_whole_call_reads_back_as_json():
    scan, end = gemma_block(CALL)
    assert scan.name == "plan_trip" and scan.complete and end == len(CALL)
    assert json.loads(scan.arguments) == ARGUMENTS


def test_every_prefix_gives_arguments_that_only_grow():
    seen, named_at = growing_prefixes(single(gemma_block), CALL)
    assert named_at == CALL.index("{") + 1  # (the name once its "{" comes)
    assert json.loads(seen[0]) == ARGUMENTS


@pytest.mark.parametrize("call,name,arguments", [
    ("<|tool_call>call:now{}<tool_call|>", "now", {}),
    ("<|tool_call>call:now<tool_call|>", "now", {}),  # no braces at all
    ('<|tool_call>call:f{ "a" : "x" , b: 2 }<tool_call|>', "f", {"a": "x", "b": 2}),  # JSON's
    (f"<|tool_call>call:f{{{Q}k{Q}:true}}<tool_call|>", "f", {"k": True}),  # a quoted key
])
def test_calls_written_otherwise_read_back(call, name, arguments):
    scan, end = gemma_block(call)
    assert (scan.name, json.loads(scan.arguments), end) == (name, arguments, len(call))


@pytest.mark.parametrize("call,arguments", [
    ("<|tool_call>call:f{a:1 b:2}<tool_call|>", {"a": 1}),  # no comma
    ("<|tool_call>call:f{a:1,b:two}<tool_call|>", {"a": 1}),  # a word that is no value
])
def test_a_call_not_in_the_notation_ends_where_it_stops_being_so(call, arguments):
    scan, end = gemma_block(call)
    assert json.loads(scan.arguments) == arguments and end is not None and end < len(call)


def test_streamed_calls_and_text_around_them():
    plan = tool_plan(TEMPLATE, TOOLS, "auto", True)
    parser = OutputParser(plan.fmt, False, True)
    second = CALL.replace("days:3", "days:5")
    content, _, deltas = feed_in_chunks(parser, "Let me look.\n" + CALL + second, 7)
    assert content == "Let me look.\n"
    calls = parser.tool_calls
    assert [json.loads(c.arguments)["days"] for c in calls] == [3, 5]
    assert [streamed_arguments(deltas, i) for i in range(2)] == [c.arguments for c in calls]


def test_tool_results_join_the_model_turn_for_an_older_template():
    calls = [{"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
             {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{}"}}]
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": calls},
                {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 18}'},
                {"role": "tool", "tool_call_id": "c2", "content": "sunny"},
                {"role": "assistant", "content": "18 C and sunny."},
                {"role": "user", "content": "thanks"}]
    merged = template_messages(messages)
    assert [m["role"] for m in merged] == ["user", "assistant", "user"]
    assert merged[1]["tool_responses"] == [{"name": "a", "response": {"temp": 18}},
                                           {"name": "b", "response": "sunny"}]
    assert merged[1]["content"] == "18 C and sunny." and merged[1]["tool_calls"] == calls
    assert template_messages(messages[:1]) == messages[:1]


def test_numbers_keep_their_text_and_one_json_cannot_read_is_no_value():
    scan, _ = gemma_block("<|tool_call>call:f{a:1e999,b:-0.50}<tool_call|>")
    assert scan.arguments == '{"a": 1e999, "b": -0.50}'  # (never a float's Infinity)
    scan, end = gemma_block("<|tool_call>call:f{a:1,zip:08540}<tool_call|>")
    assert json.loads(scan.arguments) == {"a": 1} and end < len("<|tool_call>call:f{a:1,zip")


def test_results_are_named_by_the_call_they_answer_and_no_text_is_lost():
    calls = [{"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}},
             {"id": "c1", "type": "function", "function": {"name": "g", "arguments": "{}"}}]
    messages = [{"role": "assistant", "content": "Let me look.", "tool_calls": calls},
                {"role": "tool", "tool_call_id": "c1", "content": "G"},
                {"role": "tool", "tool_call_id": "c0", "content": "F"},
                {"role": "assistant", "content": "F and G."}]
    merged = template_messages(messages)
    assert merged[0]["tool_responses"] == [{"name": "g", "response": "G"},
                                           {"name": "f", "response": "F"}]
    assert merged[0]["content"] == "Let me look." and merged[1]["content"] == "F and G."
