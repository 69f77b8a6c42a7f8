"""Kimi K3's answers (sections between `<|open|>`, `<|close|>` and `<|sep|>`): reasoning in
the think section, content in the response section without its markers, calls in the tools
section read back typed as they stream, and its thinking switch."""

from __future__ import annotations

import json

import pytest
from callstream import feed_in_chunks, growing_prefixes, streamed_arguments
from tinymodels import KIMI3_TEMPLATE

from lsd_local.chat.harmonyoutput import output_parser
from lsd_local.chat.kimi3calls import (
    ARGUMENT_CLOSE,
    CALL_CLOSE,
    JSON_ARGUMENTS,
    JSON_CLOSE,
    MESSAGE_CLOSE,
    RESPONSE_CLOSE,
    RESPONSE_OPEN,
    SEP,
    THINK_CLOSE,
    TOOLS_CLOSE,
    TOOLS_OPEN,
    kimi3_section,
)
from lsd_local.chat.templates import render_chat
from lsd_local.chat.thinking import thinking_of
from lsd_local.chat.tools import detect_format, tool_plan

TOOLS = [{"type": "function", "function": {"name": "plan_trip", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "stops": {"type": "array", "items": {"type": "string"}},
        'odd "key" & more': {"type": "string"},
        "note": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
    "required": ["city"]}}},
         {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
ARGS = {"city": "Oslo <b>\n & co", "days": 3, "stops": ["a", "b"], 'odd "key" & more': "v",
        "note": "42"}
ASK = [{"role": "user", "content": "plan"}]


def rendered(calls: list[tuple[str, dict]], content: str = "") -> str:
    """The tools section the tests' template writes for `calls` (name, arguments)."""
    message = {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"c{i}", "type": "function",
         "function": {"name": name, "arguments": json.dumps(arguments)}}
        for i, (name, arguments) in enumerate(calls)]}
    text = render_chat(KIMI3_TEMPLATE, [*ASK, message], tools=TOOLS, add_generation_prompt=False)
    return text[text.rindex(TOOLS_OPEN):text.rindex(TOOLS_CLOSE) + len(TOOLS_CLOSE)]


def types() -> dict:
    return tool_plan(KIMI3_TEMPLATE, TOOLS, "auto", True).fmt.types()


def test_the_format_and_its_think_section_are_found():
    assert detect_format(KIMI3_TEMPLATE).name == "kimi3"
    assert thinking_of(KIMI3_TEMPLATE).open == "<|open|>think<|sep|>"
    assert detect_format(KIMI3_TEMPLATE.replace("<|end_of_msg|>", "")).name == "generic"


def test_calls_read_back_as_written_and_only_grow_over_every_prefix():
    text = rendered([("plan_trip", ARGS), ("now", {})])
    assert 'key="odd &quot;key&quot; &amp; more"' in text  # (escaped in the attribute)
    seen, named_at = growing_prefixes(lambda t: kimi3_section(t, types()), text)
    assert [json.loads(s) for s in seen] == [ARGS, {}]
    assert named_at == text.index(SEP, text.index("plan_trip")) + len(SEP)


@pytest.mark.parametrize("body,arguments", [
    (f'{JSON_ARGUMENTS}{{"city": "A{CALL_CLOSE}", "days": 2}}{JSON_CLOSE}',
     {"city": f"A{CALL_CLOSE}", "days": 2}),  # (the template's form for JSON-text arguments)
    (f'<|open|>argument key="extra" type="string"<|sep|>7{ARGUMENT_CLOSE}', {"extra": "7"}),
    (f'<|open|>argument key="extra" type="number"<|sep|>7{ARGUMENT_CLOSE}', {"extra": 7}),
    (f'<|open|>argument key="note" type="number"<|sep|>7{ARGUMENT_CLOSE}', {"note": 7}),
])
def test_arguments_as_a_json_section_or_typed_by_their_attribute(body, arguments):
    call = f'<|open|>call tool="plan_trip" index="1"{SEP}{body}{CALL_CLOSE}'
    text = f"{TOOLS_OPEN}{call}{TOOLS_CLOSE}"
    seen, _ = growing_prefixes(lambda t: kimi3_section(t, types()), text)
    assert [json.loads(s) for s in seen] == [arguments]


@pytest.mark.parametrize("text,calls", [
    (f"{TOOLS_OPEN}No call here.", []),
    (f'{TOOLS_OPEN}<|open|>call tool="now" index="1"{SEP}oops{CALL_CLOSE}', [{}]),
    (f'{TOOLS_OPEN}<|open|>call tool="now" index="1"{SEP}{JSON_ARGUMENTS}[1,]{JSON_CLOSE}', [{}]),
])
def test_text_that_is_not_the_form_ends_the_call_and_the_section(text, calls):
    found, end = kimi3_section(text, types())
    assert [json.loads(c.arguments) for c in found] == calls and end is not None
    seen = ""
    for n in range(len(text) + 1):  # (what a call's arguments were never shrinks)
        found, _ = kimi3_section(text[:n], types())
        if found:
            assert found[0].arguments.startswith(seen), (n, found[0].arguments, seen)
            seen = found[0].arguments


