"""Tool calls as Cohere's Command R7B template asks for them: one action block holding a JSON
list of calls, each with an id, the tool's name and its parameters:

    <|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}
    ]<|END_ACTION|>

Read back as the same CallScans as any JSON call; the grammar makes ids, names and
parameters valid against the tools' schemas.
"""

from __future__ import annotations

from .gbnfparts import renamed
from .jsonscan import CallScan, closed_at, list_elements, scan_call

OPEN, CLOSE = "<|START_ACTION|>", "<|END_ACTION|>"
NAME_KEY, ARGUMENTS_KEY = "tool_name", "parameters"


def commandr_section(section: str) -> tuple[list[CallScan], int | None]:
    """The calls an action block (its text from the opener on) holds so far, and where it
    ends after its closer (None while unknown)."""
    elements, list_end = list_elements(section, len(OPEN))
    calls = [scan_call(section[a:b] if b else section[a:], (ARGUMENTS_KEY,), (NAME_KEY,))
             for a, b in elements]
    if list_end is None:
        return calls, None
    return calls, closed_at(section, list_end, CLOSE)


def call_rules(tools, to_gbnf) -> tuple[str, list[str]]:
    """(the rule `cr-call` for one call to any of `tools`, the rules it needs)."""
    schema = {"anyOf": [{"type": "object", "properties": {
        "tool_call_id": {"type": "string", "pattern": "^[0-9]{1,3}$"},
        NAME_KEY: {"const": tool.name}, ARGUMENTS_KEY: tool.parameters},
        "required": ["tool_call_id", NAME_KEY, ARGUMENTS_KEY], "additionalProperties": False}
        for tool in tools]}
    return "cr-call ::= cr-root", [renamed(to_gbnf(schema), "cr-")]
