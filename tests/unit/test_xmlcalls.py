"""Tool calls in XML form (Qwen3-Coder's), read back as they stream: the name once its tag
is closed, the arguments as JSON text that only grows, typed by the tools' schemas."""

from __future__ import annotations

import json

import pytest
from callstream import feed_in_chunks, growing_prefixes, single, streamed_arguments

from lsd_local.chat.output import OutputParser
from lsd_local.chat.tools import detect_format, tool_plan
from lsd_local.chat.xmlcalls import typed_value, xml_block

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "metric": {"type": "boolean"}},
    "required": ["city"]}}}]
TEMPLATE = "{{ '<tool_call>\\n<function=' }}{{ '<parameter=' }}"
CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\n42 Rue </p><pre>\n</pre>\n\n"
        "</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
        "</function>\n</tool_call>")


def plan():
    return tool_plan(TEMPLATE, TOOLS, "auto", True)


def test_the_format_is_found_in_the_template_before_hermes():
    assert detect_format(TEMPLATE).name == "xml"
    assert detect_format("{{ '<tool_call>' }}").name == "hermes"


def test_a_whole_call_reads_back_typed_by_the_schema():
    scan, end = xml_block(CALL, plan().fmt.types())
    assert scan.name == "get_weather" and scan.complete and end == len(CALL)
    assert json.loads(scan.arguments) == {"city": "42 Rue </p><pre>\n</pre>\n", "days": 3,
                                          "metric": True}
    assert typed_value("3", "string") == "3" and typed_value("oops", "integer") == "oops"


def test_every_prefix_gives_arguments_that_only_grow():
    types = plan().fmt.types()
    seen, _ = growing_prefixes(single(lambda text: xml_block(text, types)), CALL)
    assert json.loads(seen[0])["days"] == 3


def test_streamed_calls_and_text_around_them():
    parser = OutputParser(plan().fmt, False, True)
    text = "Let me look.\n" + CALL + "\n" + CALL.replace("3", "5")
    content, _, deltas = feed_in_chunks(parser, text, 7)  # as rounds release it
    assert content == "Let me look.\n"
    calls = parser.tool_calls
    assert [c.name for c in calls] == ["get_weather", "get_weather"]
    assert [json.loads(c.arguments)["days"] for c in calls] == [3, 5]
    assert [streamed_arguments(deltas, i) for i in range(2)] == [c.arguments for c in calls]


DS_CALLS = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
            '```json\n{"city": "Oslo", "days": 2}\n```<｜tool▁call▁end｜>\n'
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
            '```json\n{"city": "Rome"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')


# DeepSeek-V3.1's bare form: the name before the separator, no type and no fence
DS_V31_CALLS = DS_CALLS.replace("function<｜tool▁sep｜>get_weather\n```json\n",
                                "get_weather<｜tool▁sep｜>").replace("\n```<｜tool▁call▁end｜>",
                                                                  "<｜tool▁call▁end｜>")


@pytest.mark.parametrize("calls_text", [DS_CALLS, DS_V31_CALLS], ids=["v3", "v3.1"])
def test_deepseek_sections_read_back_every_call_as_it_streams(calls_text):
    from lsd_local.chat.deepseekcalls import deepseek_section

    assert detect_format("{{ '<｜tool▁calls▁begin｜>' }}").name == "deepseek"
    growing_prefixes(deepseek_section, calls_text)
    calls, end = deepseek_section(calls_text)
    assert end == len(calls_text) and [c.name for c in calls] == ["get_weather"] * 2
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Oslo", "days": 2},
                                                        {"city": "Rome"}]
    parser = OutputParser(tool_plan("{{ '<｜tool▁calls▁begin｜>' }}", TOOLS, "auto", True).fmt,
                          False, True)
    parts = parser.feed([("Sure. " + calls_text, None)], True)
    assert "".join(t for t, _ in parts.content) == "Sure. "
    assert [json.loads(c.arguments)["city"] for c in parser.tool_calls] == ["Oslo", "Rome"]



KIMI_CALLS = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
              '<|tool_call_argument_begin|>{"city": "Oslo", "days": 2}<|tool_call_end|>\n'
              "<|tool_call_begin|>functions.get_weather:11<|tool_call_argument_begin|>"
              '{"city": "Rome"}<|tool_call_end|><|tool_calls_section_end|>')
KIMI_TEMPLATE = "{{ '<|tool_calls_section_begin|><|tool_call_begin|>' }}"


def test_kimi_sections_read_back_every_call_by_the_name_in_its_id():
    from lsd_local.chat.deepseekcalls import KIMI, deepseek_section

    assert detect_format(KIMI_TEMPLATE).name == "kimi"
    assert detect_format("{{ '<|tool_calls_section_begin|>' }}").name != "kimi"

    def read(text):
        return deepseek_section(text, KIMI)
    _, named_at = growing_prefixes(read, KIMI_CALLS)
    assert KIMI_CALLS[:named_at].endswith("<|tool_call_argument_begin|>{")  # (whole ids)
    calls, end = read(KIMI_CALLS)
    assert end == len(KIMI_CALLS) and [c.name for c in calls] == ["get_weather"] * 2
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Oslo", "days": 2},
                                                        {"city": "Rome"}]
    parser = OutputParser(tool_plan(KIMI_TEMPLATE, TOOLS, "auto", True).fmt, False, True)
    content, _, deltas = feed_in_chunks(parser, "Sure. " + KIMI_CALLS, 5)
    assert content == "Sure. "
    assert [json.loads(c.arguments)["city"] for c in parser.tool_calls] == ["Oslo", "Rome"]
    assert streamed_arguments(deltas, 1) == parser.tool_calls[1].arguments
    # the ids are the model's, as Kimi's templates write them back with the results
    assert [c.id for c in parser.tool_calls] == ["functions.get_weather:0",
                                                 "functions.get_weather:11"]
    assert [d.id for d in deltas if d.id] == [c.id for c in parser.tool_calls]
    twice = OutputParser(parser.fmt, False, True)  # (an id written twice: not used twice)
    twice.feed([(KIMI_CALLS.replace(":11", ":0"), None)], True)
    ids = [c.id for c in twice.tool_calls]
    assert ids[0] == "functions.get_weather:0" and ids[1].startswith("call_")
    bare = OutputParser(parser.fmt, False, True)  # (calls without their section: read too)
    without = KIMI_CALLS.removeprefix("<|tool_calls_section_begin|>").removesuffix(
        "<|tool_calls_section_end|>")
    content, _, _ = feed_in_chunks(bare, "Sure. " + without + " Done.", 4)
    assert content == "Sure. Done." and len(bare.tool_calls) == 2


