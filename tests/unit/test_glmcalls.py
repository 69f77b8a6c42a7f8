"""Tool calls in GLM-4.5's form (the name after the opener, then key and value tags), read
back as they stream: the name once its line ends, the arguments as JSON text that only
grows, typed by the tools' schemas."""

from __future__ import annotations

import json

import pytest
from callstream import feed_in_chunks, growing_prefixes, single, streamed_arguments

from lsd_local.chat.glmcalls import glm_block
from lsd_local.chat.output import OutputParser
from lsd_local.chat.tools import detect_format, tool_plan

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "metric": {"type": "boolean"}},
    "required": ["city"]}}}]
TEMPLATE = "{{ '<tool_call>' + name }}{{ '<arg_key>' }}{{ '<arg_value>' }}"
CALL = ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>42 Rue </p>\n<pre>"
        "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
        "<arg_key>metric</arg_key>\n<arg_value>true</arg_value>\n</tool_call>")


def plan():
    return tool_plan(TEMPLATE, TOOLS, "auto", True)


def test_the_format_is_found_in_the_template_before_hermes():
    assert detect_format(TEMPLATE).name == "glm"
    assert detect_format("{{ '<tool_call>' }}").name == "hermes"


def test_a_whole_call_reads_back_typed_by_the_schema():
    scan, end = glm_block(CALL, plan().fmt.types())
    assert scan.name == "get_weather" and scan.complete and end == len(CALL)
    assert json.loads(scan.arguments) == {"city": "42 Rue </p>\n<pre>", "days": 3,
                                          "metric": True}


def test_every_prefix_gives_arguments_that_only_grow():
    types = plan().fmt.types()
    seen, named_at = growing_prefixes(single(lambda text: glm_block(text, types)), CALL)
    assert named_at == len("<tool_call>get_weather\n")  # (the name once its line ends)
    assert json.loads(seen[0])["days"] == 3


@pytest.mark.parametrize("call,arguments", [
    ("<tool_call>get_weather</tool_call>", {}),  # no arguments, on one line
    ("<tool_call> get_weather <arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
     {"city": "Oslo"}),  # no line breaks at all
])
def test_calls_written_without_the_line_breaks_read_back(call, arguments):
    scan, end = glm_block(call, plan().fmt.types())
    assert (scan.name, json.loads(scan.arguments), end) == ("get_weather", arguments,
                                                            len(call))


def test_streamed_calls_and_text_around_them():
    parser = OutputParser(plan().fmt, False, True)
    text = "Let me look.\n" + CALL + "\n" + CALL.replace(">3<", ">5<")
    content, _, deltas = feed_in_chunks(parser, text, 7)  # as rounds release it
    assert content == "Let me look.\n"
    calls = parser.tool_calls
    assert [c.name for c in calls] == ["get_weather", "get_weather"]
    assert [json.loads(c.arguments)["days"] for c in calls] == [3, 5]
    assert [streamed_arguments(deltas, i) for i in range(2)] == [c.arguments for c in calls]


@pytest.mark.parametrize("text,arguments,content", [
    # text after the arguments ends the call there (no grammar ran: the answer left the form)
    ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\nDone.",
     {"city": "Oslo"}, "Done."),
    # a line break before the name
    ("<tool_call>\nget_weather\n<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>",
     {"days": 2}, ""),
])
def test_a_call_reads_back_whole_whatever_ends_it(text, arguments, content):
    parser = OutputParser(plan().fmt, False, True)
    parts = parser.feed([(text, None)], True)
    assert [(c.name, json.loads(c.arguments)) for c in parser.tool_calls] == [
        ("get_weather", arguments)]
    assert "".join(t for t, _ in parts.content) == content


def test_string_values_are_raw_whatever_the_schema_says_they_are():
    """A schema that takes strings without saying type "string" (an enum of strings, a type
    list with "string"): GLM's and Qwen3-Coder's templates write such a value raw, so the
    grammar asks for raw text, and it reads back as text."""
    from lsd_local.chat.tools import parse_tools
    from lsd_local.chat.xmlcalls import parameter_types, string_value

    assert string_value({"enum": ["celsius", "kelvin"]}) == '("celsius" | "kelvin")'
    assert string_value({"type": ["string", "null"]}, "glm-text") == "glm-text"
    assert string_value({"type": "integer"}) is None
    assert string_value({"enum": [1, "a"]}) is None  # (not only strings: its JSON)
    tools = parse_tools([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"unit": {"enum": ["1", "2"]}}}}}])
    assert parameter_types(tools) == {("f", "unit"): "string"}
    scan, _ = glm_block("<tool_call>f\n<arg_key>unit</arg_key><arg_value>1</arg_value>"
                        "</tool_call>", parameter_types(tools))
    assert json.loads(scan.arguments) == {"unit": "1"}


