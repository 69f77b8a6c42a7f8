"""Tool calls as MiniMax-M2's template asks for them: one block holding every call, each an
`invoke` naming its function, each argument a `parameter` naming its key:

    <minimax:tool_call>
    <invoke name="get_weather"><parameter name="city">Oslo</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    </minimax:tool_call>

A value is raw text, as in Qwen3-Coder's XML form (chat/xmlcalls.py): a string parameter
takes it as it is, any other type reads it as JSON. Read back as the same CallScans as any
JSON call (each argument once its value is closed, so the arguments' JSON text only grows);
the grammar makes names, keys and typed values valid against each tool's schema.

MiniCPM5 writes each call alone, with other tag names, a string holding `<`, `&` or a line
break inside CDATA: `<function name="get_weather"><param name="city">Oslo</param></function>`.
DeepSeek-V3.2 and V4 write MiniMax's form in their DSML tags (a block of `function_calls`,
V4's `tool_calls`), each parameter saying whether it is a string:
`<｜DSML｜parameter name="city" string="true">Oslo</｜DSML｜parameter>`.
"""

from __future__ import annotations

from typing import NamedTuple

from .gbnfparts import in_schema_order, literal, until_rules
from .jsonscan import CallScan, calls_until, open_arguments, skip_space
from .jsonscan import value_end as json_end
from .xmlcalls import string_value, typed_value, value_rule

OPEN, CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
INVOKE, INVOKE_CLOSE = '<invoke name="', "</invoke>"
PARAMETER, PARAMETER_CLOSE = '<parameter name="', "</parameter>"
CDATA_OPEN, CDATA_CLOSE = "<![CDATA[", "]]>"


class Tags(NamedTuple):
    """A family's call tags: the block around the calls ("" where each call stands alone),
    a call's and an argument's; `says_string`: a parameter's tag says whether its value is
    a string (DSML's `string="true"`)."""

    open: str
    close: str
    invoke: str
    invoke_close: str
    parameter: str
    parameter_close: str
    says_string: bool = False


MINIMAX = Tags(OPEN, CLOSE, INVOKE, INVOKE_CLOSE, PARAMETER, PARAMETER_CLOSE)
MINICPM = Tags("", "", '<function name="', "</function>", '<param name="', "</param>")
DSML = "｜DSML｜"


def dsml_tags(block: str) -> Tags:
    """DeepSeek's DSML tags, its block named `block` (V3.2's function_calls, V4's
    tool_calls)."""
    return Tags(f"<{DSML}{block}>", f"</{DSML}{block}>", f'<{DSML}invoke name="',
                f"</{DSML}invoke>", f'<{DSML}parameter name="', f"</{DSML}parameter>", True)


DSML_V32, DSML_V4 = dsml_tags("function_calls"), dsml_tags("tool_calls")


def is_minimax(template: str) -> bool:
    """Whether a chat template writes calls in this form."""
    return OPEN in template


def tags_for(name: str, variant: str = "") -> Tags:
    """The tags of a MiniMax-like format (minimax, minicpm, dsml and its variant "v4")."""
    if name == "dsml":
        return DSML_V4 if variant == "v4" else DSML_V32
    return MINICPM if name == "minicpm" else MINIMAX


def dsml_of(template: str) -> Tags | None:
    """The DSML tags a DeepSeek-V3.2 or V4 template writes calls in (None: not DSML)."""
    if DSML not in template:
        return None
    return DSML_V32 if "function_calls" in template else DSML_V4


def is_minicpm(template: str) -> bool:
    """Whether a chat template writes MiniCPM5's calls (llama.cpp: both tags)."""
    return MINICPM.invoke in template and MINICPM.parameter in template


def minimax_section(section: str, types: dict, tags: Tags = MINIMAX
                    ) -> tuple[list[CallScan], int | None]:
    """The calls a section starting with `<minimax:tool_call>` holds so far, and where it
    ends after its closer (None while unknown). `types`: {(tool, parameter): JSON type}.
    Where calls stand alone (MiniCPM5), the section is one call."""
    if not tags.open:
        scan, end = _invoke(section, len(tags.invoke), types, tags)
        return [scan], end
    return calls_until(section, len(tags.open), tags.close, tags.invoke,
                       lambda text, at: _invoke(text, at, types, tags))


