"""Tool calls as Python calls, as LFM2's and LFM2.5's templates ask for them: a list of calls
with keyword arguments whose values are Python literals, between two markers:

    <|tool_call_start|>[get_weather(city='Oslo', days=3), now()]<|tool_call_end|>

Strings in single or double quotes (with Python's escapes), numbers, True, False and None,
lists and dicts (JSON's true, false and null are read too). Read back as the same CallScans
as any JSON call, each argument once its value is complete (the arguments' JSON text only
grows while a call streams); the grammar makes names, required keys, strings, enums and
scalars valid against each tool's schema, and holds nested values to Python's literals.
"""

from __future__ import annotations

import ast
import json
import re

from .gbnfparts import in_order, literal, renamed
from .jsonscan import JSON_NUMBER, CallScan, skip_space

OPEN, CLOSE = "<|tool_call_start|>", "<|tool_call_end|>"
MARKERS = (OPEN, CLOSE)
# how llama.cpp knows LFM2's templates (LFM2.5's plain list, LFM2's marked one)
_TEMPLATE_SIGNS = ("List of tools: [", "<|tool_list_start|>", OPEN)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")  # a tool's name
_KEY = re.compile(r"[^\W\d][\w.-]*")  # a keyword (Python's identifiers: any letters)
_JSON_WORDS = re.compile(r"\b(?:true|false|null)\b")
_WORDS = {"True": "true", "False": "false", "None": "null", "true": "true",
          "false": "false", "null": "null"}
_PYTHON_WORDS = {"true": "True", "false": "False", "null": "None"}


def is_python_calls(template: str) -> bool:
    """Whether a chat template is LFM2's (its tool list, plain or between markers, or its
    call markers): its model writes calls in this form whatever the template shows."""
    return any(sign in template for sign in _TEMPLATE_SIGNS)


def python_section(section: str) -> tuple[list[CallScan], int | None]:
    """The calls a section starting with `<|tool_call_start|>` holds so far, and where it
    ends after its closer (None while unknown)."""
    i = skip_space(section, len(OPEN))
    if i >= len(section):
        return [], None
    if section[i] != "[":
        return [], i  # (not the form: the section ends at once)
    calls, i = [], skip_space(section, i + 1)
    while i < len(section) and section[i] != "]":
        scan, i = _call(section, i)
        calls.append(scan)
        if i is None:
            return calls, None
        i = skip_space(section, i)
        if section.startswith(",", i):
            i = skip_space(section, i + 1)
        elif i < len(section) and section[i] != "]":
            return calls, i  # (not the form)
    if i >= len(section):
        return calls, None
    j = skip_space(section, i + 1)
    if section.startswith(CLOSE, j):
        return calls, j + len(CLOSE)
    return calls, (None if CLOSE.startswith(section[j:]) else i + 1)


def _call(text: str, i: int) -> tuple[CallScan, int | None]:
    """One call `name(k=v, ...)` from text[i]: (what is known of it, the index after its
    ")" or None while it goes on)."""
    match = _NAME.match(text, i)
    if match is None:
        return CallScan(None, "", False), i  # (not a call: reading stops there)
    paren = match.end()
    if paren >= len(text):
        return CallScan(None, "", False), None
    if text[paren] != "(":
        return CallScan(None, "", False), i
    name, pairs, i = match.group(), [], skip_space(text, paren + 1)
    while True:
        if i >= len(text):
            return CallScan(name, _arguments(pairs), False), None
        if text[i] == ")":
            return CallScan(name, _arguments(pairs) + "}", True), i + 1
        key = _KEY.match(text, i)
        eq = skip_space(text, key.end()) if key else i
        if key is not None and eq >= len(text):
            return CallScan(name, _arguments(pairs), False), None  # (the key goes on)
        if key is None or text[eq] != "=":
            return CallScan(name, _arguments(pairs) + "}", True), i  # (not the form)
        end = value_end(text, skip_space(text, eq + 1))
        if end is None:
            return CallScan(name, _arguments(pairs), False), None
        value = json_value(text[eq + 1:end])
        if value is None:
            return CallScan(name, _arguments(pairs) + "}", True), i  # (not a literal)
        pairs.append((key.group(), value))
        i = skip_space(text, end)
        if text.startswith(",", i):
            i = skip_space(text, i + 1)


def _arguments(pairs: list[tuple[str, str]]) -> str:
    """The arguments' JSON text so far ("}" not yet)."""
    return "{" + ", ".join(f"{json.dumps(key)}: {value}" for key, value in pairs)


