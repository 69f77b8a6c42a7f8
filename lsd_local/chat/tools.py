"""Tool calls: which format a chat template's model writes them in (found in the template, as
llama.cpp's common/chat.cpp does), the tools a request gives, and reading the calls back out
of the text (the grammar that makes every call valid: chat/toolgrammar.py).

Formats:
- "hermes": `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, one block per
  call (Qwen2.5/Qwen3, Hermes, and the many templates with `<tool_call>`);
- "xml": `<tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>`
  per call (Qwen3-Coder: `<function=` and `<parameter=`; chat/xmlcalls.py);
- "seed": the same in `<seed:tool_call>` blocks, each value right between its tags
  (Seed-OSS; chat/xmlcalls.py);
- "glm": `<tool_call>NAME<arg_key>P</arg_key><arg_value>value</arg_value></tool_call>` per
  call (GLM-4.5 and 4.6: `<arg_key>`; chat/glmcalls.py); "hy3": the same with tags marked
  `:opensource`, `<tool_sep:opensource>` after the name, in a `<tool_calls:opensource>` block
  (Tencent Hy3);
- "gemma": `<|tool_call>call:NAME{key:<|"|>text<|"|>,n:3}<tool_call|>` per call, Gemma's
  notation (Gemma 4: templates with `<|tool_call>call:`; chat/gemmacalls.py);
- "deepseek": `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json
  {...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`, one section for every call (DeepSeek-V3
  and the R1 distills' templates; chat/deepseekcalls.py);
- "kimi": `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
  <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>`, a call
  named by an id (Kimi K2; chat/deepseekcalls.py);
- "kimi3": `<|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|><|open|>argument
  key="P" type="string"<|sep|>value<|close|>argument<|sep|><|close|>call<|sep|>...<|close|>
  tools<|sep|>`, sections between control tokens (Kimi K3; chat/kimi3calls.py);
- "commandr": `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters":
  {...}}, ...]<|END_ACTION|>` (Command R7B; chat/commandrcalls.py);
- "minimax": `<minimax:tool_call><invoke name="NAME"><parameter name="P">value</parameter>
  </invoke></minimax:tool_call>`, values typed as "xml"'s (MiniMax-M2; chat/minimaxcalls.py);
- "minimax3": `NS<tool_call>NS<invoke name="NAME">NS<P>value NS</P>NS</invoke>NS</tool_call>`,
  NS the marker `]<]minimax[>[`, objects and arrays as nested tags (MiniMax-M3;
  chat/minimax3calls.py);
- "minicpm": `<function name="NAME"><param name="P">value</param></function>` per call, a
  string holding `<`, `&` or a line break in CDATA (MiniCPM5; chat/minimaxcalls.py);
- "dsml": "minimax"'s form in DeepSeek's DSML tags, `<｜DSML｜function_calls>` (V3.2; V4's
  `tool_calls`: variant "v4"), each parameter saying `string="true"` or "false";
- "pythonic": `<|tool_call_start|>[NAME(key='value', n=3)]<|tool_call_end|>`, Python calls
  (LFM2, LFM2.5; chat/pythoncalls.py);
- "mistral", "nemotron", "granite", "apriel", "firefunction": one JSON list of `{"name": ...,
  "arguments": {...}}` after `[TOOL_CALLS]`, in `<TOOLCALL>...</TOOLCALL>`, after
  `<|tool_call|>`, in `<tool_calls>...</tool_calls>`, after ` functools`; "minimax1": one
  object per line in `<tool_calls>...</tool_calls>`; "apertus": a list of `{"NAME": {...}}`
  in `<|tools_prefix|>...<|tools_suffix|>` (chat/listcalls.py);
- "mistral-args": `[TOOL_CALLS]NAME[ARGS]{...}` per call (Mistral Small 3.2, Devstral,
  Ministral 3: templates with `[ARGS]`; chat/mistralcalls.py);
- "gigachat": one JSON call as a message after the answer's, `<|message_sep|>\n\nfunction
  call<|role_sep|>\n{...}` (GigaChat 3; 3.1: after `<|function_call|>`; chat/listcalls.py);
- "functionary": messages after the prompt's `>>>`, each naming its recipient first, a call
  `NAME\n{...}`, the answer `all\n...` (Functionary v3.2; chat/functionarycalls.py);
- "llama3": a JSON object `{"name": ..., "parameters": {...}}` as the whole answer
  (Llama 3.1/3.2/3.3 templates: `<|start_header_id|>` with `ipython`);
- "harmony": gpt-oss's channels, a call being a message to `functions.NAME` whose body is
  its arguments' JSON (templates with `<|channel|>`; chat/harmony.py);
- "generic": for a template that cannot render tools: the tools go into the system message
  (FALLBACK_SYSTEM, below) and a call is `{"tool_calls": [{"name": ..., "arguments":
  {...}}]}` as the whole answer.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace

from ..errors import ParameterError
from . import (
    commandrcalls,
    deepseekcalls,
    functionarycalls,
    gemmacalls,
    glmcalls,
    harmony,
    kimi3calls,
    listcalls,
    minimax3calls,
    minimaxcalls,
    mistralcalls,
    pythoncalls,
    xmlcalls,
)
from .jsonscan import CallScan, list_elements, scan_call, value_end
from .thinking import MM_THINK
from .toolgrammar import after_reasoning, call_grammar, lazy_triggers
from .toolspec import Tool, choose_tools, parse_tools

FALLBACK_SYSTEM = (
    "You can call these tools (OpenAI function specifications):\n{tools}\n\n"
    "To call one or more of them, answer with JSON only, in this form:\n"
    '{{"tool_calls": [{{"name": "<tool name>", "arguments": {{<arguments>}}}}]}}\n'
    "To answer without calling a tool, answer in plain text.")


@dataclass(frozen=True)
class ToolFormat:
    """How one family writes tool calls."""

    name: str
    opener: str  # the text a call section starts with ("" : the answer's first "{")
    arguments_key: str = "arguments"
    # xml, glm, ...: ((tool, parameter, JSON type or None), ...) from the request's tools:
    # how a parameter's text is read back (chat/xmlcalls.py; minimax3: a path for parameter)
    parameter_types: tuple = ()
    variant: str = ""  # the family's other form: "ids" (mistral-args: Mistral Small 3.2's
    # call ids), "bare" (deepseek: V3.1's calls without type and fence)
    also_opens: tuple[str, ...] = ()  # other texts a call section may start with (Kimi's
    # first call's opener: its models may leave the section's out, as llama.cpp allows)
    ends_message: str = ""  # what ends the model's message, not part of its answer (shown
    # where it is a control token, to read the opener it begins: GigaChat's separator)

    @property
    def openers(self) -> tuple[str, ...]:
        """Every text a call section may start with (none for a whole-answer format)."""
        return (self.opener, *self.also_opens) if self.opener else ()

    def opener_tokens(self, vocab) -> tuple[int, ...]:
        """The openers that are one token each in `vocab` (a backend Vocab), as tokens."""
        if self.name == "functionary":  # (">>>" opens a call only with a function's name)
            return ()
        spelled = [vocab.tokenize(opener, add_special=False) for opener in self.openers]
        return tuple(ids[0] for ids in spelled if len(ids) == 1)

    def types(self) -> dict:
        """{(tool, parameter): JSON type} (xml, glm)."""
        return {(tool, key): kind for tool, key, kind in self.parameter_types}

    @property
    def at_start_only(self) -> bool:
        """A call section can only be the whole answer (its first non-space text)."""
        return self.opener == ""


FORMATS = {"xml": ToolFormat("xml", "<tool_call>"),
           "seed": ToolFormat("seed", xmlcalls.SEED_OPEN),
           "glm": ToolFormat("glm", glmcalls.OPEN),
           "hy3": ToolFormat("hy3", glmcalls.HY3.block[0]),
           "gemma": ToolFormat("gemma", gemmacalls.OPEN),
           "hermes": ToolFormat("hermes", "<tool_call>"),
           "deepseek": ToolFormat("deepseek", deepseekcalls.OPEN),
           "kimi": ToolFormat("kimi", deepseekcalls.KIMI.open,
                              also_opens=(deepseekcalls.KIMI.call_open,)),
           "kimi3": ToolFormat("kimi3", kimi3calls.TOOLS_OPEN),
           "commandr": ToolFormat("commandr", commandrcalls.OPEN, "parameters"),
           **{name: ToolFormat(name, opener) for name, (opener, _) in
              listcalls.LIST_FORMATS.items()},
           "mistral-args": ToolFormat("mistral-args", mistralcalls.OPEN),
           "pythonic": ToolFormat("pythonic", pythoncalls.OPEN),
           "minimax": ToolFormat("minimax", minimaxcalls.OPEN),
           "minimax3": ToolFormat("minimax3", minimax3calls.OPEN),
           "minicpm": ToolFormat("minicpm", minimaxcalls.MINICPM.invoke),
           "dsml": ToolFormat("dsml", minimaxcalls.DSML_V32.open),
           "harmony": ToolFormat("harmony", f" to={harmony.CALL_PREFIX}"),
           "gigachat": ToolFormat("gigachat", listcalls.GIGACHAT_OPEN,
                                  ends_message=listcalls.GIGACHAT_MARKERS[0]),
           "functionary": ToolFormat("functionary", functionarycalls.OPEN),
           "llama3": ToolFormat("llama3", "", "parameters"),
           "generic": ToolFormat("generic", "")}


def detect_format(template: str | None) -> ToolFormat:
    """The format a template's model writes calls in (generic: the template has no tools)."""
    source = template or ""
    if harmony.is_harmony(source):
        return FORMATS["harmony"]
    if gemmacalls.is_gemma(source):
        return FORMATS["gemma"]
    if "<function=" in source and "<parameter=" in source:
        return FORMATS["seed" if xmlcalls.SEED_OPEN in source else "xml"]
    if functionarycalls.is_functionary(source):
        return FORMATS["functionary"]
    if glmcalls.is_glm(source):
        return FORMATS["glm"]
    if glmcalls.is_hy3(source):
        return FORMATS["hy3"]
    if minimax3calls.is_minimax3(source):  # (its template has <tool_call> too)
        return FORMATS["minimax3"]
    if "<tool_call>" in source:
        return FORMATS["hermes"]
    if deepseekcalls.is_kimi(source):
        return FORMATS["kimi"]
    if kimi3calls.is_kimi3(source):
        return FORMATS["kimi3"]
    if deepseekcalls.OPEN in source:
        return replace(FORMATS["deepseek"],
                       variant="bare" if deepseekcalls.is_bare(source) else "")
    if commandrcalls.OPEN in source:
        return FORMATS["commandr"]
    if mistralcalls.is_mistral_args(source):
        return replace(FORMATS["mistral-args"],
                       variant="ids" if mistralcalls.writes_call_ids(source) else "")
    if pythoncalls.is_python_calls(source):
        return FORMATS["pythonic"]
    if minimaxcalls.is_minimax(source):
        return FORMATS["minimax"]
    if minimaxcalls.is_minicpm(source):
        return FORMATS["minicpm"]
    dsml = minimaxcalls.dsml_of(source)
    if dsml is not None:
        return replace(FORMATS["dsml"], opener=dsml.open,
                       variant="v4" if dsml is minimaxcalls.DSML_V4 else "")
    if listcalls.gigachat_opener(source):
        return replace(FORMATS["gigachat"], opener=listcalls.gigachat_opener(source))
    if listcalls.list_format(source):
        return FORMATS[listcalls.list_format(source)]
    if "<|start_header_id|>" in source and "ipython" in source and "tools" in source:
        return FORMATS["llama3"]
    return FORMATS["generic"]


