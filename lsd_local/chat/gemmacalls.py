"""Tool calls as Gemma 4's template asks for them: one block per call, the arguments in
Gemma's own notation (keys bare, strings between `<|"|>` marks, no escapes inside them;
numbers, true, false and null as in JSON; nested objects and arrays alike), the keys in
the order the template sorts them (case-insensitive), several calls back to back:

    <|tool_call>call:get_weather{city:<|"|>Oslo<|"|>,days:3}<tool_call|>

Read back as the same CallScan as any JSON call (its arguments as JSON text that only grows
while the call streams: each argument once its value is complete). The grammar makes names,
required keys, strings, enums and scalars valid against each tool's schema; a nested object
or array, or a schema mixing strings with other types, is held to Gemma's notation only
(llama.cpp's own grammar checks no types at all). A key the notation cannot write bare (one
with a ":") is written between the quote marks, which the reader takes too.

Tool results: an older Gemma 4 template reads them as `tool_responses` on the model's turn
(llama.cpp converts the messages for it, and so does `template_messages`); the newer one
reads OpenAI's `tool` messages itself (it carries OPENAI_MARKER).
"""

from __future__ import annotations

import json
import re

from .gbnfparts import in_order, literal, renamed, until_rules
from .jsonscan import JSON_NUMBER, CallScan, skip_space
from .xmlcalls import string_value

OPEN, CLOSE, QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
CALL = "call:"
MARKERS = (OPEN, CLOSE, QUOTE)  # (control tokens in Gemma 4's vocabulary)
OPENAI_MARKER = "{#- OpenAI Chat Completions:"  # a template that reads `tool` messages itself
_SCALAR = re.compile(r"[^,}\]\s<]+")
_BARE_KEY = re.compile(r"[A-Za-z0-9_.$-]+\Z")  # a key the notation can write bare
_DECODER = json.JSONDecoder()


class _Number(str):
    """A number as written (JSON's syntax): its text goes into the arguments unchanged, as
    in every other format, never through a float (1e999 is no Infinity)."""


class _More(Exception):
    """The text ends inside the value being read."""


def is_gemma(template: str) -> bool:
    """Whether a chat template writes calls in this form."""
    return OPEN + CALL in template


def gemma_block(section: str) -> tuple[CallScan, int | None]:
    """The call a section starting with `<|tool_call>` holds so far, and where the block
    ends after its `<tool_call|>` (None while unknown)."""
    i = skip_space(section, len(OPEN))
    if section.startswith(CALL, i):
        i += len(CALL)
    elif CALL.startswith(section[i:]):
        return CallScan(None, "", False), None
    brace, close = section.find("{", i), section.find(CLOSE, i)
    if close >= 0 and (brace < 0 or close < brace):  # no arguments written at all
        return CallScan(section[i:close].strip() or None, "{}", True), close + len(CLOSE)
    if brace < 0:
        return CallScan(None, "", False), None  # (the name is still being written)
    name = section[i:brace].strip() or None
    pairs, j, state = _members(section, brace + 1)
    arguments = "{" + ", ".join(f"{json.dumps(k)}: {_json(v)}" for k, v in pairs)
    if state == "open":
        return CallScan(name, arguments, False), None
    if state == "bad":  # not Gemma's notation: the block ends where it stopped being so
        return CallScan(name, arguments + "}", True), j
    k = skip_space(section, j)
    if section.startswith(CLOSE, k):
        return CallScan(name, arguments + "}", True), k + len(CLOSE)
    if CLOSE.startswith(section[k:]):
        return CallScan(name, arguments + "}", True), None  # (the closer may be on its way)
    return CallScan(name, arguments + "}", True), j


