"""Tool calls in MiniMax-M2's form (a block of invokes, each argument a named parameter:
raw text for a string, JSON for another type), read back as they stream."""

from __future__ import annotations

import json

import pytest
from callstream import feed_in_chunks, growing_prefixes, streamed_arguments

from lsd_local.chat.minimaxcalls import minimax_section
from lsd_local.chat.output import OutputParser
from lsd_local.chat.tools import detect_format, tool_plan

TOOLS = [{"type": "function", "function": {"name": "plan_trip", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "stops": {"type": "array"}}}}},
         {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
TEMPLATE = "{{ '<minimax:tool_call>' }}<invoke name=...>"
CALLS = ('<minimax:tool_call>\n<invoke name="plan_trip"><parameter name="city">Rome </p>\n'
         '"x"</parameter>\n<parameter name="days">3</parameter>\n<parameter name="stops">'
         '["a", 2]</parameter>\n</invoke>\n<invoke name="now">\n</invoke>\n'
         "</minimax:tool_call>")


def types() -> dict:
    return tool_plan(TEMPLATE, TOOLS, "auto", True).fmt.types()


def test_the_format_is_found_and_every_prefix_gives_arguments_that_only_grow():
    assert detect_format(TEMPLATE).name == "minimax"
    seen, named_at = growing_prefixes(lambda text: minimax_section(text, types()), CALLS)
    assert json.loads(seen[0]) == {"city": 'Rome </p>\n"x"', "days": 3, "stops": ["a", 2]}
    assert seen[1] == "{}" and named_at == CALLS.index('">') + 2


@pytest.mark.parametrize("text,calls", [
    ("<minimax:tool_call>\nNo call here.", []),  # text that is no invoke ends the block
    ('<minimax:tool_call><invoke name="now">oops</invoke>', [{}]),  # text that is no parameter
])
def test_text_that_is_not_the_form_ends_the_block(text, calls):
    found, end = minimax_section(text, types())
    assert [json.loads(c.arguments) for c in found] == calls and end is not None


def test_streamed_calls_and_text_around_them():
    parser = OutputParser(tool_plan(TEMPLATE, TOOLS, "auto", True).fmt, False, True)
    content, _, deltas = feed_in_chunks(parser, "Let me plan.\n" + CALLS + "\nDone.", 6)
    calls = parser.tool_calls
    assert content == "Let me plan.\nDone." and [c.name for c in calls] == ["plan_trip", "now"]
    assert [streamed_arguments(deltas, i) for i in range(2)] == [c.arguments for c in calls]


def test_a_json_value_may_hold_the_closer_and_text_of_a_string_type_stays_text():
    tools = [{"type": "function", "function": {"name": "w", "parameters": {
        "type": "object", "properties": {"o": {"type": "object"},
                                         "s": {"type": ["string", "null"]}}}}}]
    plan = tool_plan(TEMPLATE, tools, "auto", True)
    call = ('<minimax:tool_call>\n<invoke name="w">\n<parameter name="o">{"html": '
            '"</parameter>"}</parameter>\n<parameter name="s">3</parameter>\n</invoke>\n'
            "</minimax:tool_call>")
    seen, _ = growing_prefixes(lambda text: minimax_section(text, plan.fmt.types()), call)
    assert json.loads(seen[0]) == {"o": {"html": "</parameter>"}, "s": "3"}


CPM_TEMPLATE = "{{ '<function name=\"' }}{{ '<param name=\"' }}"
CPM_CALL = ('<function name="plan_trip"><param name="city"><![CDATA[Rome </param>\n]]]>'
            '</param><param name="days">3</param><param name="stops">["a", 2]</param>'
            "</function>")


def test_minicpm_calls_stand_alone_and_read_cdata_whole():
    """MiniCPM5's calls: one per block, other tag names, a string in CDATA read whole (its
    closing tag and brackets too) without the CDATA markers."""
    from lsd_local.chat.minimaxcalls import MINICPM

    plan = tool_plan(CPM_TEMPLATE, TOOLS, "auto", True)
    assert plan.fmt.name == "minicpm" and detect_format(TEMPLATE).name == "minimax"
    kinds = plan.fmt.types()
    seen, _ = growing_prefixes(lambda text: minimax_section(text, kinds, MINICPM), CPM_CALL)
    assert json.loads(seen[0]) == {"city": "Rome </param>\n]", "days": 3, "stops": ["a", 2]}
    parser = OutputParser(plan.fmt, False, True)
    text = "Sure. " + CPM_CALL + "\n" + CPM_CALL.replace(">3<", ">4<") + " Done."
    content, _, deltas = feed_in_chunks(parser, text, 5)
    assert content == "Sure. Done."
    assert [json.loads(c.arguments)["days"] for c in parser.tool_calls] == [3, 4]
    assert streamed_arguments(deltas, 1) == parser.tool_calls[1].arguments


def test_a_value_nested_past_the_stack_stays_text():
    from lsd_local.chat.xmlcalls import typed_value

    deep = "[" * 100_000 + "]" * 100_000
    assert typed_value(deep, "array") == deep  # (not a RecursionError out of the reader)
    assert typed_value("True", "boolean") == "True"  # (not JSON: the grammar asks for true)


def test_minimax_values_never_read_cdata():
    """CDATA is MiniCPM5's: in MiniMax-M2's form it is text like any other."""
    block = ('<minimax:tool_call>\n<invoke name="plan_trip"><parameter name="city">'
             "<![CDATA[x]]></parameter>\n</invoke>\n</minimax:tool_call>")
    calls, end = minimax_section(block, types())
    assert end == len(block) and json.loads(calls[0].arguments) == {"city": "<![CDATA[x]]>"}


def test_dsml_blocks_read_back_and_the_version_is_found():
    """DeepSeek-V3.2's and V4's DSML calls: MiniMax's form in other tags, each parameter's
    tag saying whether it is a string (the key is the name's text, not the attribute)."""
    from lsd_local.chat.minimaxcalls import DSML_V4, DSML_V32

    v32 = "{{ '<｜DSML｜function_calls>' }} ｜DSML｜"
    v4 = "{{ '<｜DSML｜tool_calls>' }} ｜DSML｜"
    assert (detect_format(v32).name, detect_format(v4).variant) == ("dsml", "v4")
    for template, tags in ((v32, DSML_V32), (v4, DSML_V4)):
        block = CALLS.replace("<minimax:tool_call>", tags.open).replace(
            "</minimax:tool_call>", tags.close).replace("<invoke name=", tags.invoke[:-1])
        block = block.replace("</invoke>", tags.invoke_close).replace(
            "</parameter>", tags.parameter_close)
        block = block.replace('<parameter name="city">', tags.parameter + 'city" string="true">')
        block = block.replace('<parameter name="days">', tags.parameter + 'days" string="false">')
        block = block.replace('<parameter name="stops">',
                              tags.parameter + 'stops" string="false">')
        kinds = tool_plan(template, TOOLS, "auto", True).fmt.types()
        seen, _ = growing_prefixes(
            lambda text, t=tags, k=kinds: minimax_section(text, k, t), block)
        assert json.loads(seen[0]) == {"city": 'Rome </p>\n"x"', "days": 3, "stops": ["a", 2]}
        parser = OutputParser(tool_plan(template, TOOLS, "auto", True).fmt, False, True)
        content, _, _ = feed_in_chunks(parser, "Sure.\n\n" + block, 7)
        assert content.strip() == "Sure." and [c.name for c in parser.tool_calls] == [
            "plan_trip", "now"]
