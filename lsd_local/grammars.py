"""Where grammars come from: the shipped `grammars/*.gbnf`, a user's file, GBNF text, or a JSON
schema. Returns GBNF text and a label for error messages; compiling is the backend's job."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from functools import partial
from pathlib import Path

from .errors import GrammarError, ParameterError
from .models.resources import data_path

GRAMMAR_SUFFIX = ".gbnf"


def grammar_dir() -> Path | None:
    """The grammars/ folder that ships with lsd."""
    return data_path("grammars")


def shipped_grammars() -> dict[str, Path]:
    """Name -> file of every grammar that ships with lsd."""
    folder = grammar_dir()
    if folder is None:
        return {}
    return {path.stem: path for path in sorted(folder.glob(f"*{GRAMMAR_SUFFIX}"))}


def _read(path: Path, what: str) -> str:
    if path.is_dir():
        raise GrammarError(f"{what} {path} is a directory, not a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise GrammarError(f"{what} {path} is not UTF-8 text") from None
    except OSError as exc:
        raise GrammarError(f"cannot read {what} {path}: {exc.strerror}") from None


def grammar_text(spec: str | os.PathLike) -> tuple[str, str]:
    """(GBNF text, label) for a shipped grammar name, a .gbnf path or inline GBNF text."""
    spec_text = os.fspath(spec)
    shipped = shipped_grammars()
    if spec_text in shipped:
        return _read(shipped[spec_text], "grammar"), f"grammar {spec_text!r}"
    if "::=" in spec_text:
        return spec_text, "grammar"
    path = Path(spec_text).expanduser()
    if path.exists():
        return _read(path, "grammar file"), f"grammar file {path}"
    names = ", ".join(shipped) or "none installed"
    raise GrammarError(f"unknown grammar {spec_text!r}: not a file, not GBNF text, and not a "
                       f"shipped grammar ({names})")


def load_schema(spec: dict | str | os.PathLike) -> tuple[dict, str]:
    """(schema, label) from a dict, a JSON file path or JSON text; errors name line/column."""
    if isinstance(spec, dict):
        return spec, "JSON schema"
    text = os.fspath(spec)
    label = "JSON schema"
    if not text.lstrip().startswith("{"):
        path = Path(text).expanduser()
        if not path.exists():
            raise GrammarError(f"JSON schema file not found: {path}")
        text, label = _read(path, "JSON schema file"), f"JSON schema {path}"
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GrammarError(f"invalid {label}: line {exc.lineno}, column {exc.colno}: "
                           f"{exc.msg}") from None
    return schema, label


def compile_constraint(model, grammar: str | os.PathLike | None = None,
                       json_schema: dict | str | os.PathLike | None = None, around=None):
    """The grammar state (a backend Grammar) for a request on `model` (a backend Model; None
    without a constraint); GrammarError with the line and column when the grammar or schema
    is invalid, ParameterError when both are given. `around(gbnf)`: the whole answer's
    grammar around a schema's (a format whose answer is more than its JSON: harmony)."""
    # imported here: lsd serve's HTTP process reads grammar names from this module and must
    # not load llama.cpp
    from .backend import Grammar, schema_to_gbnf

    if grammar is not None and json_schema is not None:
        raise ParameterError("invalid grammar: give a grammar or a JSON schema, not both",
                             param="grammar")
    if json_schema is not None:
        schema, label = load_schema(json_schema)
        text = schema_to_gbnf(schema, label)
        return Grammar.compile(model, around(text) if around else text, source=label)
    if grammar is not None:
        text, label = grammar_text(grammar)
        return Grammar.compile(model, text, source=label)
    return None


def request_grammar(model, request, plan, parser):
    """The grammar state a request (request.Request) decodes under on `model` (a backend
    Model; None: free text): its tools' calls (chat/tools.ToolPlan `plan`), else its grammar
    or JSON schema (harmony: the schema's JSON in the final channel), after the reasoning
    block the prompt opened, and told the reasoning markers of the answer's OutputParser
    `parser` (None: no template) so that no call is read inside a block."""
    from .chat.harmony import final_grammar
    from .chat.harmonyoutput import HarmonyParser

    tools = plan is not None and plan.mode != "none"
    if tools and (request.grammar or request.json_schema):
        raise ParameterError("invalid grammar: give tools or a grammar, not both",
                             param="tools")
    harmony = parser if isinstance(parser, HarmonyParser) else None
    if harmony is not None and plan is not None:
        plan = replace(plan, opened=harmony.opened_analysis)
    elif plan is not None and parser is not None and parser.opened:
        plan = replace(plan, after=parser.think.close, ends=parser.think.ends)
    compiled = compile_tool_grammar(model, plan) if tools else compile_constraint(
        model, request.grammar, request.json_schema,
        None if harmony is None else partial(final_grammar, opened=harmony.opened_analysis))
    if compiled is not None and parser is not None and harmony is None:
        compiled.reasoning_markers(parser.think.open, parser.think.close, parser.think.ends)
        if parser.opened:  # (the prompt opened <think>: no call in there)
            compiled.begin_in_reasoning()
    return compiled


def compile_tool_grammar(model, plan):
    """The grammar that makes a request's tool calls valid (chat/tools.ToolPlan): lazy for
    tool_choice "auto" (free text until a call opens; an opener that is one token triggers
    it too), from the first token for "required" or a named function (after the reasoning
    block the prompt opened: plan.after); None for "none". A tool whose parameters cannot be
    converted is a GrammarError naming it."""
    from .backend import Grammar, schema_to_gbnf

    try:
        built = plan.grammar(lambda schema: schema_to_gbnf(schema, "the tools' parameters"))
        if built is None:
            return None
        text, triggers = built
        tokens = plan.fmt.opener_tokens(model.vocab) if triggers else ()
        return Grammar.compile(model, text, source="the tools' parameters", triggers=triggers,
                               trigger_tokens=tokens)
    except GrammarError as exc:
        raise GrammarError(str(exc), param="tools") from None
