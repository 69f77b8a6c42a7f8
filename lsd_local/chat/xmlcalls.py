"""Tool calls in XML form, as Qwen3-Coder's template asks for them:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Oslo
    </parameter>
    </function>
    </tool_call>

A parameter's value is raw text: a string parameter takes it as it is, any other type reads
it as JSON (so `42` is a number where the schema says integer, text where it says string).
Reading a call back gives the same CallScan as a JSON call (its arguments as JSON text that
only grows while the call streams); the grammar makes the call's structure, names and
typed values valid against each tool's schema. The Hermes form shares its tags
(`<tool_call>{"name": ..., "arguments": ...}</tool_call>`): `hermes_block` finds its bounds.
Seed-OSS writes the same calls in `<seed:tool_call>` blocks, each value right between its
tags (`<parameter=city>Oslo</parameter>`): "tight".
"""

from __future__ import annotations

import json

from .gbnfparts import in_schema_order, literal, renamed, until_rules
from .jsonscan import CallScan, open_arguments, skip_space, value_end

OPEN, CLOSE = "<tool_call>", "</tool_call>"
SEED_OPEN, SEED_CLOSE = "<seed:tool_call>", "</seed:tool_call>"
FUNCTION, FUNCTION_CLOSE = "<function=", "</function>"
PARAMETER, PARAMETER_CLOSE = "<parameter=", "</parameter>"


def hermes_block(section: str) -> tuple[int, int | None, int | None]:
    """(where the call's JSON starts, where it ends, where the block ends after its
    `</tool_call>`) in a section that starts with `<tool_call>`; None while unknown. The end is
    found from the JSON, so that a string argument may hold "</tool_call>"."""
    start = len(OPEN)
    while start < len(section) and section[start] in " \t\r\n":
        start += 1
    if start < len(section) and section[start] != "{":  # not JSON: the first closer ends it
        at = section.find(CLOSE, start)
        return start, (at if at >= 0 else None), (at + len(CLOSE) if at >= 0 else None)
    json_end = value_end(section, start)
    if json_end is None:
        return start, None, None
    rest = section[json_end:]
    closer = rest.lstrip()
    if closer.startswith(CLOSE):
        return start, json_end, len(section) - len(closer) + len(CLOSE)
    if CLOSE.startswith(closer):
        return start, json_end, None  # (the closer may be on its way)
    return start, json_end, json_end  # something else follows: the block ends with its JSON


def xml_block(section: str, types: dict, tight: bool = False) -> tuple[CallScan, int | None]:
    """The call a section starting with `<tool_call>` holds so far, and where the block
    ends after its `</tool_call>` (None while unknown). `types`: {(tool, parameter): JSON
    type} from the tools' schemas ("string" values stay text). `tight`: Seed-OSS's blocks
    and values."""
    opener, closer = (SEED_OPEN, SEED_CLOSE) if tight else (OPEN, CLOSE)
    i = skip_space(section, len(opener))
    if not section.startswith(FUNCTION, i):
        return CallScan(None, "", False), _not_a_call_end(section, i, closer)
    close = section.find(">", i + len(FUNCTION))
    if close < 0:
        return CallScan(None, "", False), None
    name = section[i + len(FUNCTION):close].strip()
    pairs, i, closed = _parameters(section, close + 1, name, types, tight)
    arguments = open_arguments(pairs)
    if not closed:
        return CallScan(name, arguments, False), None
    arguments += "}"
    i = skip_space(section, i)
    if section.startswith(closer, i):
        return CallScan(name, arguments, True), i + len(closer)
    if closer.startswith(section[i:]):
        return CallScan(name, arguments, True), None  # (the closer may be on its way)
    return CallScan(name, arguments, True), i  # something else follows: the block ends


def _not_a_call_end(section: str, i: int, closer: str) -> int | None:
    """A block that is no XML call ends at its closer (None while neither is known)."""
    if i >= len(section) or FUNCTION.startswith(section[i:]):
        return None
    at = section.find(closer, i)
    return at + len(closer) if at >= 0 else None


