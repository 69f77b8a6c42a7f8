"""Request bodies -> engine jobs: defaults, overrides, refusals (pure, no server)."""

from __future__ import annotations

import json

import pytest

from lsd_local.config import DEFAULT_K, DrafterConfig, RuleConfig
from lsd_local.limits import SERVE_MAX_TOKENS_LIMIT
from lsd_local.server.jobs import make_job
from lsd_local.server.protocol import (
    ChatRequest,
    CompletionRequest,
    Defaults,
    RequestError,
    parse,
)
from lsd_local.server.responses import Answer, Shaper, lsd_info, usage

GENERATE = {"max_tokens": None, "temperature": 0.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
            "seed": None, "stop": [], "grammar": None, "json_schema": None,
            "repeat_penalty": 1.0, "repeat_last_n": 64, "presence_penalty": 0.0,
            "frequency_penalty": 0.0}
DEFAULTS = Defaults(DrafterConfig(drafter="auto", k="auto"), RuleConfig(rule="fly", theta=0.5),
                    GENERATE)
USER = [{"role": "user", "content": "hi"}]


def job(body: dict, model=ChatRequest, defaults: Defaults = DEFAULTS):
    return make_job(parse(model, body), defaults, arrived=1.0)


def refused(body: dict, model=ChatRequest) -> RequestError:
    with pytest.raises(RequestError) as info:
        job(body, model)
    return info.value


def test_omitted_fields_take_the_servers_settings():
    got = job({"messages": USER})
    # the engine keeps what it loaded with
    assert got.request.drafter is None and got.request.rule is None
    assert got.request.max_tokens == SERVE_MAX_TOKENS_LIMIT
    assert got.request.temperature == 0.0 and got.request.top_k == 40
    limited = Defaults(DEFAULTS.drafter, DEFAULTS.rule, {**GENERATE, "max_tokens": 77,
                                                         "stop": ["END"]}, system="be brief")
    got = job({"messages": USER}, defaults=limited)
    assert got.request.max_tokens == 77 and got.request.stop == ["END"]
    assert got.request.prompt == [{"role": "system", "content": "be brief"}, *USER]
    got = job({"messages": [{"role": "system", "content": "mine"}, *USER]}, defaults=limited)
    assert [m["content"] for m in got.request.prompt] == ["mine", "hi"]  # the client's own wins


def test_request_fields_override_the_servers():
    got = job({"messages": USER, "max_completion_tokens": 9, "max_tokens": 50,
               "temperature": 0.7, "top_k": 5, "seed": 3, "stop": "\n\n"})
    assert got.request.max_tokens == 9  # the newer name wins
    assert (got.request.temperature, got.request.top_k, got.request.seed) == \
        (0.7, 5, 3)
    assert got.request.stop == ["\n\n"]
    got = job({"messages": USER, "k": 8, "window": 2})
    assert got.request.drafter == DrafterConfig(drafter="auto", k=8)
    # the server's theta stays
    assert got.request.rule == RuleConfig(rule="fly", theta=0.5, window=2)
    got = job({"messages": USER, "drafter": "lookup"})
    # lookup's own default K
    assert got.request.drafter.k is None
    assert got.request.drafter.k_value == DEFAULT_K["lookup"]  # (its own default K)


def test_content_parts_are_joined_and_other_parts_refused():
    got = job({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                         {"type": "text", "text": "b"}]}]})
    assert got.request.prompt == [{"role": "user", "content": "ab"}]
    error = refused({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "x"}}]}]})
    assert error.status == 400 and error.param == "messages.0.content"


