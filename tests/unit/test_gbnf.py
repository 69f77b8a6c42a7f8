"""The GBNF reader behind grammar-forced drafts (drafters/gbnf.py): it must accept what the
shipped grammars, JSON schemas and tool-call grammars accept (the same texts llama.cpp is
checked against), and the text it calls forced must begin every valid continuation."""

from __future__ import annotations

import json
import random

import pytest
from grammar_examples import EXAMPLES

from lsd_local.backend import schema_to_gbnf
from lsd_local.chat.tools import tool_plan
from lsd_local.drafters.gbnf import Chars, GrammarState, GrammarSyntaxError, parse_gbnf
from lsd_local.grammars import shipped_grammars

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                      "tags": {"type": "array", "items": {"type": "string"}}},
     "required": ["name", "age", "tags"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"},
                                      "kind": {"enum": ["cat", "dog", "cow"]},
                                      "inner": {"type": "object",
                                                "properties": {"x": {"type": "number"}},
                                                "required": ["x"]}},
     "required": ["ok", "kind", "inner"]},
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}}]
HERMES = "{{ '<tool_call>' }}"  # a template whose tool calls are Hermes-style


def start(text: str) -> GrammarState:
    return GrammarState.start(parse_gbnf(text))


def complete(state: GrammarState) -> bool:
    return () in state.stacks


