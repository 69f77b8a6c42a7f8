"""Helpers for tests of tool-call readers: feed an answer to an OutputParser in chunks, as
rounds release it; check that a reader's arguments only grow over every prefix of a text
(what streaming deltas rely on)."""

from __future__ import annotations


def feed_in_chunks(parser, text: str, size: int) -> tuple[str, str, list]:
    """(content, reasoning, tool-call deltas) of `text` fed `size` characters at a time."""
    content, reasoning, deltas = "", "", []
    for i in range(0, len(text), size):
        parts = parser.feed([(text[i:i + size], None)], i + size >= len(text))
        content += "".join(t for t, _ in parts.content)
        reasoning += "".join(t for t, _ in parts.reasoning)
        deltas += parts.tool_calls
    return content, reasoning, deltas


def streamed_arguments(deltas: list, index: int) -> str:
    """The arguments' text of call `index`, joined from its deltas."""
    return "".join(d.arguments or "" for d in deltas if d.index == index)


def growing_prefixes(read, text: str) -> tuple[list[str], int | None]:
    """Read every prefix of `text` with `read` (text -> ([CallScan], end or None)) and
    assert that each call's arguments only grow and that an end, once known, is the whole
    text's: (the arguments read from the whole text, the first prefix length at which the
    first call's name was known)."""
    seen: list[str] = []
    named_at = None
    for n in range(len(text) + 1):
        scans, end = read(text[:n])
        for i, scan in enumerate(scans):
            if i < len(seen):
                assert scan.arguments.startswith(seen[i]), (n, scan.arguments, seen[i])
                seen[i] = scan.arguments
            else:
                seen.append(scan.arguments)
        if scans and scans[0].name is not None and named_at is None:
            named_at = n
        assert end is None or end == len(text), (n, end)
    return seen, named_at


def single(read_block):
    """A reader of one call per block (text -> (CallScan, end)) as growing_prefixes reads."""
    def read(text: str) -> tuple[list, int | None]:
        scan, end = read_block(text)
        return [scan], end
    return read
