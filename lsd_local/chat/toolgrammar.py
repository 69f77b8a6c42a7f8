"""The grammar that makes every tool call valid against the tools' parameter schemas, in the
format the template asks for (chat/tools.py finds the format; each format's module gives
the rules of one call), and the lazy grammar's triggers."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from . import (
    commandrcalls,
    deepseekcalls,
    gemmacalls,
    glmcalls,
    jsoncalls,
    kimi3calls,
    listcalls,
    minimax3calls,
    minimaxcalls,
    mistralcalls,
    pythoncalls,
    xmlcalls,
)
from .gbnfparts import literal, until_rules

if TYPE_CHECKING:
    from .tools import ToolFormat
    from .toolspec import Tool


def call_schema(tools: tuple[Tool, ...], arguments_key: str) -> dict:
    """The JSON schema of one call: its name is one of the tools', its arguments that tool's
    parameters."""
    return {"anyOf": [{"type": "object",
                       "properties": {"name": {"const": tool.name},
                                      arguments_key: tool.parameters},
                       "required": ["name", arguments_key], "additionalProperties": False}
                      for tool in tools]}


def call_grammar(fmt: ToolFormat, tools: tuple[Tool, ...], parallel: bool,
                 to_gbnf, json_form: bool = False) -> str:
    """GBNF for one or more calls in `fmt` (only one unless `parallel`), its root starting
    with the format's opener (what a lazy grammar is triggered by); with `json_form`, or a
    call in JSON form from its "{" (chat/jsoncalls.py). `to_gbnf(schema)` is the JSON-schema
    converter (backend.schema_to_gbnf)."""
    if fmt.name == "generic":
        calls = {"type": "array", "items": call_schema(tools, "arguments"), "minItems": 1}
        if not parallel:
            calls["maxItems"] = 1
        schema = {"type": "object", "properties": {"tool_calls": calls},
                  "required": ["tool_calls"], "additionalProperties": False}
        return to_gbnf(schema)
    body = re.sub(r"(?m)^root ::=", "tool-call ::=", to_gbnf(call_schema(tools,
                                                                         fmt.arguments_key)))
    body = re.sub(r"(?m)^space ::= .*$", lambda _: f"space ::= {jsoncalls.SPACE_RULE}", body)
    rules_of = _call_rules(fmt)
    if rules_of is not None:  # (formats whose calls are not the JSON tool-call)
        call, rules = rules_of(tools, to_gbnf)
        body = "\n".join([body, call, *rules])
    root = _root(fmt, parallel)
    if json_form:
        root = f"({root}) | {jsoncalls.grammar_rule(parallel)}"
    return f"root ::= {root}\ntool-ws ::= [ \\t\\n]{{0,2}}\n{body}"  # (bounded: no endless blanks)


def _call_rules(fmt: ToolFormat):
    """The function that gives a format's call rule and the rules it needs (None: the
    JSON tool-call's)."""
    return {"xml": xmlcalls.call_rules, "glm": glmcalls.call_rules,
            "hy3": functools.partial(glmcalls.call_rules, tags=glmcalls.HY3),
            listcalls.NAMED: listcalls.named_call_rules,
            "seed": functools.partial(xmlcalls.call_rules, tight=True),
            "gemma": gemmacalls.call_rules, "pythonic": pythoncalls.call_rules,
            **dict.fromkeys(("minimax", "minicpm", "dsml"), functools.partial(
                minimaxcalls.call_rules, tags=minimaxcalls.tags_for(fmt.name, fmt.variant))),
            "mistral-args": functools.partial(mistralcalls.call_rules,
                                              call_ids=fmt.variant == "ids"),
            "deepseek": functools.partial(deepseekcalls.call_rules,
                                          bare=fmt.variant == "bare"),
            "kimi": functools.partial(deepseekcalls.call_rules, markers=deepseekcalls.KIMI),
            "commandr": commandrcalls.call_rules,
            "minimax3": minimax3calls.call_rules,
            "kimi3": kimi3calls.call_rules}.get(fmt.name)


def _more(name: str) -> str:
    """The rule for the calls after a format's first, where one answer holds several."""
    hy3 = glmcalls.HY3
    return {"hermes": '(tool-ws "<tool_call>" tool-ws tool-call tool-ws "</tool_call>")*',
            "xml": '(tool-ws "<tool_call>" tool-ws xml-call tool-ws "</tool_call>")*',
            "seed": f'(tool-ws "{xmlcalls.SEED_OPEN}" tool-ws xml-call tool-ws '
                    f'"{xmlcalls.SEED_CLOSE}")*',
            "glm": '(tool-ws "<tool_call>" glm-call "</tool_call>")*',
            "hy3": f'("\\n"? "{hy3.open}" hy-call "{hy3.close}")*',
            "gemma": f'("{gemmacalls.OPEN}" gm-call "{gemmacalls.CLOSE}")*',
            "deepseek": "(tool-ws ds-call)*", "kimi": "(tool-ws ds-call)*",
            "commandr": '("," tool-ws cr-call)*',
            **dict.fromkeys(listcalls.LIST_FORMATS, '("," tool-ws tool-call)*'),
            listcalls.NAMED: '("," tool-ws ap-call)*',
            "mistral-args": f'("{mistralcalls.OPEN}" ma-call)*',
            "pythonic": '(", " py-call)*', "minimax": '("\\n"? mm-call)*',
            "minicpm": "(tool-ws mm-call)*", "dsml": "(tool-ws mm-call)*",
            "minimax3": "(tool-ws m3-call)*", "kimi3": "k3-call*",
            "llama3": "", "gigachat": ""}[name]


