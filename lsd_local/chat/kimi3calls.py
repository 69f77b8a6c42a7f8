"""Kimi K3's answers: every part of a message is a section between markers (control tokens
of its vocabulary), `<|open|>NAME attributes<|sep|>` ... `<|close|>NAME<|sep|>`. An answer is
its reasoning (the `think` section, which the generation prompt opens unless `thinking` is
false), its text in a `response` section, then its calls in a `tools` section, one `call`
section each, one `argument` section per argument:

    <|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument
    key="city" type="string"<|sep|>Oslo<|close|>argument<|sep|><|close|>call<|sep|>
    <|close|>tools<|sep|><|close|>message<|sep|>

(without the line breaks). A value is raw text where the schema takes a string, else its
JSON (as llama.cpp reads it; an argument the schema does not name goes by its `type`
attribute). Attributes are escaped as the template escapes them (`&quot;`, `&amp;`). The
response section's markers and the message's close are no part of the answer (chat/
kimi3output.py drops them). Detected as llama.cpp does: `<|open|>`, `<|close|>` and
`<|end_of_msg|>` in the template.
"""

from __future__ import annotations

import json

from .gbnfparts import in_schema_order, literal, until_rules
from .jsonscan import CallScan, calls_until, open_arguments, skip_space, value_end
from .minimaxcalls import _takes_a_string
from .xmlcalls import string_value, typed_value, value_rule

OPEN, CLOSE, SEP, END_OF_MESSAGE = "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"
MARKERS = (OPEN, CLOSE, SEP, END_OF_MESSAGE)  # (llama.cpp's preserved tokens)
THINK_OPEN, THINK_CLOSE = f"{OPEN}think{SEP}", f"{CLOSE}think{SEP}"
RESPONSE_OPEN, RESPONSE_CLOSE = f"{OPEN}response{SEP}", f"{CLOSE}response{SEP}"
TOOLS_OPEN, TOOLS_CLOSE = f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}"
CALL, CALL_CLOSE = f'{OPEN}call tool="', f"{CLOSE}call{SEP}"
ARGUMENT, ARGUMENT_CLOSE = f'{OPEN}argument key="', f"{CLOSE}argument{SEP}"
JSON_ARGUMENTS, JSON_CLOSE = f'{OPEN}json type="object"{SEP}', f"{CLOSE}json{SEP}"
MESSAGE_CLOSE = f"{CLOSE}message{SEP}"
WRAPPERS = (RESPONSE_OPEN, RESPONSE_CLOSE, MESSAGE_CLOSE, END_OF_MESSAGE)  # no answer's text
_MALFORMED = object()


def is_kimi3(template: str | None) -> bool:
    """Whether a chat template writes Kimi K3's sections (llama.cpp's check)."""
    return bool(template) and OPEN in template and CLOSE in template and \
        END_OF_MESSAGE in template


def escape(text: str) -> str:
    """An attribute's value as the template writes it."""
    return text.replace("&", "&amp;").replace('"', "&quot;")


def _unescape(text: str) -> str:
    return text.replace("&quot;", '"').replace("&amp;", "&")


# --- reading calls back -------------------------------------------------------------------

def kimi3_section(section: str, types: dict) -> tuple[list[CallScan], int | None]:
    """The calls a `tools` section holds so far, and where it ends after its closer (None
    while unknown; text that is no call ends it). `types`: {(tool, key): JSON type}."""
    return calls_until(section, len(TOOLS_OPEN), TOOLS_CLOSE, CALL,
                       lambda text, at: _call(text, at, types))


def _call(section: str, i: int, types: dict) -> tuple[CallScan, int | None]:
    """One call from after `call tool="`: (what is known of it, the index after its
    closer, or None while it goes on)."""
    name_end = section.find('"', i)
    head_end = section.find(SEP, name_end) if name_end >= 0 else -1
    if head_end < 0:
        return CallScan(None, "", False), None
    name, pairs, i = section[i:name_end], [], head_end + len(SEP)
    while True:
        i = skip_space(section, i)
        arguments = open_arguments(pairs)
        if section.startswith(CALL_CLOSE, i):
            return CallScan(name, arguments + "}", True), i + len(CALL_CLOSE)
        rest = section[i:]
        if not rest or any(tag.startswith(rest) for tag in (CALL_CLOSE, ARGUMENT,
                                                             JSON_ARGUMENTS)):
            return CallScan(name, arguments, False), None
        found = _argument(section, i, name, types) if rest.startswith(ARGUMENT) else \
            _json_arguments(section, i) if rest.startswith(JSON_ARGUMENTS) and not pairs \
            else _MALFORMED
        if found is None:
            return CallScan(name, arguments, False), None
        if found is _MALFORMED:
            return CallScan(name, arguments + "}", True), i  # (not the form: it ends here)
        if isinstance(found[0], dict):  # (the whole arguments as one JSON object)
            pairs = list(found[0].items())
        else:
            pairs.append(found[0])
        i = found[1]


