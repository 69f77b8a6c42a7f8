"""Tool calls as MiniMax-M3's template asks for them: one block holding every call, each an
`invoke` naming its function, each argument a tag named by its key, and every tag preceded
by the namespace marker `]<]minimax[>[` (NS below, a control token of its vocabulary):

    NS<tool_call>
    NS<invoke name="plan_trip">NS<city>Oslo NS</city>NS<stops>NS<item>NS<name>Bergen
    NS</name>NS</item>NS</stops>NS</invoke>
    NS</tool_call>

(without the line breaks inside the invoke). A value that may be a string is raw text, as
the template writes it; an object is a tag per key and an array a tag `item` per element,
nested as deep as the value (the template's `to_xml`); anything else is JSON. Read back as
the same CallScans as any JSON call, each argument once its tag is closed (so the arguments'
JSON text only grows); the grammar makes names, keys and values valid against each tool's
schema. Detected as llama.cpp does (NS, `<tool_call>` and `<invoke name=` in the template),
before the `<tool_call>` of the Hermes form that the same template also holds.
"""

from __future__ import annotations

from ..errors import ParameterError
from ..limits import SCHEMA_MAX_DEPTH
from .gbnfparts import literal, renamed, until_rules
from .jsonscan import CallScan, calls_until, skip_space
from .minimaxcalls import MALFORMED, _takes_a_string, read_invoke
from .xmlcalls import string_value, typed_value

NS = "]<]minimax[>["
OPEN, CLOSE = NS + "<tool_call>", NS + "</tool_call>"
INVOKE, INVOKE_CLOSE = NS + '<invoke name="', NS + "</invoke>"
ITEM = "item"  # an array's element's tag
IN_ARRAY = "[]"  # an element's step in a parameter's path (its key's, in an object)
MAX_DEPTH = SCHEMA_MAX_DEPTH  # nesting written as tags (deeper than a schema may: JSON)
MARKERS = (NS, "<tool_call>", "</tool_call>")  # (preserved tokens, as llama.cpp has them)
_MALFORMED = MALFORMED  # text that is not this form: the call ends where it starts


def is_minimax3(template: str | None) -> bool:
    """Whether a chat template writes calls in this form (llama.cpp's check)."""
    return bool(template) and NS in template and "<tool_call>" in template and \
        "<invoke name=" in template


# --- the schema, as the reader needs it ---------------------------------------------------

def parameter_types(tools) -> dict:
    """{(tool name, path): how its value is written} for chat.tools.Tool objects: a path is
    the keys down to a value (IN_ARRAY for an array's element); "string" (raw text),
    "object" and "array" (tags), another JSON type, or None (JSON, else text)."""
    out: dict = {}
    for tool in tools:
        _members_types(tool.name, (), tool.parameters, out, 0)
    return out


def check_keys(types: dict) -> None:
    """ParameterError for a key this form cannot name a tag by (one holding `>` or the
    marker, or starting with `/`: the reader would end its tag there)."""
    for _, path in types:
        key = path[-1]
        if ">" in key or NS in key or key.startswith("/"):
            raise ParameterError(f"invalid tools: this model's template writes each argument "
                                 f"as a tag named by its key, and {key!r} cannot name one "
                                 "(no '>', no leading '/')", param="tools")


def _members_types(name: str, path: tuple, schema: dict, out: dict, depth: int) -> None:
    props = schema.get("properties")
    for key, sub in (props.items() if isinstance(props, dict) else ()):
        _value_types(name, (*path, key), sub, out, depth)


def _value_types(name: str, path: tuple, schema: object, out: dict, depth: int) -> None:
    out[(name, path)] = written_as(schema)
    if as_tags(schema, depth):  # (within MAX_DEPTH: a request's schema may nest deep)
        shape = _shape(schema)
        if written_as(schema) == "object":
            _members_types(name, path, shape, out, depth + 1)
        else:
            _value_types(name, (*path, IN_ARRAY), shape.get("items", {}), out, depth + 1)


