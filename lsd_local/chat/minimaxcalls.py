"""Tool calls as MiniMax-M2's template asks for them: one block holding every call, each an
`invoke` naming its function, each argument a `parameter` naming its key:

    <minimax:tool_call>
    <invoke name="get_weather"><parameter name="city">Oslo</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    </minimax:tool_call>

A value is raw text, as in Qwen3-Coder's XML form (chat/xmlcalls.py): a string parameter
takes it as it is, any other type reads it as JSON. Read back as the same CallScans as any
JSON call (each argument once its value is closed, so the arguments' JSON text only grows);
the grammar makes names, keys and typed values valid against each tool's schema.
"""

from __future__ import annotations

import json

from .gbnfparts import literal, until_rules
from .jsonscan import CallScan, skip_space
from .jsonscan import value_end as json_end
from .xmlcalls import typed_value, value_rule

OPEN, CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
INVOKE, INVOKE_CLOSE = '<invoke name="', "</invoke>"
PARAMETER, PARAMETER_CLOSE = '<parameter name="', "</parameter>"


def is_minimax(template: str) -> bool:
    """Whether a chat template writes calls in this form."""
    return OPEN in template


def minimax_section(section: str, types: dict) -> tuple[list[CallScan], int | None]:
    """The calls a section starting with `<minimax:tool_call>` holds so far, and where it
    ends after its closer (None while unknown). `types`: {(tool, parameter): JSON type}."""
    calls, i = [], len(OPEN)
    while True:
        i = skip_space(section, i)
        rest = section[i:]
        if rest.startswith(CLOSE):
            return calls, i + len(CLOSE)
        if not rest.startswith(INVOKE):
            waiting = not rest or any(tag.startswith(rest) for tag in (CLOSE, INVOKE))
            return calls, None if waiting else i  # (text that is no call ends the block)
        scan, i = _invoke(section, i + len(INVOKE), types)
        calls.append(scan)
        if i is None:
            return calls, None


def _invoke(section: str, i: int, types: dict) -> tuple[CallScan, int | None]:
    """One call from after `<invoke name="`: (what is known of it, the index after its
    `</invoke>`, or None while it goes on)."""
    name_end = section.find('">', i)
    if name_end < 0:
        return CallScan(None, "", False), None
    name, pairs, i = section[i:name_end], [], name_end + 2
    while True:
        i = skip_space(section, i)
        arguments = "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs)
        if section.startswith(INVOKE_CLOSE, i):
            return CallScan(name, arguments + "}", True), i + len(INVOKE_CLOSE)
        if not section.startswith(PARAMETER, i):
            rest = section[i:]
            if not rest or any(tag.startswith(rest) for tag in (INVOKE_CLOSE, PARAMETER)):
                return CallScan(name, arguments, False), None
            return CallScan(name, arguments + "}", True), i  # (not the form: it ends here)
        key_end = section.find('">', i + len(PARAMETER))
        key = section[i + len(PARAMETER):key_end]
        end = _value_end(section, key_end + 2, types.get((name, key))) if key_end >= 0 else None
        if end is None:
            return CallScan(name, arguments, False), None
        pairs.append((key, typed_value(section[key_end + 2:end], types.get((name, key)))))
        i = end + len(PARAMETER_CLOSE)


def _value_end(section: str, start: int, kind: str | None) -> int | None:
    """Where a parameter's value ends (its closer's index; None while unknown): a string's at
    the first closer; another type's JSON at its own end, since a string inside it may hold
    the closer (JSON that starts a container or string and is not done yet: wait)."""
    if kind != "string":
        i = skip_space(section, start)
        end = json_end(section, i)
        if end is not None:
            after = skip_space(section, end)
            if section.startswith(PARAMETER_CLOSE, after):
                return after
            if PARAMETER_CLOSE.startswith(section[after:]):
                return None  # (the closer may be on its way)
        elif section[i:i + 1] in ("{", "[", '"'):
            return None
    at = section.find(PARAMETER_CLOSE, start)
    return at if at >= 0 else None


# --- the grammar ---------------------------------------------------------------------------

def call_rules(tools, to_gbnf) -> tuple[str, list[str]]:
    """(the rule `mm-call` for one call to any of `tools`, its invoke from opener to
    closer, and the rules it needs): parameters in the schema's order, a required one
    always, an optional one maybe; a string is any text without `</parameter>`, another
    type its JSON under the schema."""
    rules, alternatives = until_rules("mm-text", PARAMETER_CLOSE), []
    for t, tool in enumerate(tools):
        props = tool.parameters.get("properties") or {}
        required = set(tool.parameters.get("required") or ())
        parts = []
        for p, (key, schema) in enumerate(props.items()):
            value = value_rule(schema, "mm-text", f"mm{t}-{p}-", rules, to_gbnf)
            item = f'"{literal(PARAMETER + key)}\\">" {value} "{PARAMETER_CLOSE}" "\\n"?'
            parts.append(f"({item})" + ("" if key in required else "?"))
        alternatives.append(f'("{literal(INVOKE + tool.name)}\\">" "\\n"? {" ".join(parts)} '
                            f'"{INVOKE_CLOSE}")')
    return "mm-call ::= " + " | ".join(alternatives), rules
