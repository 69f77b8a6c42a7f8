"""Tool calls as DeepSeek's templates ask for them (DeepSeek-V3, the R1 distills):

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

One section holds every call; each names its function outside the JSON of its arguments.
Read back as the same CallScans as a JSON call (the arguments' text only grows while it
streams); the grammar makes names and arguments valid against each tool's schema.
"""

from __future__ import annotations

from .gbnfparts import literal, renamed
from .jsonscan import CallScan, skip_space, value_end

OPEN, CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_OPEN, CALL_CLOSE = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
FENCE_OPEN, FENCE_CLOSE = "```json\n", "\n```"



def deepseek_section(section: str) -> tuple[list[CallScan], int | None]:
    """The calls a section starting with the calls' opener holds so far, and where it ends
    after its closer (None while unknown)."""
    calls, i = [], len(OPEN)
    while True:
        i = skip_space(section, i)
        if section.startswith(CLOSE, i):
            return calls, i + len(CLOSE)
        if not section.startswith(CALL_OPEN, i):
            return calls, _odd_end(section, i)
        scan, i = _call(section, i + len(CALL_OPEN))
        calls.append(scan)
        if i is None:
            return calls, None


def _odd_end(section: str, i: int) -> int | None:
    """Text that is no call: the section ends with it (None while it may still be one)."""
    rest = section[i:]
    if not rest or CALL_OPEN.startswith(rest) or CLOSE.startswith(rest):
        return None
    return i


def _call(section: str, i: int) -> tuple[CallScan, int | None]:
    """One call from after its opener: (what is known of it, where it ends or None)."""
    sep = section.find(SEP, i)
    if sep < 0:
        return CallScan(None, "", False), None
    line = section.find("\n", sep + len(SEP))
    if line < 0:
        return CallScan(None, "", False), None
    name = section[sep + len(SEP):line].strip()
    start = line + 1
    if section.startswith(FENCE_OPEN, start):
        start += len(FENCE_OPEN)
    elif FENCE_OPEN.startswith(section[start:]):
        return CallScan(name, "", False), None
    end = value_end(section, start)
    if end is None:
        return CallScan(name, section[start:].rstrip(), False), None
    arguments = section[start:end].strip()
    j = skip_space(section, end)
    if section.startswith("```", j):
        j = skip_space(section, j + 3)
    if section.startswith(CALL_CLOSE, j):
        return CallScan(name, arguments, True), j + len(CALL_CLOSE)
    if CALL_CLOSE.startswith(section[j:]) or "```".startswith(section[j:]):
        return CallScan(name, arguments, True), None
    return CallScan(name, arguments, True), j


def call_rules(tools, to_gbnf) -> tuple[str, list[str]]:
    """(the rule `ds-call` for one call to any of `tools`, the rules it needs)."""
    rules, alternatives = [], []
    for t, tool in enumerate(tools):
        prefix = f"d{t}-"
        rules.append(renamed(to_gbnf(tool.parameters), prefix))
        alternatives.append(f'("{literal(tool.name)}\\n{literal(FENCE_OPEN)}" {prefix}root '
                            f'"{literal(FENCE_CLOSE)}")')
    call = (f'ds-call ::= "{CALL_OPEN}function{SEP}" (' + " | ".join(alternatives) +
            f') "{CALL_CLOSE}"')
    return call, rules
