"""Tool calls as GLM-4.5's template (and GLM-4.6's) asks for them: the function's name right
after the opener, then each argument as a key tag and a value tag:

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Oslo</arg_value>
    <arg_key>metric</arg_key>
    <arg_value>true</arg_value>
    </tool_call>

A value is raw text, as in Qwen3-Coder's XML form (chat/xmlcalls.py): a string parameter
takes it as it is, any other type reads it as JSON. Read back as the same CallScan as any
JSON call (its arguments as JSON text that only grows while the call streams); the grammar
makes names, keys and typed values valid against each tool's schema.
"""

from __future__ import annotations

from .gbnfparts import literal, until_rules
from .jsonscan import CallScan, open_arguments, skip_space
from .xmlcalls import typed_value, value_rule

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE, VALUE_CLOSE = "<arg_value>", "</arg_value>"
TAGS = (KEY, KEY_CLOSE, VALUE, VALUE_CLOSE)  # (control tokens in GLM's vocabulary, maybe)
_NAME_ENDS = ("\n", KEY, CLOSE)


def is_glm(template: str) -> bool:
    """Whether a chat template writes calls in this form."""
    return KEY in template and VALUE in template


def glm_block(section: str, types: dict) -> tuple[CallScan, int | None]:
    """The call a section starting with `<tool_call>` holds so far, and where the block
    ends after its `</tool_call>` (None while unknown). `types`: {(tool, parameter): JSON
    type} from the tools' schemas ("string" values stay text)."""
    start = skip_space(section, len(OPEN))  # (a line break before the name too)
    ends = [at for at in (section.find(end, start) for end in _NAME_ENDS) if at >= 0]
    if not ends:
        return CallScan(None, "", False), None  # (the name is still being written)
    name = section[start:min(ends)].strip()
    pairs, i, closed = _arguments(section, min(ends), name, types)
    arguments = open_arguments(pairs)
    if not closed:
        return CallScan(name or None, arguments, False), None
    return CallScan(name or None, arguments + "}", True), i


def _arguments(section: str, i: int, name: str, types: dict) -> tuple[list, int, bool]:
    """The complete arguments from i on: [(key, value)], where reading stopped (after the
    closer once closed), and whether `</tool_call>` was reached."""
    pairs = []
    while True:
        i = skip_space(section, i)
        if section.startswith(CLOSE, i):
            return pairs, i + len(CLOSE), True
        if not section.startswith(KEY, i):
            # text that is no tag ends the block there (once it cannot be a tag's start)
            rest = section[i:]
            open_tag = any(tag.startswith(rest) for tag in (CLOSE, KEY))
            return pairs, i, bool(rest) and not open_tag
        key_end = section.find(KEY_CLOSE, i)
        value_at = skip_space(section, key_end + len(KEY_CLOSE)) if key_end >= 0 else -1
        if key_end < 0 or not section.startswith(VALUE, value_at):
            return pairs, i, False
        value_end = section.find(VALUE_CLOSE, value_at + len(VALUE))
        if value_end < 0:
            return pairs, i, False
        key = section[i + len(KEY):key_end].strip()
        raw = section[value_at + len(VALUE):value_end]
        pairs.append((key, typed_value(raw, types.get((name, key)))))
        i = value_end + len(VALUE_CLOSE)


# --- the grammar ---------------------------------------------------------------------------

def call_rules(tools, to_gbnf) -> tuple[str, list[str]]:
    """(the rule `glm-call` for one call to any of `tools`, from its name to `</tool_call>`
    excluded, and the rules it needs). The line breaks after the name, a key and a value are
    optional: GLM-4.6's template writes them, llama.cpp's GLM-4.5 one only some of them."""
    rules, alternatives = until_rules("glm-text", VALUE_CLOSE), []
    for t, tool in enumerate(tools):
        props = tool.parameters.get("properties") or {}
        required = set(tool.parameters.get("required") or ())
        parts = []
        for p, (key, schema) in enumerate(props.items()):
            value = value_rule(schema, "glm-text", f"g{t}-{p}-", rules, to_gbnf)
            item = (f'"{KEY}{literal(key)}{KEY_CLOSE}" "\\n"? "{VALUE}" {value} '
                    f'"{VALUE_CLOSE}" "\\n"?')
            parts.append(f"({item})" + ("" if key in required else "?"))
        alternatives.append(f'("{literal(tool.name)}" "\\n"? {" ".join(parts)})')
    return "glm-call ::= " + " | ".join(alternatives), rules
