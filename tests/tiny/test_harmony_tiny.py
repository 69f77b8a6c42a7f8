"""gpt-oss's harmony format on real llama.cpp: the tiny agent model with a harmony template
written for the tests and gpt-oss's markers as tokens (llama.cpp shows <|channel|> and its
kin as text, ends a generation at <|call|> and <|return|>). Calls are valid by
construction, streamed as OpenAI streams them; analysis is reasoning, under a budget too;
a JSON schema holds the final channel only."""

from __future__ import annotations

import json
import math

import pytest
from tinymodels import AGENT_ASK as ASK
from tinymodels import AGENT_TOOLS as TOOLS
from tinymodels import (
    HARMONY_TEMPLATE,
    HARMONY_WORDS,
    TINY_CTX,
    accept_text,
    agent_token,
    spelled,
    stop_bias,
    streamed_pieces,
)
from tinymodels import valid_call as valid

from lsd_local import Engine, RuleConfig
from lsd_local.chat.harmony import REASONING_CLOSE


@pytest.fixture(scope="module")
def harmony(tiny_harmony):
    with Engine.load(tiny_harmony, drafter="lookup", n_ctx=TINY_CTX) as eng:
        yield eng


def written(eng, gen) -> str:
    return b"".join(eng.target.vocab.token_bytes(t) for t in gen.tokens).decode("utf-8",
                                                                               "replace")


def ends(eng) -> dict:
    """An answer that ends soon: the end of generation likely once the grammar allows it,
    and <|end|> likely inside an analysis message (the random model would ramble on)."""
    return stop_bias(eng, {agent_token(eng.target.vocab, "<|end|>"): 6.0})


@pytest.mark.parametrize("rule", ["strict", "fly"])
def test_required_calls_are_valid_and_written_in_harmony(harmony, rule):
    recipients = set()
    for seed in range(6):
        gen = harmony.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                               temperature=1.0, seed=seed, logit_bias=ends(harmony),
                               rule=RuleConfig(rule)).run()
        assert len(gen.tool_calls) == 1 and valid(gen.tool_calls[0]), written(harmony, gen)
        assert gen.finish_reason == "tool_calls" and gen.text == ""
        text = written(harmony, gen)
        assert f"to=functions.{gen.tool_calls[0].name}" in text and "<|message|>" in text
        if "<|channel|>analysis<|message|>" in text.split("to=functions")[0]:
            recipients.add("after analysis")
            assert gen.reasoning  # the analysis before the call is reasoning
    assert recipients  # (some seeds reason first: both shapes were read)


def test_streamed_pieces_reassemble_to_the_call(harmony):
    gen = harmony.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=200,
                           temperature=1.0, seed=4, logit_bias=ends(harmony))
    calls = streamed_pieces(gen)
    assert calls and calls == [(c.id, c.name, c.arguments) for c in gen.tool_calls]


def test_auto_is_free_until_a_recipient_and_then_holds_the_arguments(harmony):
    """tool_choice "auto" on real llama.cpp: an analysis and a preamble are free text; a
    message to functions.get_weather, in the channel's header or in the role's, starts the
    grammar, and then "Oslo" is refused by the city enum."""
    from lsd_local.chat.tools import tool_plan
    from lsd_local.grammars import compile_tool_grammar

    vocab = harmony.target.vocab
    letter_o = 3 + ord("O")  # the byte token <0x4F>
    free = ("<|channel|>analysis<|message|>The user wants {weather}.<|end|><|start|>assistant"
            "<|channel|>commentary to=assistant<|channel|>commentary<|message|>Checking."
            "<|end|><|start|>assistant")  # (a stray recipient that is no function: free)
    for first, header in ((False, "<|channel|>commentary to=functions.get_weather "
                                  "<|constrain|>json"),
                          (False, " to=functions.get_weather<|channel|>commentary json"),
                          (True, " to=functions.get_weather<|channel|>commentary json")):
        if first:  # the first message's role header (the prompt wrote <|start|>assistant)
            free = ""
        grammar = compile_tool_grammar(harmony.target, tool_plan(HARMONY_TEMPLATE, TOOLS,
                                                                  "auto", True))
        call = f'{free}{header}<|message|>{{"city": "'
        try:
            accept_text(grammar, vocab, call + 'Rome", "metric": true}',
                        probe=(call, letter_o),
                        tokenize=lambda text: spelled(vocab, text, HARMONY_WORDS))
            assert grammar.allows(agent_token(vocab, "<|call|>"))  # the call may end
        finally:
            grammar.close()