def _parameters(section: str, i: int, name: str, types: dict,
                tight: bool = False) -> tuple[list, int, bool]:
    """The complete parameters from i on: [(name, value)], where reading stopped, and
    whether `</function>` was reached; `tight`: each value is all between its tags."""
    pairs = []
    while True:
        i = skip_space(section, i)
        if section.startswith(FUNCTION_CLOSE, i):
            return pairs, i + len(FUNCTION_CLOSE), True
        if not section.startswith(PARAMETER, i):
            return pairs, i, False
        close = section.find(">", i + len(PARAMETER))
        if close < 0:
            return pairs, i, False
        start = close + 2 if section.startswith("\n", close + 1) and not tight else close + 1
        # the value ends at the first line break before the closing tag (what the grammar
        # writes and never lets a value contain); a value written without one ends at the tag
        end = -1 if tight else section.find(VALUE_END, start - 1)
        after = end + len(VALUE_END)
        if end < 0:
            end = after = section.find(PARAMETER_CLOSE, start)
            if end < 0:
                return pairs, i, False
            after = end + len(PARAMETER_CLOSE)
        key = section[i + len(PARAMETER):close].strip()
        raw = section[start:max(end, start)]
        pairs.append((key, typed_value(raw, types.get((name, key)))))
        i = after


def typed_value(raw: str, kind: str | None) -> object:
    """A parameter's text as its schema's type takes it: text for strings, else JSON when
    it reads as JSON (what it is not stays text; the grammar prevents that when it runs)."""
    if kind == "string":
        return raw
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # (not JSON, or nested past Python's stack)
        return raw


def parameter_types(tools) -> dict:
    """{(tool name, parameter): its schema's "type" (a string, or None)} for chat.tools.Tool
    objects."""
    out = {}
    for tool in tools:
        for key, schema in (tool.parameters.get("properties") or {}).items():
            kind = schema.get("type") if isinstance(schema, dict) else None
            if kind is None and string_value(schema) not in (None, "xml-text"):
                kind = "string"  # (an enum or const of strings only: written raw)
            if isinstance(kind, list) and "string" in kind:
                kind = "string"  # (its grammar is raw text: read back as written)
            out[(tool.name, key)] = kind if isinstance(kind, str) else None
    return out


# --- the grammar ---------------------------------------------------------------------------

VALUE_END = "\n" + PARAMETER_CLOSE


def _text_rules() -> list[str]:
    """`xml-text`: any text that does not contain VALUE_END (a string value: the closing
    line is what ends it, and nothing before)."""
    return until_rules("xml-text", VALUE_END)


def call_rules(tools, to_gbnf, tight: bool = False) -> tuple[str, list[str]]:
    """(the rule `xml-call` for one call to any of `tools`, the rules it needs); `tight`:
    values right between their tags (Seed-OSS), any text without the closing tag."""
    text = "seed-text" if tight else "xml-text"
    rules = until_rules(text, PARAMETER_CLOSE) if tight else _text_rules()
    alternatives = []
    # (a line break on each side of the value, exactly: what the reader strips)
    around = ("", "") if tight else ("\\n", "\\n")
    for t, tool in enumerate(tools):
        body = in_schema_order(tool, lambda p, key, schema, t=t: (
            f'"{PARAMETER}{literal(key)}>{around[0]}" '
            f'{value_rule(schema, text, f"x{t}-{p}-", rules, to_gbnf)} '
            f'"{around[1]}{PARAMETER_CLOSE}" tool-ws'))
        alternatives.append(f'("{FUNCTION}{literal(tool.name)}>" tool-ws {body} '
                            f'"{FUNCTION_CLOSE}")')
    return "xml-call ::= " + " | ".join(alternatives), rules


def value_rule(schema: object, text_rule: str, prefix: str, rules: list[str], to_gbnf) -> str:
    """The grammar of a parameter's value where a string is written raw (string_value) and
    any other type as its JSON under the schema (`rules` gains that schema's rules, named
    with `prefix`)."""
    value = string_value(schema, text_rule)
    if value is None:
        rules.append(renamed(to_gbnf(schema if isinstance(schema, dict) else {}), prefix))
        value = f"{prefix}root"
    return value


def string_value(schema: object, text_rule: str = "xml-text") -> str | None:
    """The grammar of a parameter's raw text when the schema takes a string: one of its
    enum or its const when they are all strings, else any text (`text_rule`: without the
    value's closing tag; a pattern or length is not enforced here). Such a value is written
    raw, as the templates write a string (`v if v is string`), also when the schema names no
    type or more than one. None for a parameter that takes no string: its JSON."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    choices = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices) \
            and kind in (None, "string"):
        return "(" + " | ".join(f'"{literal(c)}"' for c in choices) + ")"
    takes_text = kind == "string" or (isinstance(kind, list) and "string" in kind)
    return text_rule if takes_text and choices is None else None
