"""Tool-call formats other than Hermes on real llama.cpp: the tiny agent model with a
Qwen3-Coder-style template (calls as XML tags), a GLM-4.5-style one (key and value tags), a
DeepSeek-style one (a section of calls, each naming its function outside its JSON
arguments), a Command-R7B-style one (an action block with a JSON list of calls), a
Gemma-4-style one (arguments in Gemma's notation), a Kimi-K2-style one (DeepSeek's bare form
with control-token markers, calls named by ids), and the rest listed in FORMATS. Calls are
valid by construction in each tool_choice, streamed as OpenAI streams them, and a tool turn
renders back."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from tinymodels import AGENT_ASK as ASK
from tinymodels import AGENT_TOOLS as TOOLS
from tinymodels import (
    APERTUS_TEMPLATE,
    APRIEL_TEMPLATE,
    COMMANDR_TEMPLATE,
    DEEPSEEK_TEMPLATE,
    DEEPSEEK_V31_TEMPLATE,
    DSML_TEMPLATE,
    FIREFUNCTION_TEMPLATE,
    FUNCTIONARY_TEMPLATE,
    GEMMA_TEMPLATE,
    GIGACHAT_TEMPLATE,
    GLM_TEMPLATE,
    GRANITE_TEMPLATE,
    HY3_TEMPLATE,
    HY3_WORDS,
    KIMI3_TEMPLATE,
    KIMI_TEMPLATE,
    MINICPM_TEMPLATE,
    MINIMAX1_TEMPLATE,
    MINIMAX3_TEMPLATE,
    MINIMAX_TEMPLATE,
    MINISTRAL_TEMPLATE,
    MISTRAL_IDS_TEMPLATE,
    MISTRAL_TEMPLATE,
    NEMOTRON_TEMPLATE,
    PYTHONIC_TEMPLATE,
    SEED_TEMPLATE,
    TINY_CTX,
    XML_TEMPLATE,
    agent_token,
    plan_admits,
    stop_bias,
    streamed_pieces,
)
from tinymodels import valid_call as valid

from lsd_local import Engine, RuleConfig

# format -> (its template, what its calls are written with: a pattern of their bytes)
FORMATS = {"xml": (XML_TEMPLATE, rb"<function="),
           "glm": (GLM_TEMPLATE, rb"<tool_call>(get_weather|now)\s*(<arg_key>|</tool_call>)"),
           "deepseek": (DEEPSEEK_TEMPLATE, re.escape("<｜tool▁call▁begin｜>function".encode())),
           "deepseek-v3.1": (DEEPSEEK_V31_TEMPLATE,
                             "<｜tool▁call▁begin｜>(get_weather|now)<｜tool▁sep｜>\\{".encode()),
           "commandr": (COMMANDR_TEMPLATE, rb'"tool_name"'),
           "kimi": (KIMI_TEMPLATE, rb"<\|tool_call_begin\|>functions\.(get_weather|now):[0-9]+"
                                   rb"<\|tool_call_argument_begin\|>\{"),
           "kimi3": (KIMI3_TEMPLATE, rb'<\|open\|>tools<\|sep\|><\|open\|>call '
                                     rb'tool="(get_weather|now)" index="[0-9]+"<\|sep\|>'),
           "gemma": (GEMMA_TEMPLATE, rb"<\|tool_call>call:(get_weather|now)\{"),
           "mistral": (MISTRAL_TEMPLATE, rb'\[TOOL_CALLS\]\s*\[\s*\{\s*"name"'),
           "mistral-args": (MINISTRAL_TEMPLATE, rb"\[TOOL_CALLS\](get_weather|now)\[ARGS\]\{"),
           "nemotron": (NEMOTRON_TEMPLATE,
                        rb'<TOOLCALL>\s*\[\s*\{\s*"name"[\s\S]*\]\s*</TOOLCALL>'),
           "minimax": (MINIMAX_TEMPLATE,
                       rb'<minimax:tool_call>\s*<invoke name="(get_weather|now)">'),
           "minimax3": (MINIMAX3_TEMPLATE, rb'\]<\]minimax\[>\[<tool_call>\s*\]<\]minimax\[>\['
                                           rb'<invoke name="(get_weather|now)">'),
           "seed": (SEED_TEMPLATE, rb"<seed:tool_call>\s*<function=(get_weather|now)>"),
           "dsml": (DSML_TEMPLATE, '<｜DSML｜function_calls>\\s*<｜DSML｜invoke name="'
                                   '(get_weather|now)">'.encode()),
           "minicpm": (MINICPM_TEMPLATE, rb'<function name="(get_weather|now)">'),
           "pythonic": (PYTHONIC_TEMPLATE, rb"<\|tool_call_start\|>\[(get_weather|now)\("),
           "apriel": (APRIEL_TEMPLATE, rb'<tool_calls>\s*\[\s*\{\s*"name"'),
           "gigachat": (GIGACHAT_TEMPLATE, rb'<\|message_sep\|>\n\nfunction call<\|role_sep\|>\n'
                                           rb'\{\s*"name"'),
           "functionary": (FUNCTIONARY_TEMPLATE, rb"^(get_weather|now)\n\{"),
           "apertus": (APERTUS_TEMPLATE, rb'<\|tools_prefix\|>\[\s*\{\s*"(get_weather|now)"\s*:'
                                         rb'[\s\S]*\]\s*<\|tools_suffix\|>'),
           "hy3": (HY3_TEMPLATE, rb"^<tool_calls:opensource>\n?<tool_call:opensource>"
                                 rb"(get_weather|now)<tool_sep:opensource>"),
           "firefunction": (FIREFUNCTION_TEMPLATE, rb'^ functools\[\s*\{\s*"name"'),
           "minimax1": (MINIMAX1_TEMPLATE,
                        rb'<tool_calls>\n\{\s*"name"[^\n]*\} ?(\n\{[^\n]*\} ?)*\n</tool_calls>'),
           "granite": (GRANITE_TEMPLATE, rb'<\|tool_call\|>\s*\[\s*\{\s*"name"'),
           "mistral-ids": (MISTRAL_IDS_TEMPLATE,
                           rb"\[TOOL_CALLS\](get_weather|now)\[CALL_ID\][a-zA-Z0-9]{9}\[ARGS\]")}


CLOSER_BYTES = {"minimax": "/"}
CLOSER_TOKENS = {"kimi": "<|tool_calls_section_end|>",  # (a marker of one token)
                 "seed": "</seed:tool_call>", "minimax3": "</tool_call>", "kimi3": "<|close|>",
                 "hy3": "</tool_call:opensource>"}


PREFERRED_TAGS = {"hy3": HY3_WORDS[:9]}


# formats whose markers are tokens of their own in the model's vocabulary (a long marker
# spelled byte by byte would not leave room for a call in the tests' max_tokens)
OWN_MODEL = {"kimi": "tiny_kimi", "seed": "tiny_seed", "minicpm": "tiny_minicpm",
             "dsml": "tiny_dsml", "minimax3": "tiny_minimax3", "kimi3": "tiny_kimi3",
             "hy3": "tiny_hy3"}


@pytest.fixture(scope="module", params=sorted(FORMATS))
def format_agent(request, tiny_agent):
    """The agent model speaking one of the formats (`.written`: its call marker)."""
    template, marker = FORMATS[request.param]
    model = request.getfixturevalue(OWN_MODEL[request.param]) \
        if request.param in OWN_MODEL else tiny_agent
    with Engine.load(model, drafter="lookup", n_ctx=TINY_CTX,
                     chat_template=template) as eng:
        eng.written = marker
        eng.format = request.param
        # a random model may write calls without end where the closer competes with the
        # next call's opener on one byte: that byte made likely (MiniMax's "</" over "<i")
        ends = CLOSER_BYTES.get(request.param, "")
        eng.ends = {eng.target.vocab.byte_tokens()[ord(b)]: 5.0 for b in ends}
        if request.param in CLOSER_TOKENS:  # (the closer against the next call's opener)
            eng.ends[agent_token(eng.target.vocab, CLOSER_TOKENS[request.param])] = 5.0
        # tags that are tokens made likelier than their spelling byte by byte (a random
        # model spelling each of Hy3's long tags would not end a call in max_tokens)
        eng.prefer = {agent_token(eng.target.vocab, tag): 8.0
                      for tag in PREFERRED_TAGS.get(request.param, ())}
        eng.ends.update(eng.prefer)
        yield eng



@pytest.mark.parametrize("rule", ["strict", "fly"])
def test_required_calls_are_valid_and_parallel_when_asked(format_agent, rule):
    for seed, parallel in ((0, False), (1, True), (2, True)):
        gen = format_agent.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                                 parallel_tool_calls=parallel,
                                 logit_bias=stop_bias(format_agent, format_agent.ends),
                                 seed=seed, rule=RuleConfig(rule)).run()
        assert gen.tool_calls and all(valid(c) for c in gen.tool_calls), gen.tool_calls
        assert gen.finish_reason == "tool_calls" and gen.text == ""
        assert parallel or len(gen.tool_calls) == 1
        written = b"".join(format_agent.target.vocab.token_bytes_special(t)
                           for t in gen.tokens)
        assert re.search(format_agent.written, written)  # the format's own form


def test_a_named_call_writes_typed_parameters(format_agent):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    for seed in range(3):
        gen = format_agent.generate(ASK, tools=TOOLS, tool_choice=choice, max_tokens=200,
                                 logit_bias=stop_bias(format_agent, format_agent.prefer),
                                 seed=seed).run()
        assert [c.name for c in gen.tool_calls] == ["get_weather"]
        assert valid(gen.tool_calls[0])  # city from the enum, metric a JSON boolean
        written = b"".join(format_agent.target.vocab.token_bytes_special(t)
                           for t in gen.tokens)
        assert re.search(format_agent.written, written)
        assert b"city" in written and b"metric" in written


def test_auto_call_after_the_opener(format_agent):
    openers = {"xml": "<tool_call>", "glm": "<tool_call>", "kimi": "<|tool_calls_section_begin|>",
               "seed": "<seed:tool_call>", "dsml": "<｜DSML｜function_calls>"}
    if format_agent.format not in openers:
        pytest.skip("the opener is one token only in the agent model's words (<tool_call>) "
                    "and in the models of Kimi, Seed-OSS and DSML")
    opener = agent_token(format_agent.target.vocab, openers[format_agent.format])
    gen = format_agent.generate(ASK, tools=TOOLS, max_tokens=200, parallel_tool_calls=False,
                             logit_bias=stop_bias(format_agent, {opener: 60.0})).run()
    assert len(gen.tool_calls) == 1 and valid(gen.tool_calls[0])
    assert gen.tokens[0] == opener and gen.finish_reason == "tool_calls"


def test_streamed_pieces_reassemble_to_the_calls(format_agent):
    gen = format_agent.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                             logit_bias=stop_bias(format_agent, format_agent.prefer), seed=3)
    calls = streamed_pieces(gen)
    assert calls and calls == [(c.id, c.name, c.arguments) for c in gen.tool_calls]


NS = "]<]minimax[>["  # MiniMax-M3's marker
# what a tool turn (a call, then its result) renders as in each format's template: text
# it holds, or a pattern it matches
ROUND_TRIPS = {
    "xml": ("<function=get_weather>\n<parameter=city>\nParis\n</parameter>",
            "<parameter=metric>\ntrue\n</parameter>"),
    "glm": ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris"
            "</arg_value>\n<arg_key>metric</arg_key>\n<arg_value>true</arg_value>\n"
            "</tool_call>",),
    # (the result on the model's turn: an older template)
    "gemma": ('<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,metric:true}<tool_call|>'
              '<|tool_response>response:get_weather{value:<|"|>18 C, sunny<|"|>}'
              '<tool_response|>',
              re.compile(re.escape("<|channel>thought\n<channel|>") + r"\Z")),
    # (the id made 9 characters, in both places)
    "mistral": (re.compile(r'"id": "([0-9a-f]{9})"}\]</s>\[TOOL_RESULTS\]\{"content": '
                           r'"18 C, sunny", "call_id": "\1"\}'),),
    "mistral-args": ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "metric": true}</s>'
                     "[TOOL_RESULTS]18 C, sunny[/TOOL_RESULTS]",),
    "mistral-ids": (re.compile(r'\[TOOL_CALLS\]get_weather\[CALL_ID\]([0-9a-f]{9})\[ARGS\]'
                               r'\{"city": "Paris", "metric": true\}</s>\[TOOL_RESULTS\]\1'
                               r'\[TOOL_CONTENT\]'),),
    "nemotron": ('<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", "metric": '
                 "true}}]</TOOLCALL>\nUser\n<TOOL_RESPONSE>[18 C, sunny]</TOOL_RESPONSE>",),
    "minimax": ('<minimax:tool_call>\n<invoke name="get_weather"><parameter name="city">Paris'
                '</parameter>\n<parameter name="metric">true</parameter>\n</invoke>\n'
                "</minimax:tool_call>",),
    # (after the bare close: no reasoning)
    "minimax3": (f"]~b]ai\n</mm:think>{NS}<tool_call>\n{NS}<invoke name=\"get_weather\">{NS}<city>"
                 f"Paris{NS}</city>{NS}<metric>true{NS}</metric>{NS}</invoke>\n{NS}</tool_call>"
                 "[e~[\n]~b]tool\n<response>18 C, sunny</response>",),
    "kimi3": ('<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call '
              'tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"'
              '<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="metric" type="boolean"'
              "<|sep|>true<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"
              '<|close|>message<|sep|><|end_of_msg|><|open|>message role="tool"<|sep|>18 C',),
    "pythonic": ("<|tool_call_start|>[get_weather(city='Paris', metric=True)]<|tool_call_end|>"
                 "<|im_end|>\n<|im_start|>tool\n18 C, sunny<|im_end|>",),
    "apriel": ('<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", "metric": '
               "true}}]</tool_calls>\n<|end|>\n<|begin_tool_result|>\n18 C",),
    "gigachat": ('assistant<|role_sep|>\n<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": '
                 '"get_weather", "arguments": {"city": "Paris", "metric": true}}<|message_sep|>'
                 "\n\nfunction result<|role_sep|>\n18 C, sunny<|message_sep|>",),
    # (arguments as the client's JSON text)
    "functionary": ('assistant\n>>>get_weather\n{"city": "Paris", "metric": true}<|eot|>tool\n'
                    "18 C, sunny<|eot|>assistant\n>>>",),
    "apertus": ('<|assistant_start|><|tools_prefix|>[{"get_weather": {"city": "Paris", '
                '"metric": true}}]<|tools_suffix|>[18 C, sunny]<|assistant_start|>',),
    "hy3": ("<｜hy_Assistant:opensource｜><tool_calls:opensource>\n<tool_call:opensource>"
            "get_weather<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>"
            "\n<arg_value:opensource>Paris</arg_value:opensource>\n<arg_key:opensource>"
            "metric</arg_key:opensource>\n<arg_value:opensource>true</arg_value:opensource>"
            "\n</tool_call:opensource>\n</tool_calls:opensource>result: 18 C",
            re.compile(re.escape("<think:opensource></think:opensource>") + r"\Z")),
    # (the tools as `functions`, JSON text)
    "firefunction": ('assistant:  functools[{"name": "get_weather", "arguments": {"city": "Paris", '
                     '"metric": true}}]\ntool: 18 C, sunny\nassistant:',
                     re.compile(r"\A" + re.escape("system: call as functools[")),
                     '"name": "now"'),
    "minimax1": ('assistant:\n<tool_calls>\n{"name": "get_weather", "arguments": {"city": '
                 '"Paris", "metric": true}}\n</tool_calls>\ntool result: 18 C',),
    "granite": ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "metric": '
                "true}}]<|end_of_text|>",),
    "deepseek-v3.1": ('<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", '
                      '"metric": true}<｜tool▁call▁end｜>',),
    "dsml": ('<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
             'string="true">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name="metric" '
             'string="false">true</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
             "</｜DSML｜function_calls>",),
    "minicpm": ('<function name="get_weather"><param name="city">Paris</param><param '
                'name="metric">true</param></function><|im_end|>',),
    "seed": ("<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
             "<parameter=metric>true</parameter>\n</function>\n</seed:tool_call>",),
    "kimi": ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0'
             '<|tool_call_argument_begin|>{"city": "Paris", "metric": true}<|tool_call_end|>'
             "<|tool_calls_section_end|>",),
    "deepseek": ('<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris", "metric": true}',),
    "commandr": ('<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", '
                 '"parameters": {"city": "Paris", "metric": true}}]<|END_ACTION|>',),
}


def test_a_tool_round_trip_renders_in_the_format(format_agent):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "metric": true}'}}
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    text = format_agent.prompt_text(messages, tools=TOOLS)
    for expected in ROUND_TRIPS[format_agent.format]:
        found = expected.search(text) if isinstance(expected, re.Pattern) else \
            expected in text
        assert found, (expected, text)
    gen = format_agent.generate(messages, tools=TOOLS, max_tokens=8).run()  # it goes on
    assert gen.stats.prompt_tokens > 0


@pytest.mark.parametrize("text,kept", [
    ("a </p> b <pre>\n</pre>\n", None),  # tags, even closing ones, are text
    ("<</parameter> x", None),
    ("x\n</param y", None),
    ("x\n</parameter> y", "x"),  # the closing line ends the value, nothing goes on
])
def test_a_string_value_holds_any_text_but_its_closing_line(tiny_agent, text, kept):
    """The grammar of a string parameter's text, checked by llama.cpp's grammar engine: a
    value followed by its closing line is whole; nothing may follow that line."""
    from lsd_local.backend import Grammar, Model
    from lsd_local.chat.xmlcalls import VALUE_END, _text_rules
    from lsd_local.verify.constrain import allowed_prefix

    model = Model.load(tiny_agent)
    try:
        gbnf = f'root ::= xml-text "{VALUE_END.encode("unicode_escape").decode()}"\n' + \
            "\n".join(_text_rules())
        grammar = Grammar.compile(model, gbnf, source="test")
        whole = text + VALUE_END
        spell = model.vocab.byte_tokens()  # one token per byte: the text exactly
        tokens = np.asarray([spell[b] for b in whole.encode()], np.int32)
        n = allowed_prefix(grammar, tokens)
        got = b"".join(model.vocab.token_bytes(int(t)) for t in tokens[:n]).decode()
        want = whole if kept is None else kept + VALUE_END
        assert got == want, (got, want)  # all of it, or the value and its closing line
        grammar.close()
    finally:
        model.close()


GLM_TOOL = [{"type": "function", "function": {"name": "plan_trip", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "stops": {"type": "array", "items": {"type": "string"}},
        "budget": {"type": "object", "properties": {"eur": {"type": "number"}}},
        "note": {"type": "string"}}, "required": ["city", "days"]}}}]
GLM_CALL = ("<tool_call>plan_trip\n<arg_key>city</arg_key>\n<arg_value>Rome </p> 2\n"
            "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
            '<arg_key>stops</arg_key>\n<arg_value>["a", "b"]</arg_value>\n'
            '<arg_key>budget</arg_key>\n<arg_value>{"eur": 12.5}</arg_value>\n</tool_call>')


@pytest.mark.parametrize("call,whole", [
    (GLM_CALL, True),
    # as llama.cpp's GLM-4.5 template spaces them, and with no line breaks at all
    (GLM_CALL.replace("plan_trip\n", "plan_trip").replace("</arg_value>\n", "</arg_value>"),
     True),
    (GLM_CALL.replace("</arg_key>\n", "</arg_key>").replace("</arg_value>\n", "</arg_value>")
     .replace("plan_trip\n", "plan_trip"), True),
    (GLM_CALL.replace(">3<", ">three<"), False),  # an integer's value must be JSON
    (GLM_CALL.replace("<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n", ""), False),
])
def test_the_glm_grammar_admits_typed_calls_and_nothing_else(tiny_agent, call, whole):
    """GLM-4.5's call grammar, checked by llama.cpp's grammar engine: string values are raw
    text (tags and line breaks included), other types their JSON, required keys present;
    and the call reads back typed."""
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(GLM_TEMPLATE, GLM_TOOL, "required", False)
    assert plan_admits(tiny_agent, plan, call) == whole
    if whole:
        calls, complete = section_calls(plan.fmt, call)
        assert complete and calls[0].name == "plan_trip"
        assert json.loads(calls[0].arguments) == {"city": "Rome </p> 2\n", "days": 3,
                                                  "stops": ["a", "b"], "budget": {"eur": 12.5}}


def test_glm_argument_tags_that_are_control_tokens_are_read(tiny_glm):
    """GLM's argument tags are special tokens of its vocabulary: a control token renders as
    nothing unless lsd shows it, and a call would lose its arguments (to the text)."""
    choice = {"type": "function", "function": {"name": "get_weather"}}
    with Engine.load(tiny_glm, drafter="lookup", n_ctx=TINY_CTX) as eng:
        vocab = eng.target.vocab
        tag = vocab.tokenize("<arg_key>", add_special=False)
        assert len(tag) == 1 and vocab.is_control(tag[0])  # (what the test is about)
        gen = eng.generate(ASK, tools=TOOLS, tool_choice=choice, max_tokens=200,
                           logit_bias=stop_bias(eng), seed=0).run()
    assert [c.name for c in gen.tool_calls] == ["get_weather"] and valid(gen.tool_calls[0])
    assert gen.text == ""


# --- markers that are control tokens (Command R7B's vocabulary) ------------------------------

def test_a_ling3_required_call_may_follow_its_reasoning_without_the_close(tiny_glm):
    """Ling 3's prompt opens <think>, and its model may go from its reasoning straight to
    its call (llama.cpp reads it so). With tool_choice "required" the grammar asked for
    `</think>` first and let a call be written unchecked inside the reasoning: the reader,
    which ends Ling 3's reasoning at `<tool_call>`, then returned that call, a stray
    `</think>` and a second call (found by a review). Now the reasoning may end at the call,
    which is held to the tools."""
    template = GLM_TEMPLATE + "{{- '<role>ASSISTANT</role>\\n<think>' }}"
    with Engine.load(tiny_glm, drafter="lookup", n_ctx=TINY_CTX, chat_template=template) as eng:
        vocab = eng.target.vocab
        opener = agent_token(vocab, "<tool_call>")
        for seed in range(3):
            gen = eng.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=120,
                               parallel_tool_calls=False, seed=seed, temperature=1.0,
                               logit_bias=stop_bias(eng, {opener: 30.0})).run()
            assert gen.tokens[0] == opener and gen.finish_reason == "tool_calls"
            assert len(gen.tool_calls) == 1 and valid(gen.tool_calls[0])
            assert gen.text == "" and gen.reasoning == ""


@pytest.fixture(scope="module")
def commandr(tiny_commandr):
    with Engine.load(tiny_commandr, drafter="lookup", n_ctx=TINY_CTX) as eng:
        yield eng


def test_calls_marked_by_control_tokens_are_read(commandr):
    """<|START_ACTION|> is a control token, which shows as nothing: lsd shows the markers its
    parser reads as text (llama.cpp's preserved tokens), so the calls are found, and the
    markers are in neither the content nor the calls."""
    vocab = commandr.target.vocab
    start = agent_token(vocab, "<|START_ACTION|>")
    assert vocab.is_control(start) and vocab.token_bytes(start) == b""
    for seed, parallel in ((0, False), (1, True)):
        gen = commandr.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                                parallel_tool_calls=parallel, logit_bias=stop_bias(commandr),
                                seed=seed).run()
        assert gen.tokens[0] == start and gen.finish_reason == "tool_calls"
        assert gen.tool_calls and all(valid(c) for c in gen.tool_calls) and gen.text == ""


def test_command_r_thinking_is_reasoning_and_its_budget_closes_it(commandr):
    vocab = commandr.target.vocab
    end = agent_token(vocab, "<|END_THINKING|>")
    gbnf = 'root ::= "<|START_THINKING|>" [a-z ]{3,12} "<|END_THINKING|>" [a-z ]{3,12}'
    gen = commandr.generate(ASK, grammar=gbnf, max_tokens=60, temperature=1.0, seed=2,
                            logit_bias=stop_bias(commandr)).run()
    assert gen.tokens[0] == agent_token(vocab, "<|START_THINKING|>") and end in gen.tokens
    thought = gen.tokens[1:gen.tokens.index(end)]
    assert gen.reasoning == b"".join(vocab.token_bytes(t) for t in thought).decode()
    assert gen.text and "THINKING" not in gen.text + gen.reasoning
    endless = 'root ::= "<|START_THINKING|>" [a-z ]* "<|END_THINKING|>" [a-z ]{3,12}'
    gen = commandr.generate(ASK, grammar=endless, max_tokens=40, reasoning_budget=4,
                            logit_bias={end: -math.inf}).run()
    assert gen.tokens[5] == end and gen.stats.reasoning_tokens == 4  # four, then the close
    assert gen.text and len(gen.reasoning) >= 4


def test_hy3_reasons_when_asked_then_makes_the_call_it_must(tiny_hy3):
    """Hy3's prompt opens `<think:opensource>` for reasoning_effort "high" (OpenAI's
    "medium" becomes it): a budget of 4 closes the block, then the required call follows in
    its block; without the effort the prompt closes an empty block and the call is first."""
    with Engine.load(tiny_hy3, drafter="lookup", n_ctx=TINY_CTX,
                     chat_template=HY3_TEMPLATE) as eng:
        prefer = {agent_token(eng.target.vocab, tag): 8.0 for tag in HY3_WORDS[:9]}
        letter = eng.target.vocab.byte_tokens()[ord("a")]
        for kwargs, budget in (({"reasoning_effort": "medium"}, 4), ({}, None)):
            gen = eng.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                               chat_template_kwargs=kwargs, reasoning_budget=budget,
                               logit_bias=stop_bias(eng, {**prefer, letter: 4.0})).run()
            assert gen.finish_reason == "tool_calls" and all(valid(c) for c in gen.tool_calls)
            assert gen.stats.reasoning_tokens == (budget or 0) and gen.text == ""
            assert bool(gen.reasoning) == bool(budget)


KIMI_CALL = ('<|tool_call_begin|>functions.get_weather:12<|tool_call_argument_begin|>'
             '{"city": "Paris", "metric": true}<|tool_call_end|>')
KIMI_SECTION = f"<|tool_calls_section_begin|>{KIMI_CALL}<|tool_calls_section_end|>"


@pytest.mark.parametrize("call,whole", [
    (KIMI_SECTION, True),
    (KIMI_CALL, True),  # (a call without its section, as Kimi's models may write it)
    (KIMI_CALL.replace("Paris", "Oslo"), False),  # not in the enum
    (KIMI_CALL.replace(":12", ""), False),  # an id without its count
    (KIMI_CALL + "<|tool_calls_section_end|>", True),  # (its end without its start: as
    # llama.cpp, which makes both optional)
    ("<|tool_calls_section_begin|>" + KIMI_CALL, False),  # (a section opened must close)
])
def test_the_kimi_grammar_admits_calls_with_or_without_their_section(tiny_agent, call, whole):
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(KIMI_TEMPLATE, TOOLS, "required", True)
    assert plan_admits(tiny_agent, plan, call, ends=True) == whole
    if whole:
        calls, _ = section_calls(plan.fmt, call)  # (without a section, more may follow)
        assert [(c.name, c.complete) for c in calls] == [("get_weather", True)]


def test_a_kimi_call_without_its_section_is_read_and_none_bans_both_openers(tiny_kimi):
    """llama.cpp reads a Kimi call that starts at <|tool_call_begin|>, with no section
    around it; so does lsd, with the lazy grammar triggered there too; tool_choice "none"
    bans both openers."""
    with Engine.load(tiny_kimi, drafter="lookup", n_ctx=TINY_CTX) as eng:
        vocab = eng.target.vocab
        call_open = agent_token(vocab, "<|tool_call_begin|>")
        section_open = agent_token(vocab, "<|tool_calls_section_begin|>")
        gen = eng.generate(ASK, tools=TOOLS, max_tokens=200, parallel_tool_calls=False,
                           logit_bias=stop_bias(eng, {call_open: 60.0,
                                                      section_open: -math.inf})).run()
        assert gen.tokens[0] == call_open and gen.finish_reason == "tool_calls"
        assert len(gen.tool_calls) == 1 and valid(gen.tool_calls[0]) and gen.text == ""
        gen = eng.generate(ASK, tools=TOOLS, tool_choice="none", max_tokens=20,
                           logit_bias={call_open: 60.0, section_open: 60.0}).run()
        assert call_open not in gen.tokens and section_open not in gen.tokens


CPM_TOOL = [{"type": "function", "function": {"name": "note", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["text", "n"]}}}]


@pytest.mark.parametrize("call,whole", [
    ('<function name="note"><param name="text">plain</param><param name="n">3</param>'
     "</function>", True),
    ('<function name="note"><param name="text"><![CDATA[a </param> b]] c\n]]></param>'
     '<param name="n">3</param></function>', True),
    ('<function name="note"><param name="text"><![CDATA[ends]]]]></param>'
     '<param name="n">3</param></function>', True),
    ('<function name="note"><param name="text">a </param> b</param><param name="n">3</param>'
     "</function>", False),  # (raw text ends at its first closing tag)
    ('<function name="note"><param name="text">x</param><param name="n">three</param>'
     "</function>", False),  # (an integer is JSON)
    ('<function name="note"><param name="n">3</param></function>', False),  # (required)
    ('<function name="note"><param name="text"><![CDATA[Oslo</param><param name="n">3'
     "</param></function>", False),  # (a CDATA block opened must close: else its text
    # runs on, and llama.cpp's parser refuses it too)
    ('<function name="note"><param name="text"><![CDATA[a]]>b</param><param name="n">3'
     "</param></function>", False),  # (nothing between the block and the closing tag)
    ('<function name="note"><param name="text"><![CDAT x</param><param name="n">3</param>'
     "</function>", True),  # (almost an opener: text)
    ('<function name="note"><param name="text"></param><param name="n">3</param>'
     "</function>", True),  # (an empty string)
])
def test_the_minicpm_grammar_admits_raw_or_cdata_strings_and_json_values(tiny_agent, call,
                                                                         whole):
    """MiniCPM5's calls, checked by llama.cpp's grammar engine: a string is raw text up to
    its closing tag, or anything in a CDATA block (its closing tag too), other types
    their JSON; and a call the grammar admits reads back typed."""
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(MINICPM_TEMPLATE, CPM_TOOL, "required", False)
    assert plan_admits(tiny_agent, plan, call, ends=True) == whole
    if whole:
        calls, complete = section_calls(plan.fmt, call)
        assert complete and calls[0].name == "note"
        arguments = json.loads(calls[0].arguments)
        assert arguments["n"] == 3 and "CDATA[" not in arguments["text"]


DSML_CALL = ('<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter '
             'name="city" string="true">Paris</｜DSML｜parameter>\n<｜DSML｜parameter '
             'name="metric" string="false">true</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
             "</｜DSML｜function_calls>")


@pytest.mark.parametrize("call,whole", [
    (DSML_CALL, True),
    (DSML_CALL.replace('"city" string="true"', '"city" string="false"'), False),
    (DSML_CALL.replace('"metric" string="false"', '"metric" string="true"'), False),
    (DSML_CALL.replace(">true<", ">yes<"), False),
])
def test_the_dsml_grammar_says_which_values_are_strings(tiny_agent, call, whole):
    """DeepSeek-V3.2's parameters say string="true" for a raw string and "false" for JSON:
    the grammar holds the attribute to the schema, and the call reads back typed."""
    from lsd_local.chat.tools import section_calls, tool_plan

    plan = tool_plan(DSML_TEMPLATE, TOOLS, "required", False)
    assert plan_admits(tiny_agent, plan, call, ends=True) == whole
    if whole:
        calls, complete = section_calls(plan.fmt, call)
        assert complete and json.loads(calls[0].arguments) == {"city": "Paris", "metric": True}


def test_dsml_v4_calls_without_arguments_and_optional_strings(tiny_agent):
    """DeepSeek-V4's template writes two line breaks in a call without arguments; a
    parameter that takes a string among other types (pydantic's Optional[str]) is written
    raw, string="true", as llama.cpp's grammar has it."""
    from lsd_local.chat.tools import section_calls, tool_plan

    v4 = DSML_TEMPLATE.replace("function_calls", "tool_calls")
    note = [{"type": "function", "function": {"name": "note", "parameters": {
        "type": "object", "properties": {"text": {"anyOf": [{"type": "string"},
                                                            {"type": "null"}]}}}}}]
    tools = TOOLS + note
    plan = tool_plan(v4, tools, "required", True)
    assert plan.fmt.variant == "v4"
    empty = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="now">\n\n</｜DSML｜invoke>\n'
             '<｜DSML｜invoke name="note">\n<｜DSML｜parameter name="text" string="true">'
             "a note</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
    assert plan_admits(tiny_agent, plan, empty, ends=True)
    assert not plan_admits(tiny_agent, plan, empty.replace('string="true">a note',
                                                           'string="false">"a note"'))
    calls, complete = section_calls(plan.fmt, empty)
    assert complete and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("now", {}), ("note", {"text": "a note"})]


@pytest.mark.parametrize("mode,call,whole", [
    ("required", 'get_weather\n{"city": "Paris", "metric": true}', True),
    ("required", 'get_weather\n{"city": "Paris", "metric": true}>>>now\n{}', True),
    ("required", '>>>get_weather\n{"city": "Paris", "metric": true}', False),  # (the prompt's)
    ("required", 'python\n{"code": "1"}', False),
    ("auto", '>>>now\n{}', True),  # (lazily, from the >>> that triggered it)
    ("auto", 'now\n{"city": "Paris"}', False),
])
def test_the_functionary_grammar_starts_where_its_calls_do(tiny_agent, mode, call, whole):
    from lsd_local.chat.tools import tool_plan

    plan = tool_plan(FUNCTIONARY_TEMPLATE, TOOLS, mode, True)
    assert plan_admits(tiny_agent, plan, call, ends=True) == whole
