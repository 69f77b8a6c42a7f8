"""Tool calls in Mistral's newer form (`[TOOL_CALLS]NAME[ARGS]{...}` per call, an id before
the arguments in Mistral Small 3.2's), read back as they stream, with Magistral's
`[THINK]` reasoning apart; the older JSON list stays its own format."""

from __future__ import annotations

import json

import pytest
from callstream import feed_in_chunks, growing_prefixes, single, streamed_arguments

from lsd_local.chat.mistralcalls import args_block
from lsd_local.chat.output import OutputParser
from lsd_local.chat.thinking import MISTRAL_THINK, thinking_of
from lsd_local.chat.tools import detect_format, tool_plan

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ARGS_TEMPLATE = "{{ '[TOOL_CALLS]' + name + '[ARGS]' }}{{ '[THINK]' }}"
CALL = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris [ARGS] {x}"}'


@pytest.mark.parametrize("template,name,variant", [
    (ARGS_TEMPLATE, "mistral-args", ""),
    ("{{ '[TOOL_CALLS]' + name + '[CALL_ID]' + id + '[ARGS]' }}", "mistral-args", "ids"),
    ("{{ '[TOOL_CALLS][' + calls | tojson + ']' }}", "mistral", ""),
])
def test_the_form_is_found_in_the_template(template, name, variant):
    fmt = detect_format(template)
    assert (fmt.name, fmt.variant) == (name, variant)


def test_every_prefix_gives_arguments_that_only_grow():
    seen, named_at = growing_prefixes(single(args_block), CALL)
    assert named_at == CALL.index("{")  # (the name once [ARGS] comes)
    assert json.loads(seen[0]) == {"city": "Paris [ARGS] {x}"}


def test_an_id_before_the_arguments_is_not_part_of_the_name():
    scan, end = args_block('[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Oslo"}')
    assert (scan.name, json.loads(scan.arguments), scan.complete) == (
        "get_weather", {"city": "Oslo"}, True)


def test_reasoning_then_calls_back_to_back_stream_apart():
    assert thinking_of(ARGS_TEMPLATE) is MISTRAL_THINK
    plan = tool_plan(ARGS_TEMPLATE, TOOLS, "auto", True)
    parser = OutputParser(plan.fmt, False, True, think=MISTRAL_THINK)
    text = "[THINK]Two cities.[/THINK]Looking." + CALL + CALL.replace("Paris", "Rome")
    content, reasoning, deltas = feed_in_chunks(parser, text, 5)
    assert (reasoning, content) == ("Two cities.", "Looking.")
    calls = parser.tool_calls
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Paris [ARGS] {x}",
                                                                "Rome [ARGS] {x}"]
    assert [streamed_arguments(deltas, i) for i in range(2)] == [c.arguments for c in calls]


@pytest.mark.parametrize("template,name", [
    ("{{ '<TOOLCALL>[' }}...{{ ']</TOOLCALL>' }}", "nemotron"),
    ("{{ '<|tool_call|>' + calls | tojson }}", "granite"),
    ("{{ '[TOOL_CALLS][' }}", "mistral"),
])
def test_json_list_families_are_told_apart_and_read_with_their_closer(template, name):
    from lsd_local.chat.listcalls import LIST_FORMATS, list_block

    assert detect_format(template).name == name
    opener, closer = LIST_FORMATS[name]
    section = opener + ' [{"name": "get_weather", "arguments": {"city": "Oslo"}}] ' + closer
    for n in range(len(section)):  # a closer not yet written keeps the section open
        _, end = list_block(section[:n], name)
        assert end is None or (not closer and end == section.rindex("]") + 1)
    calls, end = list_block(section + "Done.", name)
    assert end == (len(section) if closer else section.rindex("]") + 1)
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Oslo"}]


@pytest.mark.parametrize("template,name", [
    ("{{ ns.content + ' functools[' + calls | join(', ') + ']' }}", "firefunction"),
    ("{{ '<tool_calls>\\n' }}{{ call | tojson + '\\n' }}{{ '</tool_calls>' }}", "minimax1"),
    ("{{ '<tool_calls>[' + calls | tojson + ']</tool_calls>' }}", "apriel"),
    ("{{ '<|tools_prefix|>[' }}{{ '{\"' + name + '\": ' }}{{ ']<|tools_suffix|>' }}",
     "apertus"),
])
def test_firefunction_and_minimax_m1_calls_stream_as_their_templates_write_them(template,
                                                                               name):
    """FireFunction v2's ` functools[...]` (the list opened by its marker), MiniMax-M1's
    `<tool_calls>` with one object per line (no list) and Apertus's list of calls named by
    their keys: two calls after some text, read the same at every chunk size, the section
    ending at its closer or its list's end."""
    from lsd_local.chat.listcalls import LIST_FORMATS, list_block

    assert detect_format(template).name == name
    opener, closer = LIST_FORMATS[name]
    first, second = ('{"name": "get_weather", "arguments": {"city": "Oslo, [x]"}}',
                     '{"name": "get_weather", "arguments": {"city": "Rome\\n{y}"}}')
    if name == "apertus":  # (each call named by its key)
        first, second = ('{"get_weather": {"city": "Oslo, [x]"}}',
                         '{"get_weather": {"city": "Rome\\n{y}"}}')
    body = f"\n{first}\n{second}\n" if name == "minimax1" else f"[{first}, {second}]"
    section = opener + body[opener.endswith("["):] + closer
    calls, end = list_block(section + " Done.", name)
    assert end == len(section) and [json.loads(c.arguments)["city"] for c in calls] == [
        "Oslo, [x]", "Rome\n{y}"]
    for n in range(len(section) - 1):  # (open until the closer, or the list's end, is whole)
        assert list_block(section[:n], name)[1] is None
    plan = tool_plan(template, TOOLS, "auto", True)
    for size in (1, 3, 7, 100):
        parser = OutputParser(plan.fmt)
        content, _, deltas = feed_in_chunks(parser, "Looking." + section, size)
        assert content == "Looking." and len(parser.tool_calls) == 2
        assert [streamed_arguments(deltas, i) for i in range(2)] == [
            c.arguments for c in parser.tool_calls]


def test_an_apertus_call_is_named_once_its_key_is_whole_and_its_arguments_only_grow():
    from lsd_local.chat.listcalls import list_block

    section = '<|tools_prefix|>[{"get_weather": {"city": "Oslo \\"}\\" [x]", "days": 3}}]'
    final = list_block(section, "apertus")[0][0]
    assert (final.name, json.loads(final.arguments), final.complete) == (
        "get_weather", {"city": 'Oslo "}" [x]', "days": 3}, True)
    named_at = None
    for n in range(len(section)):
        calls, _ = list_block(section[:n], "apertus")
        scan = calls[0] if calls else None
        if scan is not None and scan.name is not None:
            named_at = named_at or n
            assert scan.name == "get_weather" and final.arguments.startswith(scan.arguments)
    assert named_at == section.index('":') + 1  # (the key's closing quote)


def test_a_template_with_a_list_in_tool_calls_tags_is_not_minimax_m1():
    """MiniMax-M1's template writes a line break after `<tool_calls>`; one that writes a
    list there is not its (its grammar would force lines on a model trained on a list)."""
    assert detect_format("{{ '<tool_calls>' + calls | tojson + '</tool_calls>' }}").name \
        == "generic"
    assert detect_format("<tool_calls>\n{{ call | tojson }}\n</tool_calls>").name == "minimax1"
