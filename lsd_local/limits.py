"""Bounds on what a request may ask of the engine, defined once, and the checks that enforce
them before llama.cpp sees anything (docs/server.md, Security).

llama.cpp's grammar code recurses without a limit: its parser on nested groups, its rule
walks on the rules that a repetition `x{m,n}` expands into (n - m nested optional rules). A
grammar past what its stack holds kills the process that compiles it (SIGSEGV), so every
grammar and JSON schema is measured here first and refused with a GrammarError naming the
bound. Pure Python over text: a leaf module (it imports only `errors`), used by the HTTP
process before a job is queued and by the backend before any grammar is compiled.
"""

from __future__ import annotations

import json
import math
import re

from .errors import GrammarError, ParameterError

# --- grammars and schemas (measured crash points in docs/server.md) ------------------------
GRAMMAR_MAX_BYTES = 256 << 10  # GBNF text of one grammar (the shipped ones are under 4 KiB)
# nested ( ) groups in one rule: llama-cpp-python's converter writes x{0,n} as n nested
# groups, and 16,000-20,000 crashed (docs/server.md)
GRAMMAR_MAX_DEPTH = 8192
GRAMMAR_MAX_REPEAT = 4096  # the upper count of one repetition x{m,n}
GRAMMAR_MAX_REPEAT_TOTAL = 16384  # the upper counts of all repetitions of a grammar, summed
GRAMMAR_MAX_RULES = 4096  # rules a grammar defines (a chain of rules is recursion too)
SCHEMA_MAX_BYTES = 64 << 10  # a JSON schema (response_format, json_schema), as JSON text
SCHEMA_MAX_DEPTH = 32  # nested objects and arrays in a schema
# JSON schema keywords whose number becomes a repetition count of the grammar
SCHEMA_COUNT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties",
                         "maxProperties")
MAX_BOUND = 10 ** 18  # integer minimum / maximum (each digit is a rule of the grammar)
_QUANTIFIER = re.compile(r"\{(\d{1,12})(?:,(\d{0,12}))?\}")  # x{m}, x{m,}, x{m,n} of a pattern

# --- requests (lsd serve's defaults; each has a flag) --------------------------------------
SERVE_MAX_TOKENS_LIMIT = 32768  # most tokens one answer may have, whatever it asks
SERVE_REQUEST_TIMEOUT = 600.0  # seconds one request may take from its arrival
# seconds a request's engine may go without a llama_decode returning (one round, one prefill
# chunk): then it is deemed stuck, restarted, and the request fails
SERVE_ROUND_TIMEOUT = 300.0
MAX_STOP_STRINGS = 16  # stop strings per request
MAX_STOP_CHARS = 512  # characters of one stop string
MAX_TOOLS = 128  # tools per request
TOOLS_MAX_BYTES = 256 << 10  # all of a request's tools, as JSON text
MAX_SEED = (1 << 64) - 1  # seeds are 0..2**64-1; -1 asks for a random one
# per-request speculation settings (a request may not make a loose rule keep any draft: the
# draft may come from the suffix index, that is, from other clients' text)
REQUEST_MAX_K = 64  # draft tokens per round
REQUEST_MIN_THETA = 0.3  # FLy: the entropy a mismatch needs (default 0.6)
REQUEST_MIN_WINDOW = 1  # FLy: matches that must follow a kept mismatch
REQUEST_MAX_ENTROPY_TOP_K = 5  # FLy: probabilities the entropy sums (more: larger entropies)
REQUEST_MAX_GATE = 8.0  # ASD: regret per remaining token (default 2)
REQUEST_MAX_EXCEPTIONS = 4  # ASD: kept mismatches per block (default 2)
REQUEST_MAX_BUDGET = 24.0  # ASD: regret per request (default 6)


def _scan_string(text: str, i: int, close: str) -> int:
    """The index after the `close` that ends a literal or class opened before text[i]."""
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == close:
            return i + 1
        i += 1
    return i


def _skip_blank(text: str, i: int) -> int:
    """Past blanks, newlines and `#` comments (which end at either line break), as llama.cpp's
    parse_space reads them inside a group."""
    while i < len(text):
        if text[i] in " \t\r\n":
            i += 1
        elif text[i] == "#":
            while i < len(text) and text[i] not in "\r\n":
                i += 1
        else:
            return i
    return i


def _read_count(text: str, i: int) -> tuple[int, int]:
    """(the ASCII digits at text[i] as a number, 0 when none, capped; the index after)."""
    start = i
    while i < len(text) and text[i] in "0123456789":
        i += 1
    return (int(text[start:i]) if i - start < 12 else 10 ** 12) if i > start else 0, i