def invoke_name(section: str, i: int) -> tuple[str, int] | None:
    """The name of a call from after `<invoke name="`, and the index after its `">` (None
    while it is not known yet)."""
    name_end = section.find('">', i)
    return None if name_end < 0 else (section[i:name_end], name_end + 2)


MALFORMED = object()  # text that is not the form: the call ends where it starts


def read_invoke(section: str, i: int, close: str, element) -> tuple[CallScan, int | None]:
    """One call from after `<invoke name="` (MiniMax's forms): (what is known of it, the index
    after its `close`, or None while it goes on). `element(section, i, name)` reads the
    argument at i: (key, value, the index after it), None while it is being written, or
    MALFORMED."""
    head = invoke_name(section, i)
    if head is None:
        return CallScan(None, "", False), None
    (name, i), pairs = head, []
    while True:
        i = skip_space(section, i)
        arguments = open_arguments(pairs)
        if section.startswith(close, i):
            return CallScan(name, arguments + "}", True), i + len(close)
        found = element(section, i, name)
        if found is None:
            return CallScan(name, arguments, False), None
        if found is MALFORMED:
            return CallScan(name, arguments + "}", True), i  # (not the form: it ends here)
        key, value, i = found
        pairs.append((key, value))


def _invoke(section: str, i: int, types: dict, tags: Tags) -> tuple[CallScan, int | None]:
    """One call from after `<invoke name="` (read_invoke), its arguments parameter tags."""
    return read_invoke(section, i, tags.invoke_close,
                       lambda text, at, name: _parameter_at(text, at, name, types, tags))


def _parameter_at(section: str, i: int, name: str, types: dict, tags: Tags):
    """The parameter at i: (key, typed value, the index after its closer), None while it is
    being written, or MALFORMED."""
    if not section.startswith(tags.parameter, i):
        rest = section[i:]
        waiting = not rest or any(tag.startswith(rest) for tag in (tags.invoke_close,
                                                                    tags.parameter))
        return None if waiting else MALFORMED
    # (the key is the name's text; DSML's string="..." may follow it in the tag)
    key_end = section.find('"', i + len(tags.parameter))
    tag_end = section.find('">', key_end) if key_end >= 0 else -1
    key = section[i + len(tags.parameter):key_end]
    kind = types.get((name, key))
    value = _value(section, tag_end + 2, kind, tags.parameter_close, not tags.open) \
        if tag_end >= 0 else None
    if value is None:
        return None
    raw, end = value
    return key, typed_value(raw, kind), end + len(tags.parameter_close)


def _value(section: str, start: int, kind: str | None, closer: str,
           cdata: bool) -> tuple[str, int] | None:
    """A parameter's raw value and its closer's index (None while unknown): a string's up to
    the first closer (or, with `cdata`, MiniCPM5's, all inside a CDATA block); another type's
    JSON at its own end, since a string inside it may hold the closer (JSON that starts a
    container or string and is not done yet: wait)."""
    if kind != "string":
        i = skip_space(section, start)
        end = json_end(section, i)
        if end is not None:
            after = skip_space(section, end)
            if section.startswith(closer, after):
                return section[start:after], after
            if closer.startswith(section[after:]):
                return None  # (the closer may be on its way)
        elif section[i:i + 1] in ("{", "[", '"'):
            return None
    rest = section[start:start + len(CDATA_OPEN)]
    if cdata and rest and CDATA_OPEN.startswith(rest) and kind in ("string", None):
        if len(rest) < len(CDATA_OPEN):
            return None  # (a CDATA block may be opening)
        inner_end = section.find(CDATA_CLOSE, start + len(CDATA_OPEN))
        if inner_end < 0:
            return None
        after = inner_end + len(CDATA_CLOSE)
        if section.startswith(closer, after):
            return section[start + len(CDATA_OPEN):inner_end], after
        if closer.startswith(section[after:]):
            return None
    at = section.find(closer, start)
    return (section[start:at], at) if at >= 0 else None


