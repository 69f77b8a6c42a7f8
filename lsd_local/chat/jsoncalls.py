"""Tool calls as small models really write them with `tool_choice: "auto"`: not in their
template's form (`<tool_call>...</tool_call>`) but as a JSON object naming a declared tool,
in a fenced block or as the whole answer:

    ```json
    {"name": "get_weather", "arguments": {"city": "Oslo"}}
    ```

Such a call opens with a fence (anywhere) or a bare `{` (as the answer's first text), then
`{"name": "<a declared tool>"`. Text whose JSON names no declared tool stays text. The same
opening is, for llama.cpp, a lazy grammar trigger (a regular expression over the generated
text) and, for the answer's reader, a scan over released text: both are built here from one
description, so that the grammar constrains exactly the calls the reader returns.

Whitespace between the JSON tokens is the tool grammar's (SPACE_RULE: nothing, a blank, or
a newline and an indent, as pretty-printed JSON has it): a JSON call the grammar could not
have produced is not read as one.
"""

from __future__ import annotations

import re

from .jsonscan import value_end

FENCE = "```"
FENCE_LANGUAGE = "json"
# JSON whitespace in tool calls: the GBNF rule, and the same as a regular expression
SPACE_RULE = '| " " | "\\n" [ \\t]{0,20}'
SPACE_REGEX = r"(?: |\n[ \t]{0,20})?"


def _regex_name(name: str) -> str:
    """A tool name (letters, digits, _ . -) as a regular expression that means the same to
    Python's re and to llama.cpp's std::regex (ECMAScript)."""
    return "".join("\\." if ch == "." else "[-]" if ch == "-" else ch for ch in name)


def trigger_patterns(names: tuple[str, ...]) -> tuple[str, ...]:
    """llama.cpp trigger patterns for calls in JSON form naming one of `names`; the grammar
    applies from the first group (the call's "{") on."""
    head = ("(\\{" + SPACE_REGEX + '"name"' + SPACE_REGEX + ":" + SPACE_REGEX + '"(?:'
            + "|".join(_regex_name(n) for n in names) + ')")')
    return (FENCE + "(?:" + FENCE_LANGUAGE + r")?[ \t]*\n[ \t]*" + head, r"^[ \t\r\n]*" + head)


def grammar_rule(parallel: bool) -> str:
    """The GBNF alternative of a tool grammar's root for a call in JSON form, from its "{"
    (`tool-call` and `tool-ws` are the tool grammar's rules): the object, then the fence's
    end where there was one; with `parallel`, more fenced calls."""
    more = (f' (tool-ws "{FENCE}" "{FENCE_LANGUAGE}"? [ \\t]{{0,2}} "\\n" [ \\t]{{0,2}} '
            f'tool-call tool-ws "{FENCE}")*') if parallel else ""
    return f'tool-call (tool-ws "{FENCE}"{more})? tool-ws'


def _literal(text: str, i: int, literal: str) -> tuple[int, str]:
    """(index after `literal` at text[i], "yes"), or "maybe" when text ends inside it."""
    piece = text[i:i + len(literal)]
    if piece == literal:
        return i + len(literal), "yes"
    return i, "maybe" if literal.startswith(piece) and i + len(piece) == len(text) else "no"


def _blanks(text: str, i: int, chars: str = " \t") -> int:
    while i < len(text) and text[i] in chars:
        i += 1
    return i


def _space(text: str, i: int) -> int:
    """The index after SPACE_REGEX's match at text[i] (longest), or -1 when text ends inside
    an indent that may go on."""
    if text.startswith(" ", i):
        return i + 1
    if not text.startswith("\n", i):
        return i
    end = _blanks(text, i + 1)
    if end - (i + 1) > 20:
        return i + 1 + 20
    return -1 if end == len(text) else end


def _call_head(text: str, i: int, names: tuple[str, ...]) -> str:
    """Whether text[i:] opens `{"name": "<one of names>"`: "yes", "maybe" or "no"."""
    for literal in ("{", " ", '"name"', " ", ":", " ", '"'):
        if literal == " ":
            i = _space(text, i)
            if i < 0:
                return "maybe"
            continue
        i, state = _literal(text, i, literal)
        if state != "yes":
            return state
    close = text.find('"', i)
    if close < 0:
        return "maybe" if any(n.startswith(text[i:]) for n in names) else "no"
    return "yes" if text[i:close] in names else "no"


def fenced_call(text: str, names: tuple[str, ...]) -> tuple[str, int]:
    """Whether `text`, which starts with a fence, opens a call: ("yes", index of its "{"),
    ("maybe", 0) while more text could make it one, or ("no", 0)."""
    i, state = _literal(text, 0, FENCE)
    if state != "yes":
        return state, 0
    i, state = _literal(text, i, FENCE_LANGUAGE)
    if state == "maybe":
        return "maybe", 0
    i = _blanks(text, i)
    i, state = _literal(text, i, "\n")
    if state != "yes":
        return state, 0
    i = _blanks(text, i)
    state = _call_head(text, i, names)
    return state, (i if state == "yes" else 0)


def bare_call(text: str, names: tuple[str, ...]) -> tuple[str, int]:
    """Whether `text`, the answer's first text, is a call in bare JSON: like fenced_call."""
    i = _blanks(text, 0, " \t\r\n")
    if i == len(text):
        return "maybe", 0
    state = _call_head(text, i, names)
    return state, (i if state == "yes" else 0)


def call_end(section: str) -> int | None:
    """Where a JSON-form call section (from its "{") ends: after its object and, when one
    follows, the fence that closes it; None while that is not known yet."""
    end = value_end(section, 0)
    if end is None:
        return None
    rest = section[end:]
    closing = rest.lstrip(" \t\r\n")
    if closing.startswith(FENCE):
        return len(section) - len(closing) + len(FENCE)
    if FENCE.startswith(closing) and re.fullmatch(r"[ \t\r\n]*`{0,2}", rest):
        return None  # (the closing fence may be on its way)
    return end
