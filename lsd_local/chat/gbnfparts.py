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