def instance(schema: dict, rng: random.Random):
    """A random value valid under the SCHEMAS above."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema["type"]
    if kind == "object":
        return {key: instance(sub, rng) for key, sub in schema["properties"].items()}
    if kind == "array":
        return [instance(schema["items"], rng) for _ in range(rng.randrange(4))]
    return {"string": lambda: rng.choice(["", "a b", "é\"\\", "x" * rng.randrange(9)]),
            "integer": lambda: rng.randrange(-999, 999),
            "number": lambda: rng.choice([0, 1.5, -2e-3, 7]),
            "boolean": lambda: rng.random() < 0.5}[kind]()


def assert_forced_begins_the_rest(state: GrammarState, text: str) -> int:
    """At every prefix of a valid `text`, the forced text (no whitespace habits: it stops
    at optional whitespace) is what `text` goes on with; returns the forced characters."""
    total = 0
    for at in range(len(text) + 1):
        forced = state.forced(64, before=text[:at])
        assert text[at:].startswith(forced), (text, at, forced)
        total += len(forced)
        if at < len(text):
            state = state.accept(text[at])
            assert not state.dead, (text, at)
    assert complete(state), text
    return total


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_shipped_grammars_accept_what_llama_cpp_accepts(name):
    good, bad = EXAMPLES[name]
    rules = parse_gbnf(shipped_grammars()[name].read_text())
    for text in good:
        state = GrammarState.start(rules).accept(text)
        assert complete(state), (name, text)
        assert_forced_begins_the_rest(GrammarState.start(rules), text)
    for text in bad:
        state = GrammarState.start(rules).accept(text)
        assert not complete(state), (name, text)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_schema_grammar_forces_keys_and_accepts_random_instances(schema):
    rules = parse_gbnf(schema_to_gbnf(schema))
    rng = random.Random(7)
    forced_chars = 0
    for i in range(40):
        value = instance(schema, rng)
        # (llama-cpp-python's converter allows one optional space between tokens)
        text = json.dumps(value, separators=rng.choice([(",", ":"), (", ", ": ")]),
                          ensure_ascii=i % 2 == 0)
        forced_chars += assert_forced_begins_the_rest(GrammarState.start(rules), text)
    assert forced_chars > 0  # keys and punctuation are forced somewhere


def test_schema_with_json_habits_forces_whole_key_runs():
    rules = parse_gbnf(schema_to_gbnf(SCHEMAS[0]))
    state = GrammarState.start(rules).accept('{"name": "Ann"')
    habits = {":": " ", ",": " ", '"': ""}
    # it stops before the space after ':': a blank goes with what follows it (" 34" is one
    # token), and the integer is not forced
    assert state.forced(64, habits, before='"') == ', "age":'
    assert state.forced(64, {}, before='"') == ""  # after '"' the blank is optional: unknown
    assert state.forced(3, habits, before='"') == ', "'  # the limit holds
    # a habit the grammar does not allow here (only " "): the writer must choose; stop
    assert state.forced(64, {**habits, ",": "\n"}, before='"') == ","


def test_tool_call_grammar_forces_the_call_shape():
    plan = tool_plan(HERMES, TOOLS, "required", False)
    text, triggers = plan.grammar(schema_to_gbnf)
    assert triggers == ()
    habits = {":": " ", ",": " ", '"': "", ">": "\n", "{": ""}
    state = start(text)
    assert state.forced(80, habits) == \
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "'  # (keys in order)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", ' \
           '"unit": "celsius"}}\n</tool_call>'
    inside = state.accept(call[:call.index("Paris") + 5])
    assert inside.forced(80, habits, before="Paris") == ""  # the string may go on
    after = state.accept(call[:call.index("Paris") + 6])
    assert after.forced(80, habits, before='"') == ', "unit": "'

    assert complete(start(text).accept(call))
    assert start(text).accept(call.replace("get_weather", "get_wether")).dead


def test_blank_rules_as_llama_cpp_writes_them():
    """llama.cpp's own converter lets a newline and indentation in between (llama-cpp-python's
    allows one space): pretty-printed JSON under the C++ form of `space`."""
    rules = parse_gbnf('root ::= "{" space "\\"a\\"" space ":" space "[" space "1" space '
                       '"]" space "}"\nspace ::= | " " | "\\n" [ \\t]{0,20}')
    text = json.dumps({"a": [1]}, indent=2)
    assert_forced_begins_the_rest(GrammarState.start(rules), text)
    state = GrammarState.start(rules).accept("{")
    assert state.forced(40, {"{": "\n  ", '"': "", ":": " ", "[": "", "1": "", "]": "\n"},
                        before="{") == '\n  "a": [1]\n}'


def test_parser_reads_repetitions_classes_and_escapes():
    rules = parse_gbnf('root ::= "a"{2,3} [^x-z] ("\\x41" | "\\u00e9")+ [\\]-]? \n')
    ok = ["aabA", "aaabéA", "aa-A]"]
    for text in ok:
        assert complete(start_rules(rules).accept(text)), text
    for text in ["abA", "aaaxA", "aaxA", "aab", "aabA]]"]:
        assert not complete(start_rules(rules).accept(text)), text
    assert start_rules(rules).forced(10) == "aa"  # then a third "a" or any other character


def start_rules(rules):
    return GrammarState.start(rules)


def test_chars_single_and_negation():
    assert Chars(((97, 97),)).single == "a"
    assert Chars(((97, 98),)).single is None
    assert Chars(((97, 97),), negated=True).single is None
    assert "b" in Chars(((97, 97),), negated=True) and "a" not in Chars(((97, 97),), True)


@pytest.mark.parametrize("text", ["root ::= (\"a\"", "root ::= [ab", 'root ::= "a',
                                  "root = \"a\"", "root ::= \"a\"{x}"])
def test_what_it_cannot_read_is_a_syntax_error(text):
    with pytest.raises(GrammarSyntaxError):
        parse_gbnf(text)


def test_missing_root_undefined_rules_and_left_recursion_are_refused():
    with pytest.raises(GrammarSyntaxError):
        GrammarState.start(parse_gbnf('item ::= "a"'))
    with pytest.raises(GrammarSyntaxError, match="undefined"):
        parse_gbnf('root ::= item "a"')
    with pytest.raises(GrammarSyntaxError, match="left recursive"):
        parse_gbnf('root ::= x "b"\nx ::= x "a" | ')
    with pytest.raises(GrammarSyntaxError, match="left recursive"):
        parse_gbnf('root ::= y x\nx ::= "a" | root\ny ::= "c"?')  # (y matches nothing)
    # recursion after a character is fine: stacks stay finite
    state = start('root ::= "(" root ")" | "x"')
    assert complete(state.accept("((x))")) and state.accept("((x)").forced(5) == ")"


def test_ambiguous_grammars_stop_the_forced_text():
    state = start('root ::= "ab" ("c" | "d") "e"')
    assert state.forced(10) == "ab"
    assert state.accept("abd").forced(10) == "e"
    assert start('root ::= "x" | "xy"').forced(10) == "x"  # then it may end: stop there
