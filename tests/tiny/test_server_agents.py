"""lsd serve as agents and apps meet it, through the real `openai` client, on the tiny model
with a Hermes/Qwen-style template: a tool-calling round trip (whole and streamed, required,
a named function, parallel calls), reasoning_content, logprobs, penalties; bad input is a
400 naming the field and the next request is answered."""

from __future__ import annotations

import json

import openai
import pytest
import serving
import tinymodels

CTX = str(tinymodels.TINY_CTX)
TOOLS, ASK = tinymodels.AGENT_TOOLS, tinymodels.AGENT_ASK
END = {"logit_bias": {"2": 30}}  # the tiny model's end-of-text made likely


@pytest.fixture(scope="module")
def server(tiny_agent):
    with serving.Server(tiny_agent, "--ctx", CTX, "--drafter", "lookup") as srv:
        yield srv


def valid(call) -> bool:
    args = json.loads(call.function.arguments)
    if call.function.name == "now":
        return args == {}
    return args["city"] in ("Paris", "Rome") and isinstance(args["metric"], bool)


def streamed_calls(stream) -> tuple[list[tuple], str | None]:
    """Tool calls reassembled from a stream's deltas, as an OpenAI client does."""
    calls, finish = {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for piece in choice.delta.tool_calls or ():
            if piece.id is not None:
                assert piece.function.name, "the name comes with the call's first piece"
                calls[piece.index] = [piece.id, piece.function.name, ""]
            calls[piece.index][2] += piece.function.arguments or ""
    return [tuple(calls[i]) for i in sorted(calls)], finish


def test_a_tool_calling_round_trip(server):
    client = server.client()
    answer = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                            tool_choice="required", max_tokens=150,
                                            extra_body=END)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert calls and all(valid(c) and c.id.startswith("call_") for c in calls)
    messages = ASK + [choice.message.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": "18 C"} for c in calls]
    follow = client.chat.completions.create(model="x", messages=messages, tools=TOOLS,
                                            tool_choice="none", max_tokens=12)
    assert follow.choices[0].message.content and not follow.choices[0].message.tool_calls
    assert follow.usage.prompt_tokens > answer.usage.prompt_tokens  # the call and its result


def test_streamed_calls_reassemble_to_the_whole_ones(server):
    client = server.client()
    for parallel in (True, False):
        kwargs = dict(model="x", messages=ASK, tools=TOOLS, tool_choice="required",
                      max_tokens=150, parallel_tool_calls=parallel, seed=3,
                      extra_body={**END, "temperature": 0})
        whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls
        calls, finish = streamed_calls(client.chat.completions.create(stream=True, **kwargs))
        assert finish == "tool_calls"
        assert [(n, a) for _, n, a in calls] == [(c.function.name, c.function.arguments)
                                                 for c in whole]
        assert parallel or len(calls) == 1


def test_a_named_function(server):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    calls = server.client().chat.completions.create(
        model="x", messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=150,
        extra_body=END).choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather"] and valid(calls[0])


def test_reasoning_content_apart_whole_and_streamed(server):
    body = {"grammar": 'root ::= "<think>" [a-z ]{4,12} "</think>" [a-z ]{4,12}'}
    client = server.client()
    whole = client.chat.completions.create(model="x", messages=ASK, max_tokens=60,
                                           extra_body=body).choices[0].message
    reasoning = whole.model_extra["reasoning_content"]
    assert reasoning and whole.content and "<think>" not in reasoning + whole.content
    text = thought = ""
    for chunk in client.chat.completions.create(model="x", messages=ASK, max_tokens=60,
                                                stream=True, extra_body=body):
        delta = chunk.choices[0].delta
        text += delta.content or ""
        thought += (delta.model_extra or {}).get("reasoning_content") or ""
    assert (thought, text) == (reasoning, whole.content)
    kept = client.chat.completions.create(model="x", messages=ASK, max_tokens=60,
                                          extra_body={**body, "reasoning_format": "none"})
    assert kept.choices[0].message.content.startswith("<think>")


def test_logprobs_chat_and_completions(server):
    client = server.client()
    answer = client.chat.completions.create(model="x", messages=ASK, max_tokens=10,
                                            logprobs=True, top_logprobs=3)
    content = answer.choices[0].logprobs.content
    assert len(content) == answer.usage.completion_tokens
    assert all(len(item.top_logprobs) == 3 and item.logprob <= 0 for item in content)
    assert all(item.top_logprobs[0].logprob >= item.logprob - 1e-9 for item in content)
    text = client.completions.create(model="x", prompt="the cat", max_tokens=6, logprobs=2)
    lp = text.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert lp.text_offset == sorted(lp.text_offset)
    assert "".join(lp.tokens) == text.choices[0].text


def test_penalties_with_speculation_equal_plain_decoding(server):
    client = server.client()
    body = {"repeat_penalty": 1.5, "temperature": 0}
    fast = client.completions.create(model="x", prompt="the cat is on the mat", max_tokens=40,
                                     presence_penalty=0.5, extra_body=body).choices[0].text
    plain = client.completions.create(model="x", prompt="the cat is on the mat",
                                      max_tokens=40, presence_penalty=0.5,
                                      extra_body={**body, "drafter": "none"}).choices[0].text
    unpenalized = client.completions.create(model="x", prompt="the cat is on the mat",
                                            max_tokens=40).choices[0].text
    assert fast == plain != unpenalized


@pytest.mark.parametrize("body,param", [
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "nope"}}}}}],
      "tool_choice": "required"}, "tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "invented"}}},
     "tool_choice"),
    ({"messages": ASK + [{"role": "tool", "tool_call_id": "c9", "content": "1"}]},
     "messages.1.tool_call_id"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"logit_bias": {"99999": 1}}, "logit_bias"),
    ({"mirostat": 2}, "mirostat"),
])
def test_bad_agent_input_is_a_400_naming_the_field(server, body, param):
    status, answer = server.post("/v1/chat/completions", {"messages": ASK, "max_tokens": 4,
                                                          **body})
    assert status == 400 and answer["error"]["param"] == param, answer
    ok = server.client().chat.completions.create(model="x", messages=ASK, max_tokens=4)
    assert ok.choices[0].finish_reason == "length"


def test_an_unknown_sampler_is_refused_through_the_sdk(server):
    with pytest.raises(openai.BadRequestError, match="typical_p"):
        server.client().chat.completions.create(model="x", messages=ASK, max_tokens=4,
                                                extra_body={"typical_p": 0.5})