def _repeat_count(text: str, i: int) -> tuple[int, int]:
    """(the count that bounds the repetition `{m}`, `{m,}`, `{,n}` or `{m,n}` starting at
    text[i], the index after its "}"), read as llama.cpp reads it; ValueError for anything
    else (llama.cpp would refuse it too, and a reading that differs from its own could hide
    what follows)."""
    low, i = _read_count(text, _skip_blank(text, i + 1))
    high, i = low, _skip_blank(text, i)
    if i < len(text) and text[i] == ",":
        high, i = _read_count(text, _skip_blank(text, i + 1))
        i = _skip_blank(text, i)
    if i >= len(text) or text[i] != "}":
        raise ValueError(f"an unreadable repetition at offset {i}")
    return max(low, high), i + 1


def grammar_shape(text: str) -> tuple[int, int, int, int]:
    """(deepest ( ) nesting, largest repetition count, repetition counts summed, rules) of
    GBNF text, strings, character classes and comments skipped."""
    depth = deepest = largest = total = rules = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = _scan_string(text, i + 1, '"')
            continue
        if ch == "[":
            i = _scan_string(text, i + 1, "]")
            continue
        if ch == "#":
            while i < len(text) and text[i] not in "\r\n":
                i += 1
            continue
        if ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "{":
            count, i = _repeat_count(text, i)
            largest, total = max(largest, count), total + count
            continue
        elif text.startswith("::=", i):
            rules += 1
            depth = 0  # (a new rule: an unclosed group is the parser's error to report)
        i += 1
    return deepest, largest, total, rules


def check_grammar(text: str, source: str = "grammar", param: str | None = None) -> None:
    """GrammarError naming the bound when GBNF `text` is larger or deeper than llama.cpp's
    grammar code can take safely."""
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > GRAMMAR_MAX_BYTES:
        raise GrammarError(f"{source} is too large: {size} bytes (at most {GRAMMAR_MAX_BYTES})",
                           param)
    try:
        deepest, largest, total, rules = grammar_shape(text)
    except ValueError as exc:
        raise GrammarError(f"invalid {source}: {exc}", param) from None
    for value, bound, what in (
            (deepest, GRAMMAR_MAX_DEPTH, "groups nested {} deep"),
            (largest, GRAMMAR_MAX_REPEAT, "a repetition of {}"),
            (total, GRAMMAR_MAX_REPEAT_TOTAL, "repetition counts that add up to {}"),
            (rules, GRAMMAR_MAX_RULES, "{} rules")):
        if value > bound:
            raise GrammarError(f"{source} is too complex: it has {what.format(value)} (at most "
                               f"{bound}; lsd refuses it before llama.cpp's grammar parser, "
                               "which recurses without a limit)", param)


def _schema_counts(node: dict):
    """(what, number, its bound) for every number of one schema object that the converter
    expands: item and length counts, the repetitions of its `pattern`, its integer bounds
    (each digit a rule)."""
    for key in SCHEMA_COUNT_KEYWORDS:
        value = node.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            yield key, value, GRAMMAR_MAX_REPEAT
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        for found in _QUANTIFIER.finditer(pattern):
            count = max(int(n) for n in found.groups() if n)
            yield "a repetition in pattern", count, GRAMMAR_MAX_REPEAT
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        value = node.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            yield key, abs(value), MAX_BOUND


def _check_counts(node: dict, source: str, param: str | None) -> None:
    for what, value, bound in _schema_counts(node):
        if not math.isfinite(value) or value > bound:
            raise GrammarError(f"{source}: {what} {value} is more than lsd allows ({bound}: "
                               "the grammar it becomes grows with it)", param)


def _schema_depth_and_counts(schema: object, source: str, param: str | None) -> None:
    """Walk a decoded schema without recursion: its nesting depth and its count keywords."""
    stack = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > SCHEMA_MAX_DEPTH:
            raise GrammarError(f"{source} is nested more than {SCHEMA_MAX_DEPTH} deep", param)
        if isinstance(node, dict):
            _check_counts(node, source, param)
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            stack.extend((value, depth + 1) for value in node)


def check_schema(schema: object, source: str = "JSON schema", param: str | None = None) -> None:
    """GrammarError naming the bound when a JSON schema is too large, too deep, or counts
    more items than its grammar may expand (the grammar it becomes is checked again)."""
    _schema_depth_and_counts(schema, source, param)
    try:
        size = len(json.dumps(schema, ensure_ascii=False).encode("utf-8", "surrogateescape"))
    except (TypeError, ValueError):
        raise GrammarError(f"{source} is not JSON", param) from None
    if size > SCHEMA_MAX_BYTES:
        raise GrammarError(f"{source} is too large: {size} bytes (at most {SCHEMA_MAX_BYTES})",
                           param)


def check_seed(seed: int | None) -> int | None:
    """A sampling seed as numpy takes it: -1 (llama.cpp's and many clients' "random") and
    None are None (random); ParameterError outside -1..MAX_SEED."""
    if seed is None or seed == -1:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ParameterError(f"invalid seed: {seed!r} (0 to {MAX_SEED}, or -1 for a random "
                             "one)", param="seed")
    return seed