SEED_TEMPLATE = ("{% set toolcall_begin_token = '<seed:tool_call>' %}{% set think_begin_token = "
                 "'<seed:think>' %}{{ '<function=' }}{{ '<parameter=' }}")
SEED_CALL = ("<seed:tool_call>\n<function=get_weather>\n<parameter=city>New\nYork <b></parameter>\n"
             "<parameter=days>3</parameter>\n</function>\n</seed:tool_call>")


def test_seed_oss_blocks_read_back_values_right_between_their_tags():
    """Seed-OSS writes Qwen3-Coder's calls in its own blocks, each value between its tags
    without the line breaks: read whole (line breaks and tags inside it too), typed."""
    from lsd_local.chat.harmonyoutput import output_parser
    from lsd_local.chat.thinking import SEED_THINK

    plan = tool_plan(SEED_TEMPLATE, TOOLS, "auto", True)
    assert plan.fmt.name == "seed" and detect_format(TEMPLATE).name == "xml"
    types = plan.fmt.types()
    seen, _ = growing_prefixes(single(lambda text: xml_block(text, types, True)), SEED_CALL)
    assert json.loads(seen[0]) == {"city": "New\nYork <b>", "days": 3}
    parser = output_parser(SEED_TEMPLATE, plan, "", True)
    assert parser.think == SEED_THINK
    text = "<seed:think>Oslo or Rome?</seed:think>Let me look." + SEED_CALL
    content, reasoning, deltas = feed_in_chunks(parser, text, 6)
    assert (content, reasoning) == ("Let me look.", "Oslo or Rome?")
    [call] = parser.tool_calls
    assert call.name == "get_weather" and streamed_arguments(deltas, 0) == call.arguments


@pytest.mark.parametrize("opener,template", [
    ("<|message_sep|>\n\nfunction call<|role_sep|>\n",
     "{{ '<|role_sep|>' }} {{ '<|message_sep|>' }}"),
    ("<|function_call|>", "{{ '<|role_sep|>' }} {{ '<|message_sep|>' }} <|function_call|>"),
], ids=["3", "3.1"])
def test_gigachat_calls_read_back_after_the_answer(opener, template):
    """GigaChat 3 writes one call as a message after the answer's, 3.1 after
    <|function_call|>: the answer before it is content, the call reads back as it streams."""
    from lsd_local.chat.listcalls import gigachat_block

    plan = tool_plan(template, TOOLS, "auto", True)
    assert plan.fmt.name == "gigachat" and plan.fmt.opener == opener
    call = opener + '{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}'
    growing_prefixes(single(lambda text: gigachat_block(text, opener)), call)
    parser = OutputParser(plan.fmt, False, True)
    content, _, deltas = feed_in_chunks(parser, "Checking." + call, 5)
    assert content == "Checking."
    [scan] = parser.tool_calls
    assert json.loads(scan.arguments) == {"city": "Oslo", "days": 2}
    assert streamed_arguments(deltas, 0) == scan.arguments
    # an answer without a call ends its message with the separator, which is not the answer's
    plain = OutputParser(plan.fmt, False, True)
    content, _, _ = feed_in_chunks(plain, "It is sunny.<|message_sep|>\n\n", 4)
    assert content == "It is sunny."


def test_command_r_action_blocks_read_back_every_call():
    from lsd_local.chat.commandrcalls import commandr_section

    template = "{{ '<|START_ACTION|>' }}"
    block = ('<|START_ACTION|>[\n  {"tool_call_id": "0", "tool_name": "get_weather", '
             '"parameters": {"city": "Oslo"}},\n  {"tool_call_id": "1", "tool_name": '
             '"get_weather", "parameters": {"city": "Rome", "days": 2}}\n]<|END_ACTION|>')
    assert detect_format(template).name == "commandr"
    seen: list[str] = []
    for n in range(len(block) + 1):
        calls, end = commandr_section(block[:n])
        for i, scan in enumerate(calls):
            if i < len(seen):
                assert scan.arguments.startswith(seen[i]) or not seen[i], (n, i)
                seen[i] = scan.arguments or seen[i]
            else:
                seen.append(scan.arguments)
        assert end is None or end == len(block)
    calls, end = commandr_section(block)
    assert end == len(block) and [c.name for c in calls] == ["get_weather"] * 2
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Oslo"},
                                                        {"city": "Rome", "days": 2}]
    parser = OutputParser(tool_plan(template, TOOLS, "auto", True).fmt, False, True)
    parts = parser.feed([("On it. " + block, None)], True)
    assert "".join(t for t, _ in parts.content) == "On it. "
    assert [json.loads(c.arguments)["city"] for c in parser.tool_calls] == ["Oslo", "Rome"]
