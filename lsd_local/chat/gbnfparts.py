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
    marker). An automaton over how much of `end` the text ends with; `end` must repeat no
    prefix of itself (no border: "\\n</parameter>", "<|end|>"), so that a broken match falls
    back to state 0, or to 1 on `end`'s first character."""
    first = literal(end[0])
    rules = [f"{name} ::= {name}0", f'{name}0 ::= ([^{first}] {name}0 | "{first}" {name}1)?']
    for i in range(1, len(end)):
        char = literal(end[i])
        go_on = f'"{char}" {name}{i + 1} | ' if i + 1 < len(end) else ""
        rules.append(f'{name}{i} ::= ({go_on}"{first}" {name}1 | [^{char}{first}] {name}0)?')
    return rules


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
