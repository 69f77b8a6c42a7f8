"""Tool calls as GLM-4.5's template (and GLM-4.6's) asks for them: the function's name right
after the opener, then each argument as a key tag and a value tag:

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Oslo</arg_value>
    <arg_key>metric</arg_key>
    <arg_value>true</arg_value>
    </tool_call>

Tencent's Hy3 writes the same with every tag marked `:opensource`, the name ended by
`<tool_sep:opensource>`, and its calls in a `<tool_calls:opensource>` block (HY3).

A value is raw text, as in Qwen3-Coder's XML form (chat/xmlcalls.py): a string parameter
takes it as it is, any other type reads it as JSON. Read back as the same CallScan as any
JSON call (its arguments as JSON text that only grows while the call streams); the grammar
makes names, keys and typed values valid against each tool's schema.
"""

from __future__ import annotations

from typing import NamedTuple

from .gbnfparts import in_schema_order, literal, until_rules
from .jsonscan import CallScan, calls_until, open_arguments, skip_space
from .xmlcalls import typed_value, value_rule

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE, VALUE_CLOSE = "<arg_value>", "</arg_value>"
TAGS = (KEY, KEY_CLOSE, VALUE, VALUE_CLOSE)  # (control tokens in GLM's vocabulary, maybe)


class Tags(NamedTuple):
    """A family's call tags: a call's, an argument's key and value; `sep`: what ends the
    name besides a line break ("" none); `block`: the block around the calls (none: "")."""

    open: str
    close: str
    key: str
    key_close: str
    value: str
    value_close: str
    sep: str = ""
    block: tuple[str, str] = ("", "")
    prefix: str = "glm"  # of the grammar's rules


GLM = Tags(OPEN, CLOSE, *TAGS)
HY = ":opensource"  # (Hy3's template builds every tag as '<name{}>'.format(HYTK))
HY3 = Tags(*(f"<{tag}{HY}>" for tag in ("tool_call", "/tool_call", "arg_key", "/arg_key",
                                        "arg_value", "/arg_value", "tool_sep")),
           (f"<tool_calls{HY}>", f"</tool_calls{HY}>"), "hy")
HY3_MARKERS = (*HY3[:7], *HY3.block)


def is_glm(template: str) -> bool:
    """Whether a chat template writes calls in this form."""
    return KEY in template and VALUE in template


def is_hy3(template: str | None) -> bool:
    """Whether a chat template is Hy3's (its tags are built, so none is spelled whole)."""
    return bool(template) and "hy_Assistant" in template and f"'{HY}'" in template


def glm_block(section: str, types: dict, tags: Tags = GLM) -> tuple[CallScan, int | None]:
    """The call a section starting with `<tool_call>` holds so far, and where the block
    ends after its `</tool_call>` (None while unknown). `types`: {(tool, parameter): JSON
    type} from the tools' schemas ("string" values stay text)."""
    return _call(section, len(tags.open), types, tags)


def hy3_section(section: str, types: dict) -> tuple[list[CallScan], int | None]:
    """The calls a section starting with Hy3's `<tool_calls:opensource>` holds so far, and
    where it ends after its closer (None while unknown; text that is no call ends it)."""
    return calls_until(section, len(HY3.block[0]), HY3.block[1], HY3.open,
                       lambda text, at: _call(text, at, types, HY3))


def _call(section: str, start: int, types: dict, tags: Tags) -> tuple[CallScan, int | None]:
    """One call from after its opener: (what is known of it, the index after its closer or
    None while it goes on)."""
    start = skip_space(section, start)  # (a line break before the name too)
    ends = [at for at in (section.find(end, start) for end in
                          ("\n", tags.key, tags.close, *((tags.sep,) if tags.sep else ())))
            if at >= 0]
    if not ends:
        return CallScan(None, "", False), None  # (the name is still being written)
    name = section[start:min(ends)].strip()
    after = min(ends) + (len(tags.sep) if tags.sep and
                         section.startswith(tags.sep, min(ends)) else 0)
    pairs, i, closed = _arguments(section, after, name, types, tags)
    arguments = open_arguments(pairs)
    if not closed:
        return CallScan(name or None, arguments, False), None
    return CallScan(name or None, arguments + "}", True), i


def _arguments(section: str, i: int, name: str, types: dict,
               tags: Tags) -> tuple[list, int, bool]:
    """The complete arguments from i on: [(key, value)], where reading stopped (after the
    closer once closed), and whether `</tool_call>` was reached."""
    pairs = []
    while True:
        i = skip_space(section, i)
        if section.startswith(tags.close, i):
            return pairs, i + len(tags.close), True
        if not section.startswith(tags.key, i):
            # text that is no tag ends the block there (once it cannot be a tag's start)
            rest = section[i:]
            open_tag = any(tag.startswith(rest) for tag in (tags.close, tags.key))
            return pairs, i, bool(rest) and not open_tag
        key_end = section.find(tags.key_close, i)
        value_at = skip_space(section, key_end + len(tags.key_close)) if key_end >= 0 else -1
        if key_end < 0 or not section.startswith(tags.value, value_at):
            return pairs, i, False
        value_end = section.find(tags.value_close, value_at + len(tags.value))
        if value_end < 0:
            return pairs, i, False
        key = section[i + len(tags.key):key_end].strip()
        raw = section[value_at + len(tags.value):value_end]
        pairs.append((key, typed_value(raw, types.get((name, key)))))
        i = value_end + len(tags.value_close)


# --- the grammar ---------------------------------------------------------------------------

def call_rules(tools, to_gbnf, tags: Tags = GLM) -> tuple[str, list[str]]:
    """(the rule `glm-call` (`hy-call`) for one call to any of `tools`, from its name to
    `</tool_call>` excluded, and the rules it needs). The line breaks after the name, a key
    and a value are optional: GLM-4.6's template writes them, llama.cpp's GLM-4.5 one only
    some of them."""
    text, name = f"{tags.prefix}-text", f"{tags.prefix[0]}"
    rules, alternatives = until_rules(text, tags.value_close), []
    sep = f' "{literal(tags.sep)}"' if tags.sep else ""
    for t, tool in enumerate(tools):
        body = in_schema_order(tool, lambda p, key, schema, t=t: (
            f'"{tags.key}{literal(key)}{tags.key_close}" "\\n"? "{tags.value}" '
            f'{value_rule(schema, text, f"{name}{t}-{p}-", rules, to_gbnf)} '
            f'"{tags.value_close}" "\\n"?'))
        alternatives.append(f'("{literal(tool.name)}"{sep} "\\n"? {body})')
    return f"{tags.prefix}-call ::= " + " | ".join(alternatives), rules
