"""Functionary v3.2's messages: its generation prompt ends with `>>>`, and every message the
model writes names its recipient on its first line, `all` for the answer, a function for a
call whose JSON arguments follow; the next message starts with `>>>` right after:

    all
    Let me look.>>>get_weather
    {"city": "Oslo"}>>>now
    {}

(llama.cpp's template; its detection: `>>>all` and `>>>${recipient}` in the template.) The
recipient lines are neither content nor calls. `>>>` alone opens nothing: a line of a
Python session in the answer (`>>> x = 1`) names no recipient and stays text. The old
Functionary's raw code for a tool named `python` (not JSON) is not read: the grammar makes
every call's arguments JSON.
"""

from __future__ import annotations

import json
import re

from .gbnfparts import literal, renamed
from .jsonscan import CallScan, skip_space, value_end

OPEN = ">>>"
# (more ">" before a name: the lazy grammar's trigger, too, finds ">>>NAME" in ">>>>NAME")
RECIPIENT = re.compile(r"(?:>>>+)?([A-Za-z0-9_.\-]{1,64})\n")
MAYBE_RECIPIENT = re.compile(r">{1,2}|(?:>>>+)?[A-Za-z0-9_.\-]{0,64}")  # (may become one)


def is_functionary(template: str | None) -> bool:
    """Whether a chat template writes messages so (llama.cpp's check)."""
    return bool(template) and ">>>all" in template and ">>>${recipient}" in template


def template_messages(messages: list[dict]) -> list[dict]:
    """The template adds a call's arguments to text: JSON text, not an object."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            calls = [{**call, "function": {**call["function"], "arguments": _json_text(
                call["function"].get("arguments", {}))}} for call in calls]
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


def _json_text(arguments: object) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments,
                                                                   ensure_ascii=False)


def functionary_block(section: str) -> tuple[CallScan, int | None]:
    """The call a section `NAME\\n{...}` (after its `>>>`, or at the answer's start) holds so
    far, and where it ends after its arguments (None while unknown)."""
    head = RECIPIENT.match(section)
    if head is None:
        return CallScan(None, "", False), None
    start = skip_space(section, head.end())
    end = value_end(section, start)
    if end is None:
        return CallScan(head.group(1), section[start:].rstrip(), False), None
    return CallScan(head.group(1), section[start:end], True), end


def call_grammar(tools, parallel: bool, to_gbnf, lazy: bool) -> str:
    """GBNF for one call to any of `tools` (more, each after `>>>`, if `parallel`), from its
    name (the prompt wrote the first `>>>`); `lazy`: or from a `>>>` (triggered later)."""
    rules, alternatives = [], []
    for t, tool in enumerate(tools):
        prefix = f"fn{t}-"
        rules.append(renamed(to_gbnf(tool.parameters), prefix))
        alternatives.append(f'("{literal(tool.name)}\\n" {prefix}root)')
    more = f' ("{OPEN}" fn-call)*' if parallel else ""
    head = f'"{OPEN}"? ' if lazy else ""
    return "\n".join([f"root ::= {head}fn-call{more}",
                      "fn-call ::= " + " | ".join(alternatives), *rules])


def triggers(tools) -> tuple[str, ...]:
    """Lazy grammar triggers: a declared function named as the answer's first recipient,
    or after `>>>`."""
    names = "|".join(re.escape(tool.name) for tool in tools)
    return (f"^(?:{names})\\n", f"{re.escape(OPEN)}(?:{names})\\n")
