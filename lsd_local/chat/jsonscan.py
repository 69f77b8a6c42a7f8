"""Reading tool calls out of JSON text that is still being written: where a call's name and
arguments are, how far its arguments have come, and where each element of a list of calls
starts and ends. Pure Python over strings; a prefix of valid JSON is never an error."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

_DECODER = json.JSONDecoder()
# a number as JSON writes it, whole (formats that write numbers bare keep this text as is)
JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?\Z")


def value_end(text: str, start: int) -> int | None:
    """The index after the JSON value starting at text[start] (skipping whitespace), or None
    while it is not complete yet. Strings, escapes and nesting are followed exactly."""
    i = skip_space(text, start)
    if i >= len(text):
        return None
    if text[i] in "{[":
        depth, in_string, escaped = 0, False, False
        for j in range(i, len(text)):
            ch = text[j]
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    return j + 1
        return None
    try:
        _, end = _DECODER.raw_decode(text, i)
    except json.JSONDecodeError:
        return None
    # a number may go on in the next chunk ("12" of "123"): complete only when followed
    return end if end < len(text) or text[i] in '"tfn' else None


def skip_space(text: str, i: int) -> int:
    """The index of the first non-blank character at or after i (len(text) if none)."""
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


@dataclass(frozen=True)
class CallScan:
    """What is known of one call object `{"name": ..., "arguments": ...}` so far."""

    name: str | None  # once its string is complete
    arguments: str  # the raw JSON text of the arguments written so far ("" before)
    complete: bool  # the object is closed
    call_id: str | None = None  # the id the model wrote for it (Kimi's), with its name


def scan_call(text: str, arguments_keys: tuple[str, ...] = ("arguments", "parameters"),
              name_keys: tuple[str, ...] = ("name",)) -> CallScan:
    """Scan a call object's text (which starts at its "{", possibly unfinished) for its name
    and arguments. Keys other than the name and arguments are skipped."""
    i = skip_space(text, 0)
    if i >= len(text) or text[i] != "{":
        return CallScan(None, "", False)
    i += 1
    name, arguments = None, ""
    while True:
        i = skip_space(text, i)
        if i >= len(text):
            return CallScan(name, arguments, False)
        if text[i] == "}":
            return CallScan(name, arguments, True)
        if text[i] == ",":
            i += 1
            continue
        key_end = value_end(text, i)
        if key_end is None or text[i] != '"':
            return CallScan(name, arguments, False)
        key = json.loads(text[i:key_end])
        colon = skip_space(text, key_end)
        if colon >= len(text) or text[colon] != ":":
            return CallScan(name, arguments, False)
        start = skip_space(text, colon + 1)
        end = value_end(text, start)
        if key in name_keys and end is not None:
            value = json.loads(text[start:end])
            name = value if isinstance(value, str) else None
        elif key in arguments_keys:
            arguments = text[start:end] if end is not None else text[start:]
        if end is None:
            return CallScan(name, arguments, False)
        i = end


def list_elements(text: str, start: int) -> tuple[list[tuple[int, int | None]], int | None]:
    """The elements of the JSON array whose "[" is at or after text[start] (whitespace
    first): [(element start, element end or None while unfinished)], and the index after
    the "]" (None while the array is open)."""
    i = skip_space(text, start)
    if i >= len(text) or text[i] != "[":
        return [], None
    i += 1
    elements: list[tuple[int, int | None]] = []
    while True:
        i = skip_space(text, i)
        if i >= len(text):
            return elements, None
        if text[i] == "]":
            return elements, i + 1
        if text[i] == ",":
            i += 1
            continue
        end = value_end(text, i)
        elements.append((i, end))
        if end is None:
            return elements, None
        i = end


def closed_at(text: str, i: int, closer: str) -> int | None:
    """Where a call section whose JSON ended at text[i] ends: after `closer` when it comes
    next (blanks first), None while it may still be coming, else at i."""
    j = skip_space(text, i)
    if text.startswith(closer, j):
        return j + len(closer)
    return None if closer.startswith(text[j:]) else i


def scan_named(text: str) -> CallScan:
    """Scan a call written as `{"NAME": {arguments}}` (Apertus's: the name is the key),
    from its "{" and possibly unfinished."""
    i = skip_space(text, 0)
    if i >= len(text) or text[i] != "{":
        return CallScan(None, "", False)
    i = skip_space(text, i + 1)
    key_end = value_end(text, i)
    if key_end is None or text[i] != '"':
        return CallScan(None, "", False)
    name = json.loads(text[i:key_end])
    colon = skip_space(text, key_end)
    if colon >= len(text) or text[colon] != ":":
        return CallScan(name, "", False)
    start = skip_space(text, colon + 1)
    end = value_end(text, start)
    if end is None:
        return CallScan(name, text[start:], False)
    close = skip_space(text, end)
    return CallScan(name, text[start:end], close < len(text) and text[close] == "}")


def open_arguments(pairs: list[tuple[str, object]]) -> str:
    """The JSON text of the arguments read so far, ((key, value), ...), without its closing
    brace (which comes once the call is known to be complete): it only grows."""
    return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs)


def calls_until(section: str, i: int, close: str, opener: str,
                read_call: Callable[[str, int], tuple[CallScan, int | None]]
                ) -> tuple[list[CallScan], int | None]:
    """The calls of a block from `i` (MiniMax's and Kimi K3's forms): each starts with
    `opener` and is read by `read_call(section, index after the opener)` -> (what is known
    of it, the index after it or None while it goes on); the block ends after `close`
    (None while unknown). Text that is no call ends the block where it starts."""
    calls = []
    while True:
        i = skip_space(section, i)
        rest = section[i:]
        if rest.startswith(close):
            return calls, i + len(close)
        if not rest.startswith(opener):
            waiting = not rest or any(tag.startswith(rest) for tag in (close, opener))
            return calls, None if waiting else i
        scan, i = read_call(section, i + len(opener))
        calls.append(scan)
        if i is None:
            return calls, None