def test_no_tools_reads_analysis_apart_from_the_answer(harmony):
    """The model's answer held to the harmony shape by a grammar: the analysis body is the
    reasoning, the final body the content, the markers neither."""
    gbnf = ('root ::= "<|channel|>analysis<|message|>" [a-z ]{3,12} "<|end|><|start|>assistant'
            '<|channel|>final<|message|>" [a-z ]{3,12}')
    for seed in range(3):
        gen = harmony.generate(ASK, grammar=gbnf, max_tokens=80, temperature=1.0, seed=seed,
                               logit_bias=stop_bias(harmony)).run()
        text = written(harmony, gen)
        analysis, final = text.split("<|end|><|start|>assistant<|channel|>final<|message|>")
        assert gen.reasoning == analysis.removeprefix("<|channel|>analysis<|message|>")
        assert gen.text == final and gen.stats.reasoning_tokens > 0


OPENED = HARMONY_TEMPLATE.replace("{{- '<|start|>assistant' }}{%- endif %}",
                                  "{{- '<|start|>assistant<|channel|>analysis<|message|>' }}"
                                  "{%- endif %}")


@pytest.mark.parametrize("budget", [0, 6])
def test_a_reasoning_budget_closes_the_analysis_after_n_tokens(tiny_harmony, budget):
    """A prompt that opens the analysis message, the model kept from ending it itself (<|end|>
    banned): after `budget` tokens lsd writes the final channel's header, and the model
    answers. Strict lookup writes what plain decoding writes."""
    opened = OPENED
    answers = []
    for drafter in ("none", "lookup"):
        with Engine.load(tiny_harmony, drafter=drafter, n_ctx=TINY_CTX,
                         chat_template=opened) as eng:
            end = agent_token(eng.target.vocab, "<|end|>")
            gen = eng.generate(ASK, max_tokens=budget + 30, reasoning_budget=budget,
                               logit_bias={end: -math.inf}).run()
            after = b"".join(eng.target.vocab.token_bytes_special(t)
                             for t in gen.tokens[budget:]).decode("utf-8", "replace")
            assert end not in gen.tokens[:budget] and after.startswith(REASONING_CLOSE)
            assert gen.tokens[budget] == end  # (the marker as its own token)
            assert gen.stats.reasoning_tokens == budget
            assert len(after) > len(REASONING_CLOSE) and gen.text  # then an answer
            answers.append(gen.tokens)
    assert answers[0] == answers[1]


def test_a_json_schema_holds_the_final_channel(harmony):
    schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
              "required": ["city"], "additionalProperties": False}
    for seed in range(3):
        gen = harmony.generate(ASK, json_schema=schema, max_tokens=200, temperature=1.0,
                               seed=seed, logit_bias=ends(harmony)).run()
        assert json.loads(gen.text)["city"] in ("Paris", "Rome"), written(harmony, gen)
        assert "<|channel|>final" in written(harmony, gen)