def _members(text: str, i: int) -> tuple[list, int, str]:
    """The complete key-value pairs of an object from after its "{" at i: (pairs, where
    reading stopped, "closed" | "open" (the text ends inside) | "bad")."""
    pairs: list = []
    i = skip_space(text, i)
    if text.startswith("}", i):
        return pairs, i + 1, "closed"
    while True:
        try:
            key, value, i = _member(text, i)
        except _More:
            return pairs, i, "open"
        except ValueError:
            return pairs, i, "bad"
        pairs.append((key, value))
        i = skip_space(text, i)
        if i >= len(text):
            return pairs, i, "open"
        if text[i] == "}":
            return pairs, i + 1, "closed"
        if text[i] != ",":
            return pairs, i, "bad"
        i = skip_space(text, i + 1)


def _member(text: str, i: int) -> tuple[str, object, int]:
    """(key, value, index after the value) of `key:value` at text[i]."""
    if text.startswith(QUOTE, i) or text.startswith('"', i):
        key, i = _value(text, i)
    else:
        colon = text.find(":", i)
        if colon < 0:
            if re.search(r"[},]", text[i:]):
                raise ValueError("a key without a value")
            raise _More
        key, i = text[i:colon].strip(), colon
        if re.search(r"[{}\[\],]", key):
            raise ValueError("not a key")
    i = skip_space(text, i)
    if i >= len(text):
        raise _More
    if text[i] != ":" or not isinstance(key, str) or not key:
        raise ValueError("not a key")
    value, i = _value(text, i + 1)
    return key, value, i


def _value(text: str, i: int) -> tuple[object, int]:
    """(value, index after it) of the Gemma value at text[i] (blanks skipped); _More while
    the text ends inside it, ValueError where it is none."""
    i = skip_space(text, i)
    rest = text[i:]
    if not rest or (QUOTE.startswith(rest) and rest != QUOTE):
        raise _More
    if rest.startswith(QUOTE):
        end = text.find(QUOTE, i + len(QUOTE))
        if end < 0:
            raise _More
        return text[i + len(QUOTE):end], end + len(QUOTE)
    if rest[0] == '"':  # JSON's quotes, which a model may write too
        try:
            return _DECODER.raw_decode(text, i)
        except ValueError:
            raise _More from None  # (an invalid string shows as one that never ends)
    if rest[0] in "{[":
        return _container(text, i)
    match = _SCALAR.match(text, i)
    if match is None:
        raise ValueError("not a value")
    if match.end() == len(text):
        raise _More  # (a number may go on)
    word = match.group()
    if word in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[word], match.end()
    if not JSON_NUMBER.match(word):
        raise ValueError("not a value")
    return _Number(word), match.end()


def _json(value: object) -> str:
    """A read value as JSON text (numbers as written)."""
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_json(v) for v in value) + "]"
    return json.dumps(value)


def _container(text: str, i: int) -> tuple[object, int]:
    """An object or array at text[i]."""
    if text[i] == "{":
        pairs, j, state = _members(text, i + 1)
        if state != "closed":
            raise _More if state == "open" else ValueError("not an object")
        return dict(pairs), j
    items, j = [], skip_space(text, i + 1)
    if text.startswith("]", j):
        return items, j + 1
    while True:
        item, j = _value(text, j)
        items.append(item)
        j = skip_space(text, j)
        if j >= len(text):
            raise _More
        if text[j] == "]":
            return items, j + 1
        if text[j] != ",":
            raise ValueError("not an array")
        j += 1


# --- the grammar ---------------------------------------------------------------------------

GENERIC_RULES = [
    'gm-value ::= gm-string | gm-object | gm-array | gm-number | "true" | "false" | "null"',
    f'gm-string ::= "{literal(QUOTE)}" gm-text "{literal(QUOTE)}"',
    'gm-object ::= "{" (gm-key ":" gm-value ("," gm-key ":" gm-value)*)? "}"',
    'gm-array ::= "[" (gm-value ("," gm-value)*)? "]"',
    "gm-key ::= [A-Za-z_] [A-Za-z0-9_.-]*",
    'gm-number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?',
    *until_rules("gm-text", QUOTE)]


