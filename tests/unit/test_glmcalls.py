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