def test_a_tool_round_trip_renders_in_harmony(harmony):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "metric": true}'}}
    messages = ASK + [{"role": "assistant", "content": None, "reasoning_content": "Look it up.",
                       "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    text = harmony.prompt_text(messages, tools=TOOLS, reasoning_effort="low")
    assert "Reasoning: low" in text
    assert "<|channel|>analysis<|message|>Look it up.<|end|>" in text  # (reasoning_content)
    assert ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
            '{"city": "Paris", "metric": true}<|call|>') in text
    assert "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>" \
        "18 C, sunny<|end|><|start|>assistant" in text
    gen = harmony.generate(messages, tools=TOOLS, max_tokens=8).run()  # it goes on
    assert gen.stats.prompt_tokens > 0


def test_lsd_serve_speaks_harmony_to_an_openai_client(tiny_harmony):
    """Through lsd serve and the openai client: a call (whole and streamed, the same), the
    analysis as reasoning_content deltas, and response_format held in the final channel.
    Greedy: with sampling, drafts from the server's cache would use the seeded randomness
    differently from one request to the next."""
    import serving
    from tinymodels import WORDS

    def streamed(stream) -> tuple[list, str, str]:
        calls, reasoning, content = {}, "", ""
        for chunk in stream:
            delta = chunk.choices[0].delta if chunk.choices else None
            if delta is None:
                continue
            reasoning += getattr(delta, "reasoning_content", None) or ""
            content += delta.content or ""
            for piece in delta.tool_calls or ():
                if piece.id:
                    calls[piece.index] = [piece.function.name, ""]
                calls[piece.index][1] += piece.function.arguments or ""
        return list(calls.values()), reasoning, content

    with serving.Server(tiny_harmony, "--ctx", str(TINY_CTX), "--drafter", "lookup") as srv:
        client = srv.client()
        ask = {"model": "x", "messages": ASK, "max_tokens": 200,
               "extra_body": {"logit_bias": {"2": 30}}}
        whole = client.chat.completions.create(**ask, tools=TOOLS, tool_choice="required")
        choice = whole.choices[0]
        assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
        call = choice.message.tool_calls[0]
        calls, _, _ = streamed(client.chat.completions.create(
            **ask, tools=TOOLS, tool_choice="required", stream=True))
        assert calls == [[call.function.name, call.function.arguments]]
        shaped = {**ask, "extra_body": {"grammar": (
            'root ::= "<|channel|>analysis<|message|>" [a-z ]{3,12} "<|end|><|start|>'
            'assistant<|channel|>final<|message|>" [a-z ]{3,12}')}}
        whole = client.chat.completions.create(**shaped).choices[0].message
        _, reasoning, content = streamed(client.chat.completions.create(**shaped,
                                                                        stream=True))
        assert reasoning and (reasoning, content) == (whole.reasoning_content, whole.content)
        schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                  "required": ["city"], "additionalProperties": False}
        end = str(259 + [*WORDS, *HARMONY_WORDS].index("<|end|>"))  # (ends an analysis)
        answer = client.chat.completions.create(
            **{**ask, "extra_body": {"logit_bias": {"2": 30, end: 6}}},
            response_format={"type": "json_schema",
                             "json_schema": {"name": "c", "schema": schema}})
        assert json.loads(answer.choices[0].message.content)["city"] in ("Paris", "Rome")


def test_an_opened_analysis_ends_before_a_schema_or_a_required_call(tiny_harmony):
    """A prompt that opened the analysis: the schema's grammar and the required call's let
    the model end it first (they started with a header, written inside the analysis), and
    a budget closes it into the call's header under "required"."""
    with Engine.load(tiny_harmony, drafter="lookup", n_ctx=TINY_CTX,
                     chat_template=OPENED) as eng:
        schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                  "required": ["city"], "additionalProperties": False}
        gen = eng.generate(ASK, json_schema=schema, max_tokens=200, temperature=1.0, seed=0,
                           logit_bias=ends(eng)).run()
        assert json.loads(gen.text)["city"] in ("Paris", "Rome") and gen.reasoning is not None
        end = agent_token(eng.target.vocab, "<|end|>")
        gen = eng.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=120,
                           reasoning_budget=4, logit_bias={**stop_bias(eng), end: -math.inf}
                           ).run()
        assert gen.stats.reasoning_tokens == 4 and len(gen.tool_calls) == 1
        assert valid(gen.tool_calls[0]), written(eng, gen)