def renders_tools(template: str | None) -> bool:
    """Whether the template itself shows the model its tools (else FALLBACK_SYSTEM does)."""
    name = detect_format(template).name if template else "generic"
    if name == "generic":
        return False
    return re.search(r"\btools\b", template) is not None or \
        name == "firefunction"  # (as `functions`: chat/turns.py)


# --- reading calls back --------------------------------------------------------------------

def section_calls(fmt: ToolFormat, section: str) -> tuple[list[CallScan], bool]:
    """The calls a call section (its text from the opener on, maybe unfinished) holds so far,
    and whether the section is complete."""
    calls, end = read_section(fmt, section)
    return calls, end is not None


def read_section(fmt: ToolFormat, section: str) -> tuple[list[CallScan], int | None]:
    """The calls a call section holds so far, and where it ends (None while unknown): each
    format's reader stops at its block's end."""
    if fmt.name == "hermes":
        start, json_end, end = xmlcalls.hermes_block(section)
        return [scan_call(section[start:json_end])], end
    if fmt.name in ("xml", "seed"):
        scan, end = xmlcalls.xml_block(section, fmt.types(), fmt.name == "seed")
    elif fmt.name == "glm":
        scan, end = glmcalls.glm_block(section, fmt.types())
    elif fmt.name == "gemma":
        scan, end = gemmacalls.gemma_block(section)
    elif fmt.name == "mistral-args":
        scan, end = mistralcalls.args_block(section)
    elif fmt.name == "gigachat":
        scan, end = listcalls.gigachat_block(section, fmt.opener)
    elif fmt.name == "functionary":
        scan, end = functionarycalls.functionary_block(section)
    elif fmt.name == "llama3":
        scan, end = scan_call(section, ("parameters", "arguments")), value_end(section, 0)
    else:
        return _section_of_calls(fmt, section)
    return [scan], end