HY3_TEMPLATE = ("{%- set HYTK = ':opensource' %}{{ '<｜hy_Assistant{}｜>'.format(HYTK) }}"
                "{{ '<tool_calls{}>'.format(HYTK) }}")
HY3_CALL = CALL.replace("get_weather\n", "get_weather<tool_sep>\n")
for _tag in ("tool_call", "arg_key", "arg_value", "tool_sep"):
    HY3_CALL = HY3_CALL.replace(f"<{_tag}>", f"<{_tag}:opensource>").replace(
        f"</{_tag}>", f"</{_tag}:opensource>")
HY3_SECTION = f"<tool_calls:opensource>\n{HY3_CALL}\n{HY3_CALL.replace('>3<', '>5<')}\n" \
              "</tool_calls:opensource>"


def test_hy3_calls_stream_from_its_block_typed_by_the_schema():
    """Tencent Hy3: GLM's tags marked `:opensource` (its template builds them, so it is
    found by its assistant token and its mark), the name ended by `<tool_sep:opensource>`,
    the calls in a `<tool_calls:opensource>` block; its reasoning in `<think:opensource>`.
    Read the same at every chunk size."""
    from lsd_local.chat.glmcalls import hy3_section
    from lsd_local.chat.thinking import HY3_THINK, thinking_of

    assert detect_format(HY3_TEMPLATE).name == "hy3" and thinking_of(HY3_TEMPLATE) is HY3_THINK
    hy3 = tool_plan(HY3_TEMPLATE, TOOLS, "auto", True)
    calls, end = hy3_section(HY3_SECTION + "Done.", hy3.fmt.types())
    assert end == len(HY3_SECTION) and [json.loads(c.arguments) for c in calls] == [
        {"city": "42 Rue </p>\n<pre>", "days": d, "metric": True} for d in (3, 5)]
    for n in range(len(HY3_SECTION)):  # (open until its closer is whole)
        assert hy3_section(HY3_SECTION[:n], hy3.fmt.types())[1] is None
    text = "<think:opensource>Two days.</think:opensource>Looking." + HY3_SECTION + " Done."
    for size in (1, 2, 5, 11, 1000):
        parser = OutputParser(hy3.fmt, False, True, think=HY3_THINK)
        content, reasoning, deltas = feed_in_chunks(parser, text, size)
        assert (reasoning, content) == ("Two days.", "Looking.Done.")
        assert [json.loads(c.arguments)["days"] for c in parser.tool_calls] == [3, 5]
        assert [streamed_arguments(deltas, i) for i in range(2)] == [
            c.arguments for c in parser.tool_calls]


@pytest.mark.parametrize("kwargs,effort", [
    ({}, None), ({"enable_thinking": True}, "high"), ({"enable_thinking": False}, "no_think"),
    ({"reasoning_effort": "medium"}, "high"), ({"reasoning_effort": "minimal"}, "low"),
    ({"reasoning_effort": "none", "enable_thinking": True}, "no_think"),
    ({"reasoning_effort": "bogus"}, "bogus")])  # (left for its template to refuse)
def test_hy3_reads_openai_s_efforts_and_the_thinking_switch_as_its_own(kwargs, effort):
    from lsd_local.chat.turns import thinking_switch

    assert thinking_switch(HY3_TEMPLATE, kwargs).get("reasoning_effort") == effort
    assert thinking_switch(TEMPLATE, kwargs) == kwargs  # (GLM's: untouched)


LING3 = ("{{- '<role>SYSTEM</role>' + '<tool_call>' + '<arg_key>' + '<arg_value>' }}"
         "{{- '<|role_end|><role>ASSISTANT</role>\\n<think>' }}")


@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_ling3_reasoning_ends_at_a_call_as_well_as_at_its_close(size):
    """Ling 3's prompt opens <think>, and its reasoning may run into a call without
    `</think>` (llama.cpp's reader ends it at `<tool_call>`): the reasoning ends there and
    the call is read; a `</think>` first ends it as ever. Another family's reasoning keeps
    a `<tool_call>` it writes (it is no call)."""
    from lsd_local.chat.thinking import LING3_THINK, THINK, thinking_of

    assert thinking_of(LING3) is LING3_THINK and thinking_of(TEMPLATE) is THINK
    ling = tool_plan(LING3, TOOLS, "auto", True)
    for text, reasoning in ((f"Need it.\n{CALL}", "Need it.\n"),
                            (f"Need it.</think>\n{CALL}", "Need it.")):
        parser = OutputParser(ling.fmt, True, True, think=LING3_THINK)
        content, got, _ = feed_in_chunks(parser, text, size)
        assert (got, content) == (reasoning, "")
        assert [json.loads(c.arguments)["days"] for c in parser.tool_calls] == [3]
    parser = OutputParser(plan().fmt, True, True)
    assert feed_in_chunks(parser, f"Need it.\n{CALL}", size)[1] == f"Need it.\n{CALL}"
    assert parser.tool_calls == []
