"""Tool calls as DeepSeek's templates ask for them (DeepSeek-V3, the R1 distills):

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

or, from DeepSeek-V3.1 on, bare: `<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}
<｜tool▁call▁end｜>` (templates without the fence). One section holds every call; each names
its function outside the JSON of its arguments; the reader takes both forms.
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


def is_bare(template: str) -> bool:
    """Whether a DeepSeek template writes its calls bare (V3.1: no type, no fence)."""
    return "```json" not in template


def _call(section: str, i: int) -> tuple[CallScan, int | None]:
    """One call from after its opener: (what is known of it, where it ends or None)."""
    sep = section.find(SEP, i)
    if sep < 0:
        return CallScan(None, "", False), None
    bare = skip_space(section, sep + len(SEP))
    if bare >= len(section):
        return CallScan(None, "", False), None
    if section[bare] == "{":  # V3.1's: the name before the separator, the JSON after it
        return _arguments(section, section[i:sep].strip(), bare)
    line = section.find("\n", sep + len(SEP))
    if line < 0:
        return CallScan(None, "", False), None
    name = section[sep + len(SEP):line].strip()
    start = line + 1
    if section.startswith(FENCE_OPEN, start):
        start += len(FENCE_OPEN)
    elif FENCE_OPEN.startswith(section[start:]):
        return CallScan(name, "", False), None
    return _arguments(section, name, start)


def _arguments(section: str, name: str, start: int) -> tuple[CallScan, int | None]:
    """A call's arguments from their JSON's start on, then its closer (a fence's end
    before it, where the call had the fence)."""
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


def call_rules(tools, to_gbnf, bare: bool = False) -> tuple[str, list[str]]:
    """(the rule `ds-call` for one call to any of `tools`, the rules it needs); `bare`: in
    V3.1's form."""
    rules, alternatives = [], []
    for t, tool in enumerate(tools):
        prefix = f"d{t}-"
        rules.append(renamed(to_gbnf(tool.parameters), prefix))
        alternatives.append(f'("{literal(tool.name)}{SEP}" {prefix}root)' if bare else
                            f'("{literal(tool.name)}\\n{literal(FENCE_OPEN)}" {prefix}root '
                            f'"{literal(FENCE_CLOSE)}")')
    head = "" if bare else f"function{SEP}"
    call = f'ds-call ::= "{CALL_OPEN}{head}" (' + " | ".join(alternatives) + f') "{CALL_CLOSE}"'
    return call, rules
