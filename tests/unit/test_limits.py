"""Bounds on grammars, schemas and seeds (lsd_local/limits.py), on hand-made text: what
llama.cpp's recursive grammar code would crash on is refused with a message naming the
bound, and what the shipped grammars and ordinary schemas hold is not."""

from __future__ import annotations

import pytest

from lsd_local import limits
from lsd_local.errors import GrammarError, ParameterError
from lsd_local.grammars import grammar_text, shipped_grammars


@pytest.mark.parametrize("text,shape", [
    ('root ::= "a"', (0, 0, 0, 1)),
    ('root ::= ("a" ("b" | "c"))*', (2, 0, 0, 1)),
    ('root ::= "((((" [()] "\\"(("  # (((( in a comment\nx ::= "a"{2,5} "b"{3}', (0, 5, 8, 2)),
    ('root ::= [\\]( ] ("a"){,7} x\nx ::= ("b"){4,}', (1, 7, 11, 2)),
    ('root ::= "a"{999999999999999}', (0, 10 ** 12, 10 ** 12, 1)),
    ('root ::= (("a"\nx ::= "b"', (2, 0, 0, 2)),  # an unclosed group ends with its rule
])
def test_grammar_shape_skips_strings_classes_and_comments(text, shape):
    assert limits.grammar_shape(text) == shape


@pytest.mark.parametrize("text,words", [
    ("root ::= " + "(" * 8193 + '"a"' + ")" * 8193, "groups nested 8193 deep"),
    # what an independent review hid from a first reading: a "}" in a comment inside a
    # repetition, a comment that a carriage return ends, a digit that is not ASCII
    ('root ::= ("a"{1 #}"\n}' + "(" * 8193 + '"b"' + ")" * 8193 + ' "c")',
     "groups nested 8194 deep"),
    ('root ::= ("a"{0,100000 # c\n})', "a repetition of 100000"),
    ('root ::= "a" # c\r' + "(" * 8193 + '"b"' + ")" * 8193, "nested 8193 deep"),
    ('root ::= "a"{\u00b2}', "unreadable repetition"),
    ('root ::= "a"{0,4097}', "a repetition of 4097"),
    ("root ::= " + " ".join(['"a"{0,4000}'] * 5), "repetition counts that add up to 20000"),
    ("".join(f"r{i} ::= r{i + 1}\n" for i in range(4100)), "4100 rules"),
    ("root ::= \"" + "a" * (limits.GRAMMAR_MAX_BYTES + 1) + "\"", "too large"),
])
def test_a_grammar_past_a_bound_is_refused_naming_it(text, words):
    with pytest.raises(GrammarError, match=words) as caught:
        limits.check_grammar(text, "grammar", "grammar")
    assert caught.value.param == "grammar"


def test_a_grammar_at_the_bounds_passes():
    depth = "root ::= " + "(" * 8192 + '"a"' + ")" * 8192
    limits.check_grammar(depth)
    limits.check_grammar("root ::= " + " ".join(['"a"{0,4096}'] * 4))


def test_every_shipped_grammar_is_within_the_bounds():
    assert shipped_grammars()
    for name in shipped_grammars():
        limits.check_grammar(grammar_text(name)[0], name)


@pytest.mark.parametrize("schema,words", [
    ({"type": "string", "maxLength": 100000}, "maxLength 100000"),
    ({"type": "array", "items": {"type": "string", "minLength": 5000}}, "minLength 5000"),
    ({"type": "array", "maxItems": float("inf")}, "maxItems inf"),
    ({"properties": {"a": {"properties": {"b": {"type": "array", "maxItems": 10 ** 9}}}}},
     "maxItems 1000000000"),
    ({"type": "string", "pattern": "^a{2000000000}$"}, "repetition in pattern 2000000000"),
    ({"type": "string", "pattern": "^(ab){2,99999}$"}, "repetition in pattern 99999"),
    ({"type": "integer", "minimum": -(10 ** 30)}, "minimum 10000000000000"),
])
def test_a_schema_whose_counts_expand_too_far_is_refused(schema, words):
    with pytest.raises(GrammarError, match=words):
        limits.check_schema(schema, "json_schema", "json_schema")


def test_a_deep_or_large_schema_is_refused_without_recursion():
    deep: dict = {"type": "string"}
    for _ in range(5000):  # deeper than Python's recursion limit: walked with a stack
        deep = {"type": "array", "items": deep}
    with pytest.raises(GrammarError, match="nested more than 32 deep"):
        limits.check_schema(deep)
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)}}
    with pytest.raises(GrammarError, match="too large"):
        limits.check_schema(wide)


ORDINARY = [{"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 200, "pattern": "^[A-Z][a-z]{1,40}$"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 100},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "flag": {"type": "boolean", "maxLength": True}}},  # (a bool is not a count)
    {"type": "string", "maxLength": 4096}, {"type": "string", "pattern": "^a{0,100}$"}]


@pytest.mark.parametrize("schema", ORDINARY)
def test_ordinary_schemas_and_the_grammars_they_become_pass(schema):
    """The converter writes x{0,n} as n nested groups: the grammar a schema at the count
    bound becomes must pass the grammar bounds too (a first cut refused maxLength 65)."""
    from lsd_local.backend import schema_to_gbnf

    limits.check_schema(schema)
    limits.check_grammar(schema_to_gbnf(schema))


@pytest.mark.parametrize("seed,expected", [(None, None), (-1, None), (0, 0), (7, 7),
                                           (limits.MAX_SEED, limits.MAX_SEED)])
def test_seed_minus_one_means_random(seed, expected):
    assert limits.check_seed(seed) == expected


@pytest.mark.parametrize("seed", [-2, limits.MAX_SEED + 1, True, 1.5])
def test_other_seeds_outside_the_range_are_refused(seed):
    with pytest.raises(ParameterError, match="seed") as caught:
        limits.check_seed(seed)
    assert caught.value.param == "seed"
