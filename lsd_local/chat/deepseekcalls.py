"""Tool calls as DeepSeek's templates ask for them (DeepSeek-V3, the R1 distills):

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

or, from DeepSeek-V3.1 on, bare: `<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}
<｜tool▁call▁end｜>` (templates without the fence). One section holds every call; each names
its function outside the JSON of its arguments; the reader takes both forms.
Kimi K2 writes the bare form with its own markers, naming each call by an id that holds the
function's name and the conversation's call count:

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

(on one line). Read back as the same CallScans as a JSON call (the arguments' text only grows
while it streams); the grammar makes names and arguments valid against each tool's schema.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import NamedTuple

from .gbnfparts import literal, renamed
from .jsonscan import CallScan, skip_space, value_end

OPEN, CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_OPEN, CALL_CLOSE = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
FENCE_OPEN, FENCE_CLOSE = "```json\n", "\n```"


class Markers(NamedTuple):
    """A family's call section: its opener and closer, each call's, and what comes between
    a call's name and its arguments; `id_prefix`: a call is named by an id (Kimi's
    `functions.NAME:INDEX`), "" where by its function's name."""

    open: str
    close: str
    call_open: str
    call_close: str
    sep: str
    id_prefix: str = ""


DEEPSEEK = Markers(OPEN, CLOSE, CALL_OPEN, CALL_CLOSE, SEP)
KIMI = Markers("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
               "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>",
               "functions.")
_KIMI_ID = re.compile(r"functions\.(.+?)(?::[0-9]+)?")


def is_kimi(template: str) -> bool:
    """Whether a template writes Kimi K2's call sections (llama.cpp: both openers)."""
    return KIMI.open in template and KIMI.call_open in template


def deepseek_section(section: str, markers: Markers = DEEPSEEK
                     ) -> tuple[list[CallScan], int | None]:
    """The calls a section starting with the calls' opener holds so far, and where it ends
    after its closer (None while unknown)."""
    if markers.open.startswith(section):  # (its opener, still being written)
        return [], None
    # (Kimi's calls may come without their section's opener: llama.cpp reads them so)
    calls, i = [], len(markers.open) if section.startswith(markers.open) else 0
    while True:
        i = skip_space(section, i)
        if section.startswith(markers.close, i):
            return calls, i + len(markers.close)
        if not section.startswith(markers.call_open, i):
            return calls, _odd_end(section, i, markers)
        scan, i = _call(section, i + len(markers.call_open), markers)
        calls.append(scan)
        if i is None:
            return calls, None


def _odd_end(section: str, i: int, markers: Markers) -> int | None:
    """Text that is no call: the section ends with it (None while it may still be one)."""
    rest = section[i:]
    if not rest or markers.call_open.startswith(rest) or markers.close.startswith(rest):
        return None
    return i


def is_bare(template: str) -> bool:
    """Whether a DeepSeek template writes its calls bare (V3.1: no type, no fence)."""
    return "```json" not in template


def _call(section: str, i: int, markers: Markers) -> tuple[CallScan, int | None]:
    """One call from after its opener: (what is known of it, where it ends or None)."""
    sep = section.find(markers.sep, i)
    if sep < 0:
        return CallScan(None, "", False), None
    bare = skip_space(section, sep + len(markers.sep))
    if bare >= len(section):
        return CallScan(None, "", False), None
    if section[bare] == "{" or markers.id_prefix:  # V3.1's, Kimi's: the JSON after the name
        written = section[i:sep].strip()
        scan, end = _arguments(section, _name(written, markers), bare, markers)
        return (replace(scan, call_id=written) if markers.id_prefix else scan), end
    line = section.find("\n", sep + len(markers.sep))
    if line < 0:
        return CallScan(None, "", False), None
    name = section[sep + len(markers.sep):line].strip()
    start = line + 1
    if section.startswith(FENCE_OPEN, start):
        start += len(FENCE_OPEN)
    elif FENCE_OPEN.startswith(section[start:]):
        return CallScan(name, "", False), None
    return _arguments(section, name, start, markers)


def _name(written: str, markers: Markers) -> str:
    """The function a call names: Kimi's id `functions.NAME:INDEX` holds it."""
    if not markers.id_prefix:
        return written
    named = _KIMI_ID.fullmatch(written)
    return named.group(1) if named else written


def _arguments(section: str, name: str, start: int, markers: Markers
               ) -> tuple[CallScan, int | None]:
    """A call's arguments from their JSON's start on, then its closer (a fence's end
    before it, where the call had the fence)."""
    end = value_end(section, start)
    if end is None:
        return CallScan(name, section[start:].rstrip(), False), None
    arguments = section[start:end].strip()
    j = skip_space(section, end)
    if section.startswith("```", j):
        j = skip_space(section, j + 3)
    if section.startswith(markers.call_close, j):
        return CallScan(name, arguments, True), j + len(markers.call_close)
    if markers.call_close.startswith(section[j:]) or "```".startswith(section[j:]):
        return CallScan(name, arguments, True), None
    return CallScan(name, arguments, True), j


def call_rules(tools, to_gbnf, bare: bool = False,
               markers: Markers = DEEPSEEK) -> tuple[str, list[str]]:
    """(the rule `ds-call` for one call to any of `tools`, the rules it needs); `bare`: in
    V3.1's form; Kimi's (`markers` KIMI) names a call by an id and is always bare."""
    rules, alternatives = [], []
    for t, tool in enumerate(tools):
        prefix = f"d{t}-"
        rules.append(renamed(to_gbnf(tool.parameters), prefix))
        if markers.id_prefix:  # (Kimi's id: the name and the conversation's call count)
            name = f'"{literal(markers.id_prefix + tool.name)}:" [0-9]+ "{markers.sep}"'
        else:
            name = f'"{literal(tool.name)}{markers.sep}"'
        alternatives.append(f"({name} {prefix}root)" if bare or markers.id_prefix else
                            f'("{literal(tool.name)}\\n{literal(FENCE_OPEN)}" {prefix}root '
                            f'"{literal(FENCE_CLOSE)}")')
    head = "" if bare or markers.id_prefix else f"function{markers.sep}"
    call = f'ds-call ::= "{markers.call_open}{head}" (' + " | ".join(alternatives) + \
        f') "{markers.call_close}"'
    return call, rules
