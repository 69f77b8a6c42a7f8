"""gpt-oss's harmony format read back as it streams: every way of cutting an answer into
pieces gives the same reasoning, content and calls, and the streamed call pieces add up to
the calls."""

from __future__ import annotations

import json

import pytest

from lsd_local.chat.harmony import is_harmony, read_header, template_messages
from lsd_local.chat.harmonyoutput import HarmonyParser, opened_header, output_parser
from lsd_local.chat.output import OutputParser
from lsd_local.chat.tools import detect_format, tool_plan

NAMES = ("get_weather", "now")
CALL = ('<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json'
        '<|message|>{"city": "Oslo", "note": "a <b> c"}')


def read(text: str, cuts: list[int], **kw) -> tuple[str, str, list, list]:
    """(content, reasoning, calls as (name, arguments), streamed (index, id, name, piece))
    of `text` fed in pieces cut at `cuts`."""
    parser = HarmonyParser(kw.pop("names", NAMES), **kw)
    content, reasoning, pieces = "", "", []
    bounds = [0, *cuts, len(text)]
    for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        parts = parser.feed([(text[a:b], "target")], final=i == len(bounds) - 2)
        content += "".join(t for t, _ in parts.content)
        reasoning += "".join(t for t, _ in parts.reasoning)
        pieces += [(d.index, d.id, d.name, d.arguments) for d in parts.tool_calls]
    return content, reasoning, [(c.name, c.arguments) for c in parser.tool_calls], pieces


def every_split(text: str, **kw) -> list[tuple]:
    """read() at one cut anywhere and at every character."""
    runs = [read(text, [cut], **kw) for cut in range(1, len(text))]
    return runs + [read(text, list(range(1, len(text))), **kw)]


CASES = [
    # (answer text, content, reasoning, calls)
    ("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
     "<|message|>It is 18 C.", "It is 18 C.", "Think.", []),
    ("<|channel|>analysis<|message|>Think.<|end|>" + CALL, "", "Think.",
     [("get_weather", '{"city": "Oslo", "note": "a <b> c"}')]),
    (' to=functions.now<|channel|>commentary json<|message|>{ }', "", "", [("now", "{ }")]),
    ("<|channel|>commentary<|message|>Let me check.<|end|>" + CALL, "Let me check.", "",
     [("get_weather", '{"city": "Oslo", "note": "a <b> c"}')]),
    ("Just text, no header.", "Just text, no header.", "", []),
    # <|end|> shown as nothing (a file where it is a control token): <|start|> ends a body
    ("<|channel|>analysis<|message|>A<|start|>assistant<|channel|>final<|message|>B", "B",
     "A", []),
    ("<|channel|>commentary to=functions.now<|message|>", "", "", [("now", "{}")]),
    # text before a header, and a header cut off by the end (max_tokens): content
    ("Hi <|start|>assistant<|channel|>final<|message|>A", "Hi A", "", []),
    ("<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant", "<|start|>assistant",
     "Hm.", []),
    ("<|start|>x\ny z", "<|start|>x\ny z", "", []),  # (no header holds a line break)
    # a string argument may hold the markers: the call ends with its JSON
    ('<|channel|>commentary to=functions.now<|message|>{"a": "x<|end|>y<|start|>z"}', "", "",
     [("now", '{"a": "x<|end|>y<|start|>z"}')]),
    # the stray header gpt-oss writes before a channel: the last channel counts
    ("<|channel|>commentary to=assistant<|channel|>analysis<|message|>I think.<|end|>"
     "<|start|>assistant<|channel|>final<|message|>Hi", "Hi", "I think.", []),
]


@pytest.mark.parametrize("text,content,reasoning,calls", CASES)
def test_every_split_reads_the_same(text, content, reasoning, calls):
    for got_content, got_reasoning, got_calls, pieces in every_split(text):
        assert (got_content, got_reasoning, got_calls) == (content, reasoning, calls)
        streamed: dict = {}
        for index, call_id, name, piece in pieces:
            if name is not None:
                streamed[index] = [call_id, name, ""]
            streamed[index][2] += piece
        assert [(n, a) for _, n, a in streamed.values()] == calls
        for _, arguments in got_calls:
            json.loads(arguments)  # whole JSON, however it was cut


def test_a_call_to_no_declared_tool_and_reasoning_off_are_content():
    text = "<|channel|>analysis<|message|>Hm.<|end|>" + CALL
    content, reasoning, calls, _ = read(text, [], names=())  # (no tools, or "none")
    assert calls == [] and reasoning == "Hm." and content.startswith('{"city": "Oslo"')
    content, reasoning, calls, _ = read(text, [], reasoning=False)
    assert reasoning == "" and content == "Hm." and calls[0][0] == "get_weather"


