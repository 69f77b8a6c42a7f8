"""Pieces for grammars assembled from several JSON-schema conversions (tool-call formats
whose calls hold one converted schema per tool or per parameter: chat/xmlcalls.py,
chat/deepseekcalls.py)."""

from __future__ import annotations

import re

_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[A-Za-z0-9_-]+|\s+|.')


def renamed(gbnf: str, prefix: str) -> str:
    """A converted schema's rules with every rule name prefixed (several conversions then
    live in one grammar); quoted text and character classes are left alone."""
    names = set(re.findall(r"(?m)^([A-Za-z0-9_-]+) ::=", gbnf))
    return "".join(f"{prefix}{t}" if t in names else t for t in _TOKEN.findall(gbnf))


def literal(text: str) -> str:
    """`text` as a GBNF string literal's inside (quotes, backslashes, line breaks escaped)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def until_rules(name: str, end: str) -> list[str]:
    """Rules of `name`: any text that does not contain `end` (what comes before a closing
    marker). An automaton over how much of `end` the text ends with (Knuth-Morris-Pratt's:
    a broken match falls back to the longest part of `end` that the text still ends with,
    so that an end whose start repeats inside it, as MiniMax-M3's `]<]minimax[>[`, is found
    wherever it starts)."""
    first = literal(end[0])
    go_on = f' | "{first}" {name}1' if len(end) > 1 else ""  # (one character: never it)
    rules = [f"{name} ::= {name}0", f"{name}0 ::= ([^{_in_class(end[0])}] {name}0{go_on})?"]
    for i in range(1, len(end)):
        char = literal(end[i])
        go_on = f'"{char}" {name}{i + 1} | ' if i + 1 < len(end) else ""
        # (each other character of `end` leads to what the text then ends with of it)
        back = {c: _matched(end, end[:i] + c) for c in dict.fromkeys(end) if c != end[i]}
        back = {c: n for c, n in back.items() if n}
        others = "".join(f'"{literal(c)}" {name}{n} | ' for c, n in back.items())
        excluded = "".join(_in_class(c) for c in (end[i], *back))
        rules.append(f"{name}{i} ::= ({go_on}{others}[^{excluded}] {name}0)?")
    return rules


def _in_class(char: str) -> str:
    """`char` inside a GBNF character class (llama.cpp: `]`, `\\` and `-` escaped)."""
    return "\\" + char if char in "]\\-" else literal(char)


def _matched(end: str, text: str) -> int:
    """The length of the longest start of `end` that `text` ends with (short of all)."""
    for n in range(min(len(text), len(end) - 1), 0, -1):
        if text.endswith(end[:n]):
            return n
    return 0


def in_schema_order(tool, item) -> str:
    """GBNF of a call's arguments one after another in its schema's order (XML-like forms):
    `item(p, key, schema)` for the p-th, a required one always, an optional one maybe.
    `tool`: a chat.toolspec.Tool."""
    props = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or ())
    return " ".join(f"({item(p, key, schema)})" + ("" if key in required else "?")
                    for p, (key, schema) in enumerate(props.items()))


def in_order(items: list[tuple[str, bool]], sep: str = '","') -> str:
    """GBNF for `items` ((grammar, required)) in order, each optional one maybe left out,
    with `sep` (a GBNF expression) between two that are written (a call's arguments)."""
    after = ""  # the items from i on, once one before them was written
    start = ""  # the items from i on, none written before them
    for grammar, needed in reversed(items):
        tail = f"({sep} {grammar})" + ("" if needed else "?")
        first = f"{grammar} {after}".strip()
        start = first if needed else (f"({first} | {start})" if start else f"({first})?")
        after = f"{tail} {after}".strip()
    return start