def test_response_formats_become_grammars():
    got = job({"messages": USER, "response_format": {"type": "json_object"}})
    assert got.request.grammar == "json_object"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    got = job({"messages": USER, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert got.request.json_schema == schema and got.request.grammar is None
    assert job({"messages": USER, "response_format": {"type": "text"}}).request.grammar is None
    assert refused({"messages": USER, "grammar": "root ::= \"a\"",
                    "json_schema": schema}).param == "json_schema"
    assert refused({"messages": USER, "grammar": "~/.ssh/id_rsa"}).param == "grammar"
    assert job({"messages": USER, "grammar": "json"}).request.grammar == "json"


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": USER, "n": 3}, "n"),
    ({"messages": USER, "presence_penalty": 2.5}, "presence_penalty"),
    ({"messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": USER, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": USER, "repeat_penalty": 0}, "repeat_penalty"),
    ({"messages": USER, "repeat_last_n": -2}, "repeat_last_n"),
    ({"messages": USER, "logit_bias": {"5": 101}}, "logit_bias"),
    ({"messages": USER, "mirostat": 2}, "mirostat"),
    ({"messages": USER, "typical_p": 0.5}, "typical_p"),
    ({"messages": USER, "tool_choice": "required"}, "tool_choice"),
    ({"messages": [*USER, {"role": "tool", "tool_call_id": "x", "content": "1"}]},
     "messages.1.tool_call_id"),
    ({"messages": USER, "reasoning_format": "sideways"}, "reasoning_format"),
    ({"messages": USER, "reasoning_budget": -2}, "reasoning_budget"),
    ({"messages": USER, "seed": -3}, "seed"),
    ({"messages": USER, "entropy_top_k": 50}, "entropy_top_k"),
    ({"messages": USER, "tools": [{"type": "function"}]}, "tools"),
    ({"messages": USER, "temperature": -1}, "temperature"),
    ({"messages": USER, "top_p": 0}, "top_p"),
    ({"messages": USER, "min_p": 2}, "min_p"),
    ({"messages": USER, "rule": "nope"}, "rule"),
    ({"messages": USER, "drafter": "nope"}, "drafter"),
    ({"messages": USER, "theta": -1}, "theta"),
    ({"messages": USER, "budget": -1}, "budget"),
    ({"messages": USER, "k": 0}, "k"),
    ({"messages": USER, "timeout": 0}, "timeout"),
    ({"messages": USER, "stop": ["", "x"]}, "stop"),
    ({"messages": []}, "messages"),
    ({"messages": [{"content": "no role"}]}, "messages.0.role"),
])
def test_invalid_fields_are_named(body, param):
    error = refused(body)
    assert error.status == 400 and error.param == param, str(error)
    assert error.body()["error"]["param"] == param


def test_completion_requests():
    got = job({"prompt": ["the cat"], "max_tokens": 5}, CompletionRequest)
    assert got.kind == "completion" and got.request.prompt == "the cat"
    assert refused({"prompt": ["a", "b"]}, CompletionRequest).param == "prompt"
    assert refused({"prompt": "a", "echo": True}, CompletionRequest).param == "echo"
    assert refused({"prompt": "a", "suffix": "b"}, CompletionRequest).param == "suffix"
    with pytest.raises(RequestError, match="JSON object"):
        parse(CompletionRequest, ["not", "an", "object"])


def test_stream_options_and_ids():
    first, second = job({"messages": USER, "stream": True,
                         "stream_options": {"include_usage": True}}), job({"messages": USER})
    assert first.stream and first.include_usage and not second.stream
    assert first.id != second.id


STATS = {"prompt_tokens": 10, "generated_tokens": 4, "cached_prompt_tokens": 6, "tau": 2.0,
         "acceptance_rate": 0.5, "rounds": 2, "drafted": 4, "accepted_exact": 2,
         "accepted_loose": 0, "draft_sources": {"lookup": 2}, "accepted_by_source": {"lookup": 2},
         "decode_tokens_per_second": 40.0, "prefill_seconds": 0.1, "reasoning_tokens": 1}


def answer_of(*payloads) -> Answer:
    answer = Answer()
    for payload in payloads:
        answer.add(payload)
    return answer


def test_responses_have_openais_shape():
    whole = Shaper("chat", "abc", "m").whole(answer_of({"text": "hi"}), "stop", 10, STATS,
                                            lsd_info(STATS, False, 0.2))
    assert whole["id"] == "chatcmpl-abc" and whole["object"] == "chat.completion"
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    assert whole["usage"] == usage(10, STATS) == {
        "prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14,
        "prompt_tokens_details": {"cached_tokens": 6},
        "completion_tokens_details": {"reasoning_tokens": 1}}
    assert whole["lsd"]["time_to_first_token"] == 0.2
    text = Shaper("completion", "abc", "m")
    assert text.whole(answer_of({"text": "hi"}), "length", 10, STATS, {})[
        "choices"][0]["text"] == "hi"
    assert text.chunk({"text": "x"}).startswith(
        'data: {"id": "cmpl-abc", "object": "text_completion"')


def test_calls_reasoning_and_logprobs_in_openais_shape():
    token = ("hi", [104, 105])
    answer = answer_of(
        {"text": "", "reasoning": "hm", "tool_calls": [
            {"index": 0, "id": "call_1", "name": "f", "arguments": '{"a"'}]},
        {"text": "", "tool_calls": [{"index": 0, "id": None, "name": None,
                                     "arguments": ": 1}"}],
         "logprobs": [{"token": token, "logprob": -0.5, "top": [(token, -0.5)]}]})
    chat = Shaper("chat", "abc", "m")
    choice = chat.whole(answer, "tool_calls", 10, STATS, {})["choices"][0]
    assert choice["message"] == {
        "role": "assistant", "content": None, "reasoning_content": "hm",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "f", "arguments": '{"a": 1}'}}]}
    assert choice["logprobs"]["content"][0] == {
        "token": "hi", "logprob": -0.5, "bytes": [104, 105],
        "top_logprobs": [{"token": "hi", "logprob": -0.5, "bytes": [104, 105]}]}
    first = json.loads(chat.chunk({"text": "", "tool_calls": [
        {"index": 0, "id": "call_1", "name": "f", "arguments": ""}]})[6:])
    assert first["choices"][0]["delta"]["tool_calls"] == [
        {"index": 0, "id": "call_1", "type": "function",
         "function": {"name": "f", "arguments": ""}}]
    text = Shaper("completion", "abc", "m").whole(answer_of(
        {"text": "hi", "logprobs": [{"token": token, "logprob": -0.5, "top": [(token, -0.5)]}]}),
        "stop", 10, STATS, {})["choices"][0]["logprobs"]
    assert text == {"tokens": ["hi"], "token_logprobs": [-0.5], "top_logprobs": [{"hi": -0.5}],
                    "text_offset": [0]}


def test_what_other_clients_send_is_understood():
    got = job({"messages": [{"role": "developer", "content": "be terse"}, *USER],
               "stream": None, "max_tokens": None, "stop": None})
    assert got.request.prompt[0] == {"role": "system", "content": "be terse"} and not got.stream
    assert got.request.max_tokens == SERVE_MAX_TOKENS_LIMIT and got.request.stop == []
    got = job({"messages": [*USER, {"role": "assistant", "content": None}]})
    assert got.request.prompt[-1] == {"role": "assistant", "content": ""}


def test_a_reasoning_budget_comes_from_the_request_or_the_server():
    assert job({"messages": USER, "reasoning_budget": 12}).request.reasoning_budget == 12
    assert job({"messages": USER}).request.reasoning_budget == -1
    server = Defaults(DEFAULTS.drafter, DEFAULTS.rule, {**GENERATE, "reasoning_budget": 64})
    assert job({"messages": USER}, defaults=server).request.reasoning_budget == 64