def _root(fmt: ToolFormat, parallel: bool) -> str:
    """The grammar root of the format's calls, from its opener; one call unless
    `parallel`."""
    name, dsml, hy3 = fmt.name, minimaxcalls.tags_for("dsml", fmt.variant), glmcalls.HY3
    more = _more(name) if parallel else ""
    return {"hermes": f'"<tool_call>" tool-ws tool-call tool-ws "</tool_call>" {more} tool-ws',
            "xml": f'"<tool_call>" tool-ws xml-call tool-ws "</tool_call>" {more} tool-ws',
            "seed": f'"{xmlcalls.SEED_OPEN}" tool-ws xml-call tool-ws "{xmlcalls.SEED_CLOSE}" '
                    f'{more} tool-ws',
            "glm": f'"<tool_call>" glm-call "</tool_call>" {more} tool-ws',
            "hy3": f'"{hy3.block[0]}" "\\n"? "{hy3.open}" hy-call "{hy3.close}" {more} "\\n"? '
                   f'"{hy3.block[1]}"',
            "gemma": f'"{gemmacalls.OPEN}" gm-call "{gemmacalls.CLOSE}" {more}',
            "deepseek": f'"{deepseekcalls.OPEN}" tool-ws ds-call {more} tool-ws '
                        f'"{deepseekcalls.CLOSE}"',
            # (Kimi's calls may come without their section, as llama.cpp reads them)
            "kimi": f'("{deepseekcalls.KIMI.open}" tool-ws ds-call {more} tool-ws '
                    f'"{deepseekcalls.KIMI.close}") | (ds-call {more} tool-ws '
                    f'"{deepseekcalls.KIMI.close}"?)',
            "commandr": f'"{commandrcalls.OPEN}" tool-ws "[" tool-ws cr-call {more} tool-ws '
                        f'"]" tool-ws "{commandrcalls.CLOSE}"',
            **{n: listcalls.list_root(n, more) for n in listcalls.LIST_FORMATS},
            "mistral-args": f'"{mistralcalls.OPEN}" ma-call {more}',
            "pythonic": f'"{pythoncalls.OPEN}[" py-call {more} "]{pythoncalls.CLOSE}"',
            "minimax": f'"{minimaxcalls.OPEN}" "\\n"? mm-call {more} "\\n"? '
                       f'"{minimaxcalls.CLOSE}"',
            "minicpm": f"mm-call {more} tool-ws",
            "minimax3": f'"{literal(minimax3calls.OPEN)}" tool-ws m3-call {more} tool-ws '
                        f'"{literal(minimax3calls.CLOSE)}"',
            # (no blanks between sections, as the template writes them; after an empty
            # response section, or the close of the one the prompt opened, as the model
            # writes them before its calls, then the message's close, as llama.cpp's)
            "kimi3": f'("{kimi3calls.RESPONSE_OPEN}"? "{kimi3calls.RESPONSE_CLOSE}")? '
                     f'"{kimi3calls.TOOLS_OPEN}" k3-call {more} "{kimi3calls.TOOLS_CLOSE}" '
                     f'"{kimi3calls.MESSAGE_CLOSE}"?',
            "dsml": f'"{dsml.open}" tool-ws mm-call {more} tool-ws "{dsml.close}"',
            "llama3": "tool-call",
            "gigachat": f'"{literal(fmt.opener)}" tool-call'}[name]


def lazy_triggers(fmt: ToolFormat, json_names: tuple[str, ...] = ()) -> tuple[str, ...]:
    """llama.cpp trigger patterns for a lazy grammar (free text until a call starts): the
    opener anywhere, or for a whole-answer format, a "{" as the answer's first text; and
    calls in JSON form that name one of `json_names`."""
    if fmt.at_start_only:
        return (r"^\s*(\{[\s\S]*)$",)
    return (*(re.escape(opener) for opener in fmt.openers),
            *(jsoncalls.trigger_patterns(json_names) if json_names else ()))


def after_reasoning(text: str, close: str, opener: str = "", ends: tuple[str, ...] = ()) -> str:
    """GBNF `text` (a grammar from the first token) after a reasoning block the prompt
    opened: any text up to the block's `close` first, then `text`'s root (llama.cpp's
    grammars, too, let a model reason before the calls it must make). With `opener`, the
    model may open a block itself, or write its bare close, or neither (MiniMax-M3). With
    `ends` (what else ends the block: Ling 3's call opener, with which `text`'s root
    starts), any text without the first of them, then the calls."""
    body = re.sub(r"(?m)^root ::=", "tool-root ::=", text, count=1)
    if ends:  # (the reasoning, maybe its close, maybe some content: then the calls)
        return "\n".join(["root ::= think-text tool-root", *until_rules("think-text", ends[0]),
                          body])
    head = f'root ::= think-text "{literal(close)}" [ \\t\\n]{{0,2}} tool-root'
    if opener:  # (blanks only after the block: none before a call, which is the answer)
        head = (f'root ::= (("{literal(opener)}" think-text "{literal(close)}" | '
                f'"{literal(close)}") [ \\t\\n]{{0,2}})? tool-root')
    return "\n".join([head, *until_rules("think-text", close), body])