def _argument(section: str, i: int, name: str, types: dict):
    """((key, value), the index after its closer) from `<|open|>argument`, None while
    unknown, or _MALFORMED."""
    key_end = section.find('"', i + len(ARGUMENT))
    head_end = section.find(SEP, key_end) if key_end >= 0 else -1
    at = section.find(ARGUMENT_CLOSE, head_end) if head_end >= 0 else -1
    if at < 0:
        return None
    key = _unescape(section[i + len(ARGUMENT):key_end])
    kind = types.get((name, key))
    if kind is None:  # (an argument the schema does not name: its type attribute)
        kind = "string" if 'type="string"' in section[key_end:head_end] else None
    raw = section[head_end + len(SEP):at]
    return (key, typed_value(raw, kind)), at + len(ARGUMENT_CLOSE)


def _json_arguments(section: str, i: int):
    """(the arguments object, the index after its closer) of a `json` section, None while
    unknown, or _MALFORMED."""
    start = i + len(JSON_ARGUMENTS)
    if section[skip_space(section, start):][:1] not in ("", "{"):
        return _MALFORMED  # (only an object: the arguments never shrink as it streams)
    end = value_end(section, start)
    if end is None:
        return None
    after = skip_space(section, end)
    if not section.startswith(JSON_CLOSE, after):
        return None if JSON_CLOSE.startswith(section[after:]) else _MALFORMED
    try:
        value = json.loads(section[start:end])
    except (ValueError, RecursionError):
        return _MALFORMED
    return (value, after + len(JSON_CLOSE)) if isinstance(value, dict) else _MALFORMED


# --- the grammar --------------------------------------------------------------------------

def call_rules(tools, to_gbnf) -> tuple[str, list[str]]:
    """(the rule `k3-call` for one call to any of `tools`, from its opener to its closer,
    and the rules it needs): arguments in the schema's order, a required one always, an
    optional one maybe, each saying its type; a string is any text without `<|close|>`,
    another type its JSON under the schema."""
    rules, alternatives = until_rules("k3-text", CLOSE), []
    for t, tool in enumerate(tools):
        body = in_schema_order(tool, lambda p, key, schema, t=t: _argument_rule(
            key, schema, f"k3{t}-{p}-", rules, to_gbnf))
        alternatives.append(f'("{literal(CALL + tool.name)}\\" index=\\"" [1-9] [0-9]{{0,3}} '
                            f'"\\"{literal(SEP)}" {body} "{literal(CALL_CLOSE)}")')
    return "k3-call ::= " + " | ".join(alternatives), rules


def _argument_rule(key: str, schema, prefix: str, rules: list[str], to_gbnf) -> str:
    """One argument's section: its key, its type (the template's name of the value's JSON
    type: "string" where the value is written raw), its value."""
    raw = string_value(schema, "k3-text") is not None or _takes_a_string(schema) or \
        _untyped(schema)
    value = (string_value(schema, "k3-text") or "k3-text") if raw else \
        value_rule(schema, "k3-text", prefix, rules, to_gbnf)
    kind = '"string"' if raw else _type_name(schema)
    return (f'"{literal(ARGUMENT + escape(key))}\\" type=\\"" {kind} "\\"{literal(SEP)}" '
            f'{value} "{literal(ARGUMENT_CLOSE)}"')


def _untyped(schema) -> bool:
    """A parameter whose schema says nothing of its value: raw text, as llama.cpp reads it
    (and as the template writes a string)."""
    return isinstance(schema, dict) and not any(
        key in schema for key in ("type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
                                  "properties", "items"))


def _type_name(schema) -> str:
    """The `type` attribute's grammar for a value of `schema` (its JSON type's name as
    the template's xtml_type writes it; any where the schema does not say one)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    names = {"integer": "number", "number": "number", "boolean": "boolean",
             "object": "object", "array": "array", "null": "null"}
    if isinstance(kind, str) and kind in names:
        return f'"{names[kind]}"'
    return '("number" | "boolean" | "object" | "array" | "null")'  # (JSON: never a string)