# --- the grammar ---------------------------------------------------------------------------

def call_rules(tools, to_gbnf, tags: Tags = MINIMAX) -> tuple[str, list[str]]:
    """(the rule `mm-call` for one call to any of `tools`, its invoke from opener to
    closer, and the rules it needs): parameters in the schema's order, a required one
    always, an optional one maybe; a string is any text without `</parameter>` (or, in
    MiniCPM5's form, any text in a CDATA block), another type its JSON under the schema."""
    rules, alternatives = until_rules("mm-text", tags.parameter_close), []
    text = "mm-text"
    if not tags.open:  # (MiniCPM5 wraps a value holding <, & or a line break in CDATA)
        rules += [*_cdata_rules(), f'mm-string ::= "{literal(CDATA_OPEN)}" mm-cdata '
                                   f'"{CDATA_CLOSE}" | mm-plain']
        text = "mm-string"
    # (DSML's templates write two line breaks in a call without arguments)
    around = ("tool-ws", " tool-ws") if tags.says_string else ('"\\n"?', "")
    for t, tool in enumerate(tools):
        body = in_schema_order(tool, lambda p, key, schema, t=t: _parameter(
            key, schema, f"mm{t}-{p}-", tags, text, rules, to_gbnf))
        alternatives.append(f'("{literal(tags.invoke + tool.name)}\\">" {around[0]} '
                            f'{body}{around[1]} "{tags.invoke_close}")')
    return "mm-call ::= " + " | ".join(alternatives), rules


def _parameter(key: str, schema, prefix: str, tags: Tags, text: str, rules: list[str],
               to_gbnf) -> str:
    """One parameter's tag, value and closer. DSML's tag says whether the value is a raw
    string (string="true": also where the schema takes a string among other types, as
    llama.cpp's may_be_string) or JSON (string="false")."""
    value = value_rule(schema, text, prefix, rules, to_gbnf)
    says = ""
    if tags.says_string:
        raw = string_value(schema, text) is not None or _takes_a_string(schema)
        value = text if raw and string_value(schema, text) is None else value
        says = f' string=\\"{"true" if raw else "false"}\\"'
    return (f'"{literal(tags.parameter + key)}\\"{says}>" {value} '
            f'"{tags.parameter_close}" "\\n"?')


def _takes_a_string(schema) -> bool:
    """Whether one of a schema's alternatives (anyOf, oneOf) takes a string."""
    if not isinstance(schema, dict):
        return False
    return any(string_value(option, "") is not None or _takes_a_string(option)
               for key in ("anyOf", "oneOf") for option in schema.get(key) or ()
               if isinstance(option, dict))


def _cdata_rules() -> list[str]:
    """`mm-cdata`: any text without `]]>` (how many `]` it ends with: 0, 1, 2 or more; what
    until_rules gives for `]]>`, written out). And
    `mm-plain`: `mm-text` (any text without `</param>`) that does not start with `<![CDATA[`
    (as llama.cpp's parser: a value that opens a CDATA block is one), by how much of that
    opener it starts with (mm-plain1..8), then mm-text's own states (its 1: after a `<`)."""
    rules = ["mm-cdata ::= mm-cdata0",
             'mm-cdata0 ::= ([^\\]] mm-cdata0 | "]" mm-cdata1)?',
             'mm-cdata1 ::= ([^\\]] mm-cdata0 | "]" mm-cdata2)?',
             'mm-cdata2 ::= ("]" mm-cdata2 | [^\\]>] mm-cdata0)?',
             'mm-plain ::= ([^<] mm-text0 | "<" mm-plain1)?',
             'mm-plain1 ::= ("/" mm-text2 | "!" mm-plain2 | "<" mm-text1 | [^/!<] mm-text0)?']
    for i, char in enumerate(CDATA_OPEN[2:], start=2):  # (after "<!": "[CDATA[")
        go_on = f'"{literal(char)}" mm-plain{i + 1} | ' if i + 1 < len(CDATA_OPEN) else ""
        other = "\\" + char if char in "[]" else char
        rules.append(f'mm-plain{i} ::= ({go_on}"<" mm-text1 | [^{other}<] mm-text0)?')
    return rules
