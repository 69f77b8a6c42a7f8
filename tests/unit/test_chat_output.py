"""An answer read apart as it streams (chat/output.py, chat/jsonscan.py): reasoning, content
and tool calls in each format, the same whatever the chunks the text arrives in; tool calls
streamed as OpenAI does (id and name first, arguments in pieces that reassemble)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_local.chat.jsonscan import list_elements, scan_call, value_end
from lsd_local.chat.output import OutputParser
from lsd_local.chat.tools import FORMATS

HERMES = ('I will look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
          '"days": [1, 2], "note": "a \\"}\\" brace"}}\n</tool_call>\n<tool_call>\n{"name": '
          '"search", "arguments": {"q": "x{y}"}}\n</tool_call>')
MISTRAL = ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
           '{"name": "search", "arguments": {}}]')
LLAMA3 = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
GENERIC = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'


def read(fmt, text, chunks, thinking=False, reasoning=True):
    """Feed `text` cut at `chunks`; return (content, reasoning, calls from the deltas,
    calls the parser reports, the deltas)."""
    parser = OutputParser(FORMATS[fmt] if fmt else None, thinking, reasoning)
    cuts = sorted({c for c in chunks if 0 < c < len(text)})
    pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)], strict=True)]
    content = reasoning_text = ""
    deltas = []
    for i, piece in enumerate(pieces):
        parts = parser.feed([(piece, i % 3)], final=i == len(pieces) - 1)
        content += "".join(t for t, _ in parts.content)
        reasoning_text += "".join(t for t, _ in parts.reasoning)
        deltas += parts.tool_calls
    streamed = {}
    for d in deltas:
        if d.name is not None:
            assert d.index not in streamed, "a call is announced once"
            streamed[d.index] = [d.id, d.name, ""]
        streamed[d.index][2] += d.arguments
    calls = [tuple(streamed[i]) for i in sorted(streamed)]
    reported = [(c.id, c.name, c.arguments) for c in parser.tool_calls]
    return content, reasoning_text, calls, reported, deltas


CASES = [
    ("hermes", HERMES, "I will look.\n", [("get_weather", {"city": "Paris", "days": [1, 2],
                                                           "note": 'a "}" brace'}),
                                          ("search", {"q": "x{y}"})]),
    ("mistral", MISTRAL, "", [("get_weather", {"city": "Paris"}), ("search", {})]),
    ("llama3", LLAMA3, "", [("get_weather", {"city": "Paris"})]),
    ("generic", GENERIC, "", [("get_weather", {"city": "Paris"})]),
    ("hermes", "No call here, just <tool text.", "No call here, just <tool text.", []),
    # the end of a call is found from its JSON: an argument may spell the closing tag
    ("hermes", '<tool_call>\n{"name": "write", "arguments": {"text": "a </tool_call> b"}}\n'
     '</tool_call>\nDone.', "Done.", [("write", {"text": "a </tool_call> b"})]),
    ("hermes", '<tool_call>{"name": "now", "arguments": {}} then text', "then text",
     [("now", {})]),
    ("llama3", "Plain answer {not a call}.", "Plain answer {not a call}.", []),
]


@pytest.mark.parametrize("fmt,text,content,expected", CASES)
def test_calls_and_content_in_one_piece(fmt, text, content, expected):
    got_content, _, calls, reported, _ = read(fmt, text, [])
    assert got_content == content
    assert [(name, json.loads(args)) for _, name, args in calls] == expected
    assert calls == reported and all(i.startswith("call_") for i, _, _ in calls)


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(CASES), cuts=st.lists(st.integers(0, 200), max_size=12))
def test_any_chunking_reads_the_same(case, cuts):
    fmt, text, content, expected = case
    got_content, _, calls, reported, deltas = read(fmt, text, cuts)
    assert got_content == content
    assert [(name, json.loads(args)) for _, name, args in calls] == expected
    assert calls == reported
    for d in deltas:  # OpenAI's shape: id and name on the first piece only
        assert (d.id is None) == (d.name is None)


def test_arguments_stream_in_pieces_before_the_call_ends():
    text = LLAMA3
    _, _, _, _, deltas = read("llama3", text, list(range(0, len(text), 3)))
    assert deltas[0].name == "get_weather"
    assert len([d for d in deltas if d.arguments]) > 3  # not one piece at the end


@pytest.mark.parametrize("text,thinking,reasoning,expected", [
    ("<think>Let me see.</think>\n\nIt is 4.", False, "Let me see.", "It is 4."),
    ("  <think>\nhm\n</think>It is 4.", False, "\nhm\n", "It is 4."),
    ("Let me see.</think>\n\nIt is 4.", True, "Let me see.", "It is 4."),  # opened by prompt
    ("It is 4.", False, "", "It is 4."),
    ("<thin", False, "", "<thin"),  # never became a block
])
def test_reasoning_is_split_from_the_answer(text, thinking, reasoning, expected):
    for cuts in ([], list(range(len(text)))):
        content, got_reasoning, _, _, _ = read(None, text, cuts, thinking)
        assert (got_reasoning, content) == (reasoning, expected)


def test_reasoning_left_in_the_content_when_not_split():
    text = "<think>x</think>y"
    assert read(None, text, [3], reasoning=False)[:2] == (text, "")


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("fmt, calls", [("hermes", HERMES.split("\n", 1)[1]),
                                        ("generic", GENERIC)])
def test_unsplit_reasoning_is_content_as_written_and_the_calls_after_it_are_read(
        thinking, fmt, calls):
    """reasoning=False keeps a block's text and markers in the content, character for
    character, and reads the calls after it as with reasoning split out (the blocks were
    not read at all: a whole-answer call after a block stayed text)."""
    text = ("" if thinking else "<think>") + "I should call it.</think>\n" + calls
    split = read(fmt, text, [], thinking)
    assert split[2] and split[1] == "I should call it."
    for cuts in ([], list(range(0, len(text), 3)), list(range(len(text)))):
        content, reasoning, got, reported, _ = read(fmt, text, cuts, thinking,
                                                    reasoning=False)
        assert content == text[:len(text) - len(calls)] and reasoning == ""
        assert [c[1:] for c in got] == [c[1:] for c in split[2]] and got == reported


@pytest.mark.parametrize("fmt", ["generic", "llama3"])
@pytest.mark.parametrize("reasoning", [True, False])
def test_json_that_names_no_call_after_a_reasoning_block_stays_the_answer(fmt, reasoning):
    """A whole-answer format reads a "{" after a reasoning block as a call's start (its
    lazy trigger, anchored at the answer's start, cannot hold the model there): JSON that
    names no call was dropped, and the answer came back empty (found by a review)."""
    text = '<think>The user wants JSON.</think>\n{"answer": 42, "list": [1, 2]}'
    for cuts in ([], list(range(0, len(text), 3)), list(range(len(text)))):
        content, got_reasoning, calls, _, _ = read(fmt, text, cuts, reasoning=reasoning)
        answer = content.split("</think>")[-1].strip()
        assert json.loads(answer) == {"answer": 42, "list": [1, 2]} and calls == []
        assert got_reasoning == ("The user wants JSON." if reasoning else "")


@pytest.mark.parametrize("fmt,text,kept", [
    ("hermes", 'Sure.\n<tool_call>\n{"na', "Sure.\n"),  # cut before its name: dropped
    ("glm", "Ok <tool_call>get_wea", "Ok "),
    ("hermes", 'Sure.\n<tool_call>\n{"nome": 1}\n</tool_call>',  # closed, no call named
     'Sure.\n<tool_call>\n{"nome": 1}\n</tool_call>'),
    ("generic", '{"answer": 4', '{"answer": 4'),  # a whole-answer format: it is the answer
])
def test_a_section_that_names_no_call_is_dropped_only_when_cut(fmt, text, kept):
    """A call an opener began and the answer's end cut before its name is no text of the
    answer (a review found the markup given back); a section that ended and named no call,
    or a whole-answer JSON cut, is, each piece with an origin of its own text."""
    for cuts in ([], list(range(len(text)))):
        content, _, calls, _, _ = read(fmt, text, cuts)
        assert content == kept and calls == []
    parser = OutputParser(FORMATS[fmt])
    parts = [parser.feed([(text, "drafted")]), parser.feed([], final=True)]
    assert all(origin == "drafted" for part in parts for _, origin in part.content)


def test_reasoning_then_a_call():
    text = "<think>I should call it.</think>\n" + HERMES.split("\n", 1)[1]
    content, reasoning, calls, _, _ = read("hermes", text, list(range(0, len(text), 7)))
    assert reasoning == "I should call it." and content == ""
    assert [name for _, name, _ in calls] == ["get_weather", "search"]


def test_origins_travel_with_the_text():
    parser = OutputParser(None)
    parts = parser.feed([("<think>a", 0), ("b</think>c", 1), ("d", 2)], final=True)
    assert parts.reasoning == [("a", 0), ("b", 1)] and parts.content == [("c", 1), ("d", 2)]


def test_json_scanning_follows_strings_and_nesting():
    assert value_end('{"a": "}"}x', 0) == 10
    assert value_end('{"a": "}', 0) is None
    assert value_end(" 12", 0) is None and value_end(" 12,", 0) == 3
    scan = scan_call('{"name": "f", "extra": [1, {"x": 2}], "arguments": {"a": [')
    assert (scan.name, scan.arguments, scan.complete) == ("f", '{"a": [', False)
    assert scan_call('{"arguments": {}, "name": "g"}').name == "g"
    assert list_elements(' [ {"a": 1}, {"b": ', 0) == ([(3, 11), (13, None)], None)


def test_apriel_reasoning_is_opened_by_its_prompt_and_ended_by_its_marker():
    """Apriel 1.6's generation prompt opens the reasoning in words; `[BEGIN FINAL
    RESPONSE]` ends it; its calls are one JSON list in <tool_calls> tags."""
    from lsd_local.chat.harmonyoutput import output_parser
    from lsd_local.chat.thinking import APRIEL_THINK, thinking_of
    from lsd_local.chat.tools import tool_plan

    template = ("{{ 'x <tool_calls>[' }} [BEGIN FINAL RESPONSE] "
                "{{ 'Here are my reasoning steps:\\n' }}")
    assert thinking_of(template) == APRIEL_THINK
    assert thinking_of("[BEGIN FINAL RESPONSE]") != APRIEL_THINK  # (Apriel 1.5: no opener)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    plan = tool_plan(template, tools, "auto", True)
    assert plan.fmt.name == "apriel"
    parser = output_parser(template, plan, "<|begin_assistant|>\nHere are my reasoning steps:\n",
                           True)
    answer = 'Two steps.\n[BEGIN FINAL RESPONSE]\n<tool_calls>[{"name": "f", "arguments": {}}]'
    parts = parser.feed([(answer + "</tool_calls>", None)], True)
    assert "".join(t for t, _ in parts.reasoning).strip() == "Two steps."
    assert "".join(t for t, _ in parts.content) == ""
    assert [(c.name, c.arguments) for c in parser.tool_calls] == [("f", "{}")]