def _shape(schema: dict) -> dict:
    """The schema without its null alternative (`anyOf: [X, null]`, pydantic's Optional;
    `type: [X, "null"]`): the template leaves a null out, so X is what gets written."""
    options = schema.get("anyOf", schema.get("oneOf"))
    if isinstance(options, list):
        kept = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
        return _shape(kept[0]) if len(kept) == 1 and isinstance(kept[0], dict) else schema
    kinds = schema.get("type")
    if isinstance(kinds, list) and len([k for k in kinds if k != "null"]) == 1:
        return {**schema, "type": next(k for k in kinds if k != "null")}
    return schema


def written_as(schema: object) -> str | None:
    """How a value of `schema` is read back: "string" where it may be a string (llama.cpp's
    may_be_string: raw text up to its closing tag; an enum with any string too), else its
    JSON type (None: unknown). An object or array comes as tags (as the template writes
    one) or as JSON."""
    if not isinstance(schema, dict):
        return None
    choices = schema.get("enum")
    if string_value(schema, "text") is not None or _takes_a_string(schema) or (
            isinstance(choices, list) and any(isinstance(c, str) for c in choices)):
        return "string"
    shape = _shape(schema)
    kind = shape.get("type")
    if kind is None and isinstance(shape.get("properties"), dict):
        return "object"
    if kind is None and isinstance(shape.get("items"), dict):
        return "array"
    return kind if isinstance(kind, str) else None


def as_tags(schema: object, depth: int) -> bool:
    """Whether the grammar writes a value of `schema` as nested tags (as the template
    writes every mapping and list): an object with properties or an array (its items any
    value where the schema names none), within MAX_DEPTH (else its JSON)."""
    kind = written_as(schema)
    if depth >= MAX_DEPTH or kind not in ("object", "array"):
        return False
    shape = _shape(schema)
    if kind == "object":
        return isinstance(shape.get("properties"), dict) and bool(shape["properties"])
    return isinstance(shape.get("items", {}), dict)


# --- reading calls back -------------------------------------------------------------------

def minimax3_section(section: str, types: dict) -> tuple[list[CallScan], int | None]:
    """The calls a section starting with OPEN holds so far, and where it ends after its
    closer (None while unknown; text that is no call ends it). `types`: parameter_types."""
    return calls_until(section, len(OPEN), CLOSE, INVOKE,
                       lambda text, at: _invoke(text, at, types))


def _invoke(section: str, i: int, types: dict) -> tuple[CallScan, int | None]:
    """One call from after `<invoke name="` (minimaxcalls.read_invoke), its arguments tags
    after NS."""
    return read_invoke(section, i, INVOKE_CLOSE, lambda text, at, name: (
        None if INVOKE_CLOSE.startswith(text[at:]) else _element(text, at, name, (), None,
                                                                  types)))


def _element(section: str, i: int, tool: str, path: tuple, parent: str | None, types: dict):
    """The element at `i`: (its tag, its value, the index after its closing tag), None while
    unknown, or _MALFORMED. `parent`: how the enclosing value is written."""
    opener = NS + "<"
    if not section.startswith(opener, i):
        return None if opener.startswith(section[i:]) else _MALFORMED
    start = i + len(opener)
    tag_end = section.find(">", start)
    if section.startswith("/", start):
        return _MALFORMED  # (a closing tag that is not the enclosing one's)
    if tag_end < 0:
        return None if NS not in section[start:] else _MALFORMED
    tag = section[start:tag_end]
    in_array = parent == "array" or (parent != "object" and bool(path) and tag == ITEM)
    sub = (*path, IN_ARRAY if in_array else tag)
    value = _value(section, tag_end + 1, tool, sub, f"{NS}</{tag}>", types)
    if value is None or value is _MALFORMED:
        return value
    return (tag, *value)