@pytest.mark.parametrize("size", [1, 2, 5, 17, 1000])
def test_reasoning_response_and_calls_split_and_the_markers_go(size):
    """The prompt opened the think section: its text is reasoning, the response section's
    text content (its markers, the message's close and the end of message are neither),
    the calls stream as OpenAI streams them."""
    plan = tool_plan(KIMI3_TEMPLATE, TOOLS, "auto", True)
    prompt = render_chat(KIMI3_TEMPLATE, ASK, tools=TOOLS, thinking=True)
    assert thinking_of(KIMI3_TEMPLATE).opened_by(prompt)
    answer = (f"Where to?{THINK_CLOSE}{RESPONSE_OPEN}Let me plan.{RESPONSE_CLOSE}"
              + rendered([("plan_trip", ARGS), ("now", {})]) + MESSAGE_CLOSE + "<|end_of_msg|>")
    parser = output_parser(KIMI3_TEMPLATE, plan, prompt, True)
    content, reasoning, deltas = feed_in_chunks(parser, answer, size)
    assert (content, reasoning) == ("Let me plan.", "Where to?")
    assert [json.loads(c.arguments) for c in parser.tool_calls] == [ARGS, {}]
    assert [streamed_arguments(deltas, i) for i in range(2)] == \
        [c.arguments for c in parser.tool_calls]


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
def test_a_response_opened_inside_the_think_section_ends_the_reasoning(size):
    """The model may open its response without closing its think section: the reasoning
    ends there, as llama.cpp reads it (a think close that comes after is text)."""
    prompt = render_chat(KIMI3_TEMPLATE, ASK, thinking=True)
    parser = output_parser(KIMI3_TEMPLATE, None, prompt, True)
    answer = f"Hmm.{RESPONSE_OPEN}Hi!{RESPONSE_CLOSE}{MESSAGE_CLOSE}"
    assert feed_in_chunks(parser, answer, size)[:2] == ("Hi!", "Hmm.")
    parser = output_parser(KIMI3_TEMPLATE, None, prompt, True)
    answer = f"Hmm.{THINK_CLOSE}{RESPONSE_OPEN}Hi!{RESPONSE_CLOSE}"  # (closed: as ever)
    assert feed_in_chunks(parser, answer, size)[:2] == ("Hi!", "Hmm.")
    # reasoning=False: the reasoning is content as written, no close the model never wrote
    # (the reader used to insert one, which then showed)
    parser = output_parser(KIMI3_TEMPLATE, None, prompt, False)
    answer = f"Hmm.{RESPONSE_OPEN}Hi!{RESPONSE_CLOSE}{MESSAGE_CLOSE}"
    assert feed_in_chunks(parser, answer, size)[:2] == ("Hmm.Hi!", "")


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_without_tools_or_thinking_the_answer_is_the_response_text(size):
    prompt = render_chat(KIMI3_TEMPLATE, ASK)  # (thinking off: the response is open)
    assert prompt.endswith(RESPONSE_OPEN)
    parser = output_parser(KIMI3_TEMPLATE, None, prompt, True)
    answer = f"Hello <|close|> there, <|clo{RESPONSE_CLOSE}{MESSAGE_CLOSE}"
    assert feed_in_chunks(parser, answer, size)[:2] == ("Hello <|close|> there, <|clo", "")
    assert "<|close|>" in parser.markers  # (shown as text where it is a control token)


def test_content_keeps_the_origin_of_each_character():
    """Dropping the markers keeps which tokens (draft or target) each character came from."""
    prompt = render_chat(KIMI3_TEMPLATE, ASK)
    parser = output_parser(KIMI3_TEMPLATE, None, prompt, True)
    parts = parser.feed([("Hi", "draft"), (f" yo{RESPONSE_CLOSE[:5]}", "target"),
                         (f"{RESPONSE_CLOSE[5:]}!", "draft")], True)
    assert parts.content == [("Hi", "draft"), (" yo", "target"), ("!", "draft")]


def test_enable_thinking_is_given_as_its_thinking_switch():
    on = render_chat(KIMI3_TEMPLATE, ASK, enable_thinking=True)
    assert on.endswith("<|open|>think<|sep|>")
    assert render_chat(KIMI3_TEMPLATE, ASK, enable_thinking=False).endswith(RESPONSE_OPEN)
    assert render_chat(KIMI3_TEMPLATE, ASK, enable_thinking=False,
                       thinking=True).endswith("<|open|>think<|sep|>")  # (the request's own)