def value_end(text: str, i: int) -> int | None:
    """The index after the Python literal at text[i] (before the "," or ")" that ends it);
    None while the text ends inside it. Quotes, escapes and nesting are followed."""
    depth, quote, j = 0, "", i
    while j < len(text):
        ch = text[j]
        if quote:
            if ch == "\\":
                j += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return j
            depth -= 1
        elif ch == "," and depth == 0:
            return j
        j += 1
    return None


def json_value(source: str) -> str | None:
    """A Python literal's text as JSON text (a number keeps its digits; None where it is
    no literal)."""
    source = source.strip()
    if JSON_NUMBER.match(source) or source in _WORDS:
        return _WORDS.get(source, source)
    for attempt in (source, _pythonized(source)):  # (JSON's words inside a list or dict)
        try:
            value = ast.literal_eval(attempt)
            return json.dumps(value, allow_nan=False, default=_listed)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
    return None


def _pythonized(source: str) -> str:
    """`source` with JSON's true, false and null outside strings as Python's words."""
    parts, quote, start = [], "", 0
    for j, ch in enumerate(source):
        if quote and ch == quote and source[j - 1] != "\\":
            quote = ""
        elif not quote and ch in "'\"":
            parts.append(_JSON_WORDS.sub(lambda m: _PYTHON_WORDS[m.group()], source[start:j]))
            quote, start = ch, j
        elif not quote and start < j and source[start] in "'\"":
            parts.append(source[start:j])
            start = j
    rest = source[start:]
    parts.append(rest if quote or rest[:1] in ("'", '"') else
                 _JSON_WORDS.sub(lambda m: _PYTHON_WORDS[m.group()], rest))
    return "".join(parts)


def _listed(value: object) -> list:
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


# --- the grammar ---------------------------------------------------------------------------

GENERIC_RULES = [
    'py-value ::= py-string | py-number | "True" | "False" | "None" | py-list | py-dict',
    "py-string ::= \"'\" py-chars \"'\"",
    # (escapes Python reads one way only: no \\x, \\N{...}, \\u, line continuations)
    r"py-chars ::= ([^'\\\n] | " + '"\\\\" ' + r"['\"\\nrtabfv])*",
    # (no float that overflows, no integer Python will not read: its text is kept only at
    # the top level)
    'py-number ::= "-"? ("0" | [1-9] [0-9]{0,17}) ("." [0-9]{1,17})? ([eE] [-+]? [0-9]{1,2})?',
    'py-list ::= "[" (py-value (", " py-value)*)? "]"',
    'py-dict ::= "{" (py-string ": " py-value (", " py-string ": " py-value)*)? "}"']


def call_rules(tools, to_gbnf) -> tuple[str, list[str]]:
    """(the rule `py-call` for one call to any of `tools`, and the rules it needs): keyword
    arguments in the schema's order, a required one always, an optional one maybe."""
    rules, alternatives = list(GENERIC_RULES), []
    for t, tool in enumerate(tools):
        props = tool.parameters.get("properties") or {}
        required = set(tool.parameters.get("required") or ())
        items = [(f'"{literal(key)}=" {_value_rule(schema, f"py{t}-{p}-", rules, to_gbnf)}',
                  key in required) for p, (key, schema) in enumerate(props.items())]
        arguments = in_order(items, sep='", "') if items else ""
        alternatives.append(f'("{literal(tool.name)}(" {arguments} ")")')
    return "py-call ::= " + " | ".join(alternatives), rules


def _value_rule(schema: object, prefix: str, rules: list[str], to_gbnf) -> str:
    """One argument's value: a string (or one of its strings) in single quotes, a number as
    JSON writes it, True/False, None; anything else any Python literal."""
    if not isinstance(schema, dict):
        return "py-value"
    kind = schema.get("type")
    kind = kind if isinstance(kind, str) else None  # (a list of types: any literal)
    choices = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(choices, list) and choices and all(
            c is None or isinstance(c, (str, bool, int, float)) for c in choices):
        # each as Python writes it (repr: escapes and quotes that read back exactly)
        return "(" + " | ".join(f'"{literal(repr(c))}"' for c in choices) + ")"
    if kind == "string" and choices is None:
        return "py-string"
    if kind in ("integer", "number") and choices is None:
        number = re.sub(r"(?m)^space ::= .*$", 'space ::= ""', to_gbnf(schema))
        rules.append(renamed(number, prefix))
        return f"{prefix}root"
    return {"boolean": '("True" | "False")', "null": '"None"'}.get(kind, "py-value")