def _section_of_calls(fmt: ToolFormat, section: str) -> tuple[list[CallScan], int | None]:
    """read_section for the formats whose section holds several calls."""
    if fmt.name in ("deepseek", "kimi"):
        return deepseekcalls.deepseek_section(section, section_markers(fmt))
    if fmt.name == "commandr":
        return commandrcalls.commandr_section(section)
    if fmt.name in listcalls.LIST_FORMATS:
        return listcalls.list_block(section, fmt.name)
    if fmt.name == "pythonic":
        return pythoncalls.python_section(section)
    if fmt.name in ("minimax", "minicpm", "dsml"):
        return minimaxcalls.minimax_section(section, fmt.types(), tags_of(fmt))
    if fmt.name == "minimax3":
        return minimax3calls.minimax3_section(section, fmt.types())
    if fmt.name == "kimi3":
        return kimi3calls.kimi3_section(section, fmt.types())
    if fmt.name == "hy3":
        return glmcalls.hy3_section(section, fmt.types())
    return _generic_calls(section)


def tags_of(fmt: ToolFormat) -> minimaxcalls.Tags:
    """The tags of a MiniMax-like call (minimax, minicpm, dsml)."""
    return minimaxcalls.tags_for(fmt.name, fmt.variant)


def section_markers(fmt: ToolFormat) -> deepseekcalls.Markers:
    """The markers of a DeepSeek-like section (deepseek, kimi)."""
    return deepseekcalls.KIMI if fmt.name == "kimi" else deepseekcalls.DEEPSEEK


