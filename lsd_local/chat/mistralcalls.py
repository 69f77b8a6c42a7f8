"""Tool calls as Mistral's newer templates ask for them (tokenizer v11 and later: Mistral
Small 3.2, Magistral, Devstral, Ministral 3): each call its own block, the function's name
outside the JSON of its arguments, blocks back to back:

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]now[ARGS]{}

Mistral Small 3.2's template (v11) puts the call's id between the two, nine letters and
digits (`[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{...}`); the later ones write none.
The older form, one JSON list after `[TOOL_CALLS]`, is the "mistral" format (chat/listcalls.py).
Read back as the same CallScan as any JSON call (the arguments' text only grows while it
streams); the grammar makes names and arguments valid against each tool's schema.
"""

from __future__ import annotations

from .gbnfparts import literal, renamed
from .jsonscan import CallScan, skip_space, value_end

OPEN, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
MARKERS = (OPEN, ARGS, CALL_ID)  # (control tokens in Mistral's vocabulary)
THINK_OPEN, THINK_CLOSE = "[THINK]", "[/THINK]"  # Magistral's and Ministral 3's reasoning


def is_mistral_args(template: str) -> bool:
    """Whether a chat template writes calls in this form."""
    return OPEN in template and ARGS in template


def writes_call_ids(template: str) -> bool:
    """Whether its calls carry an id (Mistral Small 3.2's)."""
    return CALL_ID in template


def args_block(section: str) -> tuple[CallScan, int | None]:
    """The call a section starting with `[TOOL_CALLS]` holds so far, and where it ends after
    its arguments (None while unknown)."""
    head_end = section.find(ARGS, len(OPEN))
    if head_end < 0:
        return CallScan(None, "", False), None  # (the name is still being written)
    name = section[len(OPEN):head_end].split(CALL_ID)[0].strip() or None
    start = skip_space(section, head_end + len(ARGS))
    end = value_end(section, start)
    if end is None:
        return CallScan(name, section[start:].rstrip(), False), None
    return CallScan(name, section[start:end], True), end


def call_rules(tools, to_gbnf, call_ids: bool = False) -> tuple[str, list[str]]:
    """(the rule `ma-call` for one call to any of `tools`, after its `[TOOL_CALLS]`, and the
    rules it needs); with `call_ids`, the id of nine letters and digits before `[ARGS]`."""
    rules, alternatives = [], []
    call_id = f' "{literal(CALL_ID)}" [a-zA-Z0-9]{{9}}' if call_ids else ""
    for t, tool in enumerate(tools):
        prefix = f"ma{t}-"
        rules.append(renamed(to_gbnf(tool.parameters), prefix))
        alternatives.append(f'("{literal(tool.name)}"{call_id} "{literal(ARGS)}" '
                            f'{prefix}root)')
    return "ma-call ::= " + " | ".join(alternatives), rules
