"""Tool calls as one JSON list of `{"name": ..., "arguments": {...}}` objects after an opener,
and before a closer where the family writes one:

- "mistral": `[TOOL_CALLS][...]` (Mistral 7B v0.3, Nemo: templates with `[TOOL_CALLS]`);
- "nemotron": `<TOOLCALL>[...]</TOOLCALL>` (NVIDIA Nemotron Nano v2: templates with
  `<TOOLCALL>`);
- "granite": `<|tool_call|>[...]` (IBM Granite 3: templates with `<|tool_call|>`);
- "apriel": `<tool_calls>[...]</tool_calls>` (ServiceNow's Apriel 1.6: templates with
  `<tool_calls>[`);
- "firefunction": ` functools[...]` (Fireworks' FireFunction v2: templates with
  ` functools[`; its template reads the tools as `functions`, JSON text, and `datetime`);
- "minimax1": `<tool_calls>` and one object per line, no list, `</tool_calls>` (MiniMax-M1:
  templates with `<tool_calls>` and no list after it);
- "apertus": `<|tools_prefix|>[{"NAME": {...}}, ...]<|tools_suffix|>`, each call named by
  its key (Swiss AI's Apertus).

Read back as the same CallScans as any JSON call; the grammar (chat/tools.py) makes each
element a valid call of one of the tools.

GigaChat 3 writes one call, no list, as a message of its own after the answer's:
`<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": ..., "arguments": {...}}`; GigaChat
3.1 the same object after `<|function_call|>`.
"""

from __future__ import annotations

from .gbnfparts import literal, renamed
from .jsonscan import (
    CallScan,
    closed_at,
    list_elements,
    scan_call,
    scan_named,
    skip_space,
    value_end,
)

# name -> (opener, closer or ""), in the order they are looked for in a template
# (an opener that ends with "[" opens the list itself; MiniMax-M1's is no list: see LINES)
LIST_FORMATS = {"nemotron": ("<TOOLCALL>", "</TOOLCALL>"), "granite": ("<|tool_call|>", ""),
                "mistral": ("[TOOL_CALLS]", ""), "apriel": ("<tool_calls>", "</tool_calls>"),
                "firefunction": (" functools[", ""),
                "minimax1": ("<tool_calls>", "</tool_calls>"),
                "apertus": ("<|tools_prefix|>", "<|tools_suffix|>")}
LINES = "minimax1"  # the format whose calls are one JSON object per line
NAMED = "apertus"  # the format whose calls are {"NAME": {arguments}}
# what a template must hold to write a format's lists, one of (its opener, unless named
# here): MiniMax-M1's line break after its opener, escaped in a Jinja string or not (a
# template with `<tool_calls>` and a list in it is not its)
_FOUND_BY = {"apriel": ("<tool_calls>[",), "minimax1": ("<tool_calls>\\n", "<tool_calls>\n")}


def list_format(template: str) -> str | None:
    """The list format a template writes calls in (None: none of them)."""
    return next((name for name, (opener, _) in LIST_FORMATS.items()
                 if any(sign in template for sign in _FOUND_BY.get(name, (opener,)))), None)


def list_block(section: str, name: str) -> tuple[list[CallScan], int | None]:
    """The calls a section starting with format `name`'s opener holds so far, and where it
    ends (after its closer, where it has one; None while unknown)."""
    opener, closer = LIST_FORMATS[name]
    if name == LINES:
        elements, list_end = line_elements(section, len(opener))
    else:
        elements, list_end = list_elements(section, len(opener) - opener.endswith("["))
    scan = scan_named if name == NAMED else scan_call
    calls = [scan(section[a:b] if b else section[a:]) for a, b in elements]
    if list_end is None or not closer:
        return calls, list_end
    return calls, closed_at(section, list_end, closer)


def line_elements(text: str, start: int) -> tuple[list[tuple[int, int | None]], int | None]:
    """list_elements for JSON objects one after another (MiniMax-M1's lines): the elements,
    and the index after the last once other text follows (None while more may come)."""
    elements: list[tuple[int, int | None]] = []
    i = start
    while True:
        j = skip_space(text, i)
        if j >= len(text):
            return elements, None
        if text[j] != "{":
            return elements, i
        end = value_end(text, j)
        elements.append((j, end))
        if end is None:
            return elements, None
        i = end


GIGACHAT_OPEN = "<|message_sep|>\n\nfunction call<|role_sep|>\n"
GIGACHAT31_OPEN = "<|function_call|>"
GIGACHAT_MARKERS = ("<|message_sep|>", "<|role_sep|>", GIGACHAT31_OPEN)


def gigachat_opener(template: str) -> str | None:
    """What a GigaChat 3 or 3.1 template's call starts with (None: not GigaChat's; llama.cpp
    finds both by their separators, 3.1 by `<|function_call|>`)."""
    if not all(marker in template for marker in GIGACHAT_MARKERS[:2]):
        return None
    return GIGACHAT31_OPEN if GIGACHAT31_OPEN in template else GIGACHAT_OPEN


def gigachat_block(section: str, opener: str = GIGACHAT_OPEN) -> tuple[CallScan, int | None]:
    """The call a section starting with `opener` holds so far, and where it ends (its JSON's
    end; None while unknown)."""
    start = len(opener)
    end = value_end(section, skip_space(section, start))
    return scan_call(section[start:end] if end else section[start:]), end


def list_root(name: str, more: str) -> str:
    """The grammar root of format `name`'s calls (`tool-call`, `tool-ws`: the tool grammar's
    rules; `more`: the rule for further calls, "" for one)."""
    opener, closer = LIST_FORMATS[name]
    close = f' tool-ws "{literal(closer)}"' if closer else ""
    if name == LINES:  # (as its template writes them)
        more = '("\\n" tool-call)*' if more else ""
        return f'"{literal(opener)}\\n" tool-call {more} "\\n{literal(closer)}"'
    bracket = "" if opener.endswith("[") else ' "["' if name == NAMED else ' tool-ws "["'
    call = "ap-call" if name == NAMED else "tool-call"  # (Apertus's: "[" right after)
    return f'"{literal(opener)}"{bracket} tool-ws {call} {more} tool-ws "]"{close}'


def named_call_rules(tools, to_gbnf) -> tuple[str, list[str]]:
    """(the rule `ap-call`: one call `{"NAME": {arguments}}` to any of `tools`, and the rules
    it needs): the schema of such an object, converted."""
    schema = {"anyOf": [{"type": "object", "properties": {tool.name: tool.parameters},
                         "required": [tool.name], "additionalProperties": False}
                        for tool in tools]}
    return "ap-call ::= ap-root", [renamed(to_gbnf(schema), "ap-")]