def test_reasoning_is_known_while_it_streams():
    parser = HarmonyParser(NAMES)
    assert not parser.in_reasoning
    parser.feed([("<|channel|>analysis<|message|>Th", None)])
    assert parser.in_reasoning
    parser.feed([("ink.<|end|><|start|>assistant<|channel|>final<|message|>A", None)])
    assert not parser.in_reasoning


def test_a_prompt_that_opens_the_analysis_goes_on_inside_it():
    prompt = "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|>"
    header = opened_header(prompt)
    assert read_header(header) == ("analysis", None)
    content, reasoning, _, _ = read("more.<|end|><|start|>assistant<|channel|>final<|message|>A",
                                    [3], opened=header)
    assert (content, reasoning) == ("A", "more.")
    assert opened_header(prompt + "x<|end|><|start|>assistant") is None
    assert opened_header("<|start|>assistant") is None


def test_headers_name_their_channel_and_recipient():
    assert read_header("<|channel|>commentary to=functions.f <|constrain|>json") == \
        ("commentary", "functions.f")
    assert read_header("<|start|>assistant to=functions.f<|channel|>analysis json") == \
        ("analysis", "functions.f")
    assert read_header("<|start|>assistant<|channel|>final") == ("final", None)


TEMPLATE = "{{ '<|start|>assistant<|channel|>final<|message|>' }}"


def test_a_harmony_template_gets_its_parser_and_format():
    tools = [{"type": "function", "function": {"name": "now", "parameters": {}}}]
    plan = tool_plan(TEMPLATE, tools, "auto", True)
    assert is_harmony(TEMPLATE) and detect_format(TEMPLATE).name == "harmony"
    assert plan.json_names == ()  # (no fenced-JSON calls: the format has its own)
    parser = output_parser(TEMPLATE, plan, "<|start|>assistant", True)
    assert isinstance(parser, HarmonyParser) and parser.names == ("now",)
    assert output_parser(TEMPLATE, tool_plan(TEMPLATE, tools, "none", True), "", True).names \
        == ()
    other = output_parser("{{ '<tool_call>' }}", plan, "", True)
    assert type(other) is OutputParser


def test_reasoning_content_reaches_the_template_as_thinking():
    call = {"id": "c", "type": "function", "function": {"name": "now", "arguments": "{}"}}
    messages = [{"role": "assistant", "content": "", "reasoning_content": "Hm."},
                {"role": "assistant", "content": "", "thinking": "kept"},
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "Checking.", "reasoning_content": "Hm.",
                 "tool_calls": [call]}]
    out = template_messages(messages)
    assert out[0]["thinking"] == "Hm." and out[1]["thinking"] == "kept"
    assert "thinking" not in out[2]
    # (gpt-oss's template refuses content and thinking beside calls: llama.cpp drops it)
    assert "content" not in out[3] and out[3]["thinking"] == "Hm." and out[3]["tool_calls"]


def test_a_budget_closes_the_analysis_where_a_call_may_follow():
    """No tools: into the final channel. tool_choice "auto": the next message is the
    model's to choose, once; "required": the call's header."""
    from lsd_local.chat import harmony

    assert HarmonyParser(()).reasoning_close == harmony.REASONING_CLOSE
    auto = HarmonyParser(NAMES)
    auto.feed([("<|channel|>analysis<|message|>a", None)])
    assert auto.reasoning_close == harmony.REASONING_CLOSE_OPEN
    auto.feed([("<|end|><|start|>assistant<|channel|>analysis<|message|>b", None)])
    assert auto.reasoning_close == harmony.REASONING_CLOSE
    assert HarmonyParser(NAMES, required=True).reasoning_close.endswith(
        "<|channel|>commentary to=functions.")


def test_no_draft_crosses_into_an_analysis_uncounted():
    """Under a budget, rounds draft nothing while another message may open (a header, a
    preamble), not in the final channel."""
    parser = HarmonyParser(NAMES)
    assert parser.may_open_reasoning
    parser.feed([("<|channel|>commentary<|message|>Let me", None)])
    assert parser.may_open_reasoning
    parser.feed([(" see.<|end|><|start|>assistant<|channel|>final<|message|>It", None)])
    assert not parser.may_open_reasoning


def test_a_call_the_prompt_opened_streams_its_name_first():
    parser = HarmonyParser(NAMES, opened="<|start|>assistant<|channel|>commentary to="
                                         "functions.now json")
    parts = parser.feed([('{"a"', None)])
    assert parts.tool_calls[0].name == "now" and parts.tool_calls[0].id
    assert not parser.opened_analysis