def call_rules(tools, to_gbnf) -> tuple[str, list[str]]:
    """(the rule `gm-call` for one call to any of `tools`, from "call:" to the arguments'
    "}", and the rules it needs). Keys come in the template's order (sorted, ignoring
    case); a required one must be there, an optional one may."""
    rules, alternatives = list(GENERIC_RULES), []
    for t, tool in enumerate(tools):
        props = tool.parameters.get("properties") or {}
        required = set(tool.parameters.get("required") or ())
        items = []
        for p, key in enumerate(sorted(props, key=str.lower)):
            value = _value_rule(props[key], f"gm{t}-{p}-", rules, to_gbnf)
            written = key if _BARE_KEY.match(key) else QUOTE + key + QUOTE  # (as read back)
            items.append((f'"{literal(written)}:" {value}', key in required))
        head = literal(CALL + tool.name)
        alternatives.append(f'("{head}{{" {in_order(items)} "}}")' if items else
                            f'"{head}{{}}"')
    return "gm-call ::= " + " | ".join(alternatives), rules


def _value_rule(schema: object, prefix: str, rules: list[str], to_gbnf) -> str:
    """The grammar of one parameter's value: a string (or one of its strings) between the
    quote marks; numbers, booleans and null (types, enums, consts) as their JSON under the
    schema; anything else (objects, arrays, schemas mixing strings with other types) in
    Gemma's notation only (rules gain what it needs)."""
    text = string_value(schema, "gm-text")
    if text is not None:
        return f'"{literal(QUOTE)}" {text} "{literal(QUOTE)}"'
    if _scalar_schema(schema):  # (no blank after it: the template writes none)
        scalar = re.sub(r"(?m)^space ::= .*$", 'space ::= ""', to_gbnf(schema))
        rules.append(renamed(scalar, prefix))
        return f"{prefix}root"
    return "gm-value"


def _scalar_schema(schema: object) -> bool:
    """Whether a schema admits numbers, booleans or null only (its JSON is Gemma's too)."""
    if not isinstance(schema, dict) or any(k in schema for k in ("anyOf", "oneOf", "allOf",
                                                                 "$ref", "not")):
        return False
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    choices = [schema["const"]] if "const" in schema else schema.get("enum")
    if kinds is None and choices is None:
        return False
    scalar = {"integer", "number", "boolean", "null"}
    return (kinds is None or (isinstance(kinds, list) and set(kinds) <= scalar)) and \
        (choices is None or (isinstance(choices, list) and all(
            c is None or isinstance(c, (bool, int, float)) for c in choices)))


# --- tool results, for a template that reads them from the model's turn -----------------

def template_messages(messages: list[dict]) -> list[dict]:
    """Messages for an older Gemma 4 template: an assistant turn's calls, the `tool`
    messages answering them and an assistant answer that follows (content, no calls; where
    the calling turn has no text of its own) become one turn with `tool_responses`
    ({"name", "response": the result's JSON, or its text})."""
    out, i = [], 0
    while i < len(messages):
        message = messages[i]
        i += 1
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            out.append(message)
            continue
        calls, responses = message["tool_calls"], []
        while i < len(messages) and messages[i].get("role") == "tool":
            responses.append(_response(messages[i], calls, len(responses)))
            i += 1
        merged = {**message, "tool_responses": responses}
        if responses and not message.get("content") and i < len(messages) and \
                messages[i].get("role") == "assistant" and not messages[i].get("tool_calls"):
            merged["content"] = messages[i].get("content")
            i += 1
        out.append(merged)
    return out


def _response(tool_message: dict, calls: list, index: int) -> dict:
    """One `tool_responses` entry: named by the call it answers (its id, else the call at
    the same place)."""
    answered = [c for c in calls if c.get("id") is not None and
                c.get("id") == tool_message.get("tool_call_id")]
    call = answered[0] if answered else calls[index] if index < len(calls) else {}
    name = (call.get("function") or {}).get("name") or tool_message.get("tool_call_id", "")
    content = tool_message.get("content")
    try:
        response = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        response = content
    return {"name": name, "response": response}