def _generic_calls(section: str) -> tuple[list[CallScan], int | None]:
    match = re.match(r'\s*\{\s*"tool_calls"\s*:', section)
    if not match:
        return [], value_end(section, 0)
    elements, _ = list_elements(section, match.end())
    calls = [scan_call(section[a:b] if b else section[a:]) for a, b in elements]
    return calls, value_end(section, 0)


def template_arguments(arguments: object) -> object:
    """A call's arguments as a chat template expects them: an object (OpenAI messages carry
    them as JSON text; templates write `arguments | tojson`)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


@dataclass(frozen=True)
class ToolPlan:
    """What a request's tools mean for its generation."""

    fmt: ToolFormat
    mode: str  # "auto" (free text or calls), "required" (calls only), "none" (no calls)
    tools: tuple[Tool, ...]  # every tool (the template shows them all)
    callable: tuple[Tool, ...]  # the ones a call may name
    parallel: bool  # more than one call per answer
    opened: bool = False  # harmony: the prompt left an analysis message open
    # "required": the close of a reasoning block the prompt opened, which the calls follow,
    # and what else ends that block (Ling 3's call opener: chat/thinking.py)
    after: str = ""
    ends: tuple[str, ...] = ()

    @property
    def specs(self) -> list[dict]:
        return [tool.spec() for tool in self.tools]

    @property
    def json_names(self) -> tuple[str, ...]:
        """The tools a call in JSON form may name (chat/jsoncalls.py): with "auto", in a
        format that has a template form of its own (an opener)."""
        if self.mode != "auto" or self.fmt.at_start_only or \
                self.fmt.name in ("harmony", "functionary"):
            return ()
        return tuple(tool.name for tool in self.callable)

    def grammar(self, to_gbnf) -> tuple[str, tuple[str, ...]] | None:
        """(GBNF text, lazy trigger patterns: empty for a grammar that holds from the first
        token) that makes every call valid, or None ("none": no call at all)."""
        if self.mode == "none":
            return None
        if self.fmt.name == "harmony":  # (one call, the answer's last message)
            text = harmony.call_grammar(self.callable, self.mode == "required", to_gbnf,
                                        self.opened)
            return text, (harmony.TRIGGERS if self.mode == "auto" else ())
        if self.fmt.name == "functionary":  # (its first call has no opener)
            lazy = self.mode == "auto"
            return functionarycalls.call_grammar(self.callable, self.parallel, to_gbnf, lazy), \
                (functionarycalls.triggers(self.callable) if lazy else ())
        text = call_grammar(self.fmt, self.callable, self.parallel, to_gbnf,
                            json_form=bool(self.json_names))
        if self.mode == "auto":
            return text, lazy_triggers(self.fmt, self.json_names)
        if self.after:
            return after_reasoning(text, self.after, ends=self.ends), ()
        if self.fmt.name == "minimax3":  # (its answers start with reasoning or its close)
            return after_reasoning(text, MM_THINK.close, MM_THINK.open), ()
        return text, ()