def _value(section: str, start: int, tool: str, path: tuple, close: str, types: dict):
    """A value from `start` up to its `close`: (the value, the index after `close`), None
    while unknown, or _MALFORMED. Tags inside make an object or array, unless the schema
    takes a string (raw up to the first NS)."""
    kind = types.get((tool, path))
    if kind != "string":
        i = skip_space(section, start)
        head = section[i:i + len(NS) + 2]
        if len(head) < len(NS) + 2 and (NS + "<").startswith(head[:len(NS) + 1]):
            return None  # (tags or text: not known yet)
        if head.startswith(NS + "<") and not head.startswith(NS + "</"):
            return _children(section, i, tool, path, kind, close, types)
    at = section.find(NS, start)
    if at < 0:
        return None
    if section.startswith(close, at):
        return _leaf(section[start:at], kind), at + len(close)
    return None if close.startswith(section[at:]) else _MALFORMED


def _children(section: str, i: int, tool: str, path: tuple, kind: str | None, close: str,
              types: dict):
    """An object's or array's elements from `i` up to its `close` (as _value)."""
    tags, values = [], []
    while True:
        i = skip_space(section, i)
        if section.startswith(close, i):
            break
        if close.startswith(section[i:]):
            return None
        element = _element(section, i, tool, path, kind, types)
        if element is None or element is _MALFORMED:
            return element
        tag, value, i = element
        tags.append(tag)
        values.append(value)
    if kind == "array" or (kind != "object" and set(tags) == {ITEM}):
        return values, i + len(close)
    return dict(zip(tags, values, strict=True)), i + len(close)


def _leaf(raw: str, kind: str | None) -> object:
    """A value's text as its schema takes it (an empty object or array is written empty)."""
    if not raw.strip() and kind in ("object", "array"):
        return {} if kind == "object" else []
    return typed_value(raw, kind)


# --- the grammar --------------------------------------------------------------------------

def call_rules(tools, to_gbnf) -> tuple[str, list[str]]:
    """(the rule `m3-call` for one call to any of `tools`, from its invoke to its closer,
    and the rules it needs): arguments in the schema's order, a required one always, an
    optional one maybe; a value that may be a string is any text without NS."""
    rules = until_rules("m3-text", NS)
    alternatives = []
    for t, tool in enumerate(tools):
        members = _members_rule(tool.parameters, f"m3{t}", rules, to_gbnf, 0)
        alternatives.append(f'("{literal(INVOKE + tool.name)}\\">" {members} tool-ws '
                            f'"{literal(INVOKE_CLOSE)}")')
    return "m3-call ::= " + " | ".join(alternatives), rules


def _members_rule(schema: dict, prefix: str, rules: list[str], to_gbnf, depth: int) -> str:
    """An object's elements, a tag per key, in the schema's order."""
    required = set(schema.get("required") or ())
    props = schema.get("properties")
    parts = []
    for p, (key, sub) in enumerate(props.items() if isinstance(props, dict) else ()):
        tag = literal(f"{NS}<{key}>")
        value = _value_rule(sub, f"{prefix}-{p}", rules, to_gbnf, depth)
        element = f'(tool-ws "{tag}" {value} "{literal(f"{NS}</{key}>")}")'
        parts.append(element + ("" if key in required else "?"))
    return " ".join(parts) or '""'


def _value_rule(schema: object, prefix: str, rules: list[str], to_gbnf, depth: int) -> str:
    """A value's grammar: raw text where it may be a string, tags for an object or array
    as_tags says, else its JSON under the schema."""
    if written_as(schema) == "string":
        return string_value(schema, "m3-text") or "m3-text"
    if as_tags(schema, depth) and written_as(schema) == "object":
        return f"{_members_rule(_shape(schema), prefix, rules, to_gbnf, depth + 1)} tool-ws"
    if as_tags(schema, depth):
        item = _value_rule(_shape(schema).get("items", {}), f"{prefix}-i", rules, to_gbnf,
                           depth + 1)
        return f'(tool-ws "{literal(NS)}<{ITEM}>" {item} "{literal(NS)}</{ITEM}>")* tool-ws'
    if isinstance(schema, dict) and not schema:
        return "m3-text"  # (any value: written as text, read back as JSON where it is)
    rules.append(renamed(to_gbnf(schema if isinstance(schema, dict) else {}), f"{prefix}-"))
    return f"{prefix}-root"