def tool_plan(template: str | None, tools: object, tool_choice: object,
              parallel: bool) -> ToolPlan:
    """The plan for OpenAI's tools, tool_choice and parallel_tool_calls on this template
    (ParameterError names a bad field)."""
    checked = parse_tools(tools)
    mode, callable_tools = choose_tools(checked, tool_choice)
    named = isinstance(tool_choice, dict)  # "call this function": once, as OpenAI does
    fmt = detect_format(template)
    if fmt.name == "functionary" and any(tool.name == "all" for tool in checked):
        raise ParameterError("invalid tools: this model's template reads a message to 'all' "
                             "as the answer, so no tool may be named so", param="tools")
    if fmt.name in ("xml", "seed", "glm", "hy3", "minimax", "minicpm", "dsml", "minimax3",
                    "kimi3"):
        types = (minimax3calls if fmt.name == "minimax3" else xmlcalls).parameter_types(checked)
        if fmt.name == "minimax3":
            minimax3calls.check_keys(types)
        fmt = replace(fmt, parameter_types=tuple(  # (how values are written)
            (tool, key, kind) for (tool, key), kind in types.items()))
    return ToolPlan(fmt, mode, checked, callable_tools, bool(parallel) and not named)


def banned_opener(plan: ToolPlan | None, vocab) -> tuple[tuple[int, float], ...]:
    """tool_choice "none": the tokens that would open a call, where one is a token, are
    banned ((token, -inf) logit biases)."""
    if plan is None or plan.mode != "none":
        return ()
    return tuple((token, -math.inf) for token in plan.fmt.opener_tokens(vocab))
