"""The HTTP surface of `lsd serve` fuzzed with what clients really send: 2,000 bodies built by
hypothesis from the fields lsd reads, each given odd values (wrong types, NaN, huge and
negative numbers, control-token spellings, nesting), plus random headers. No answer may be a
500 (a 500 is a fault of lsd), no streamed answer may end in a server error, and the server
must answer a plain request afterwards, from the same engine process.

Bounded in count (derandomized examples) and in time (answers of at most 4 tokens on the
tiny model; requests time out after 10 s)."""

from __future__ import annotations

import http.client
import json

import pytest
import serving
import tinymodels
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CTX = str(tinymodels.TINY_CTX)
EXAMPLES = 2000

SCALARS = (st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70)
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.sampled_from(["", "auto", "none", "required", "text", "json_object", "-1",
                              "<|im_end|>", "\udcff", "strict", "fly", "asd", "lookup",
                              "model", "root ::= \"a\""])
           | st.text(max_size=12))
ANY = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                   | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
SMALL_INT = st.integers(-3, 40) | st.sampled_from([2 ** 31, -(2 ** 63), 10 ** 20])
NUMBER = SMALL_INT | st.floats(allow_nan=True, allow_infinity=True) | st.just(-1)


def message() -> st.SearchStrategy:
    content = (st.text(max_size=30) | st.sampled_from(["<|im_start|>system\nx<|im_end|>"])
               | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image"]),
                                                 "text": st.text(max_size=10) | ANY}),
                          max_size=2) | ANY)
    call = st.fixed_dictionaries({"id": st.text(max_size=4), "type": st.just("function"),
                                  "function": st.fixed_dictionaries({
                                      "name": st.text(max_size=6) | ANY,
                                      "arguments": st.text(max_size=12) | ANY})})
    return st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "tool", "developer", "x"])
         | ANY},
        optional={"content": content, "tool_calls": st.lists(call, max_size=2) | ANY,
                  "tool_call_id": st.text(max_size=4) | ANY, "name": ANY})


TOOL = st.fixed_dictionaries({"type": st.sampled_from(["function", "x"]), "function":
                              st.fixed_dictionaries({"name": st.sampled_from(["f", "g", ""]),
                                                     "parameters": ANY | st.just({
                                                         "type": "object", "properties": {
                                                             "a": {"type": "string"}}})})})
SCHEMA = ANY | st.sampled_from([{"type": "string", "maxLength": 10 ** 6},
                                {"type": "object", "properties": {"a": {"type": "integer"}}},
                                {"type": "array", "items": {"$ref": "#/nope"}}])
FIELDS = {
    "max_tokens": NUMBER, "max_completion_tokens": NUMBER, "temperature": NUMBER,
    "top_p": NUMBER, "top_k": NUMBER, "min_p": NUMBER, "seed": NUMBER,
    "stop": st.lists(st.text(max_size=4), max_size=3) | ANY, "stream": st.booleans() | ANY,
    "stream_options": st.just({"include_usage": True}) | ANY,
    "n": NUMBER, "presence_penalty": NUMBER, "frequency_penalty": NUMBER,
    "repeat_penalty": NUMBER, "repeat_last_n": NUMBER,
    "logit_bias": st.dictionaries(st.sampled_from(["1", "5", "-3", "999999", "x"]), NUMBER,
                                  max_size=2) | ANY,
    "logprobs": st.booleans() | NUMBER, "top_logprobs": NUMBER, "n_probs": NUMBER,
    "grammar": st.sampled_from(['root ::= "a" | "b"', "root ::= (", "json", "root ::= x",
                                'root ::= "a"{0,99999}', "root ::= " + "(" * 200 + '"a"'
                                + ")" * 200]) | ANY,
    "json_schema": SCHEMA,
    "response_format": st.fixed_dictionaries({"type": st.sampled_from(
        ["text", "json_object", "json_schema", "yaml"])}, optional={
        "json_schema": st.fixed_dictionaries({"name": st.just("x")},
                                             optional={"schema": SCHEMA})}) | ANY,
    "tools": st.lists(TOOL, max_size=2) | ANY,
    "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function",
                                                                 "function": {"name": "f"}}])
    | ANY,
    "parallel_tool_calls": ANY, "chat_template_kwargs": ANY | st.just({"messages": 1}),
    "reasoning_effort": ANY, "reasoning_format": ANY,
    "rule": ANY, "drafter": ANY, "k": NUMBER | ANY, "theta": NUMBER, "window": NUMBER,
    "entropy_top_k": NUMBER, "entropy": ANY, "gate": NUMBER, "max_exceptions": NUMBER,
    "budget": NUMBER, "p_min": NUMBER, "timeout": NUMBER, "lsd_rounds": ANY,
    "echo": ANY, "suffix": ANY, "best_of": NUMBER, "typical_p": NUMBER, "model": ANY,
}


@st.composite
def requests(draw) -> tuple[str, bytes, dict]:
    """(path, body bytes, headers); each odd header or body in about one request of ten."""
    def rarely() -> bool:
        return draw(st.sampled_from([False] * 9 + [True]))

    chat = draw(st.booleans())
    body = {"messages": draw(st.lists(message(), max_size=3) | ANY)} if chat else \
        {"prompt": draw(st.text(max_size=20) | st.lists(st.text(max_size=5), max_size=2)
                        | ANY)}
    names = draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=6, unique=True))
    body.update({name: draw(FIELDS[name]) for name in names})
    if rarely():
        body = draw(ANY)  # not even an object
    data = json.dumps(body).encode("utf-8", "surrogatepass")
    if rarely():
        data = draw(st.binary(max_size=40))
    headers = {"Content-Type": draw(st.sampled_from(
        ["application/json"] * 6 + ["text/plain", "application/json; charset=latin-1", ""]))}
    if rarely():
        headers["Origin"] = draw(st.sampled_from(["null", "https://evil.example", "x"]))
    if rarely():
        headers["Host"] = draw(st.sampled_from(["evil.example", "[::1", "", "a:b:c"]))
    if rarely():
        headers["Authorization"] = draw(st.text(st.characters(min_codepoint=32,
                                                              max_codepoint=126), max_size=10))
    return ("/v1/chat/completions" if chat else "/v1/completions"), data, headers


@pytest.fixture(scope="module")
def server(tiny_pair):
    with serving.Server(tiny_pair[0], "--draft", str(tiny_pair[1]), "--ctx", CTX,
                        "--max-tokens-limit", "4", "--request-timeout", "10") as srv:
        yield srv


def send(port: int, path: str, data: bytes, headers: dict) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=serving.HANG)
    try:
        conn.request("POST", path, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_two_thousand_odd_requests_get_no_500_and_the_server_lives(server):
    pid = server.engine_pid()
    statuses: dict[int, int] = {}

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(requests())
    def one(request):
        path, data, headers = request
        status, body = send(server.port, path, data, headers)
        statuses[status] = statuses.get(status, 0) + 1
        assert status < 500, (status, body[:300], data[:300], headers)
        assert b'"server_error"' not in body, (body[:300], data[:300])  # streamed errors

    one()
    print("statuses:", dict(sorted(statuses.items())))
    assert sum(statuses.values()) >= EXAMPLES
    assert statuses.get(200, 0) >= 50 and statuses.get(400, 0) >= 500, statuses
    status, answer = server.post("/v1/completions", {"prompt": "the", "max_tokens": 4})
    assert status == 200 and answer["choices"][0]["text"]
    assert server.engine_pid() == pid, "a request killed the engine process"
    server.stop()
    assert "Traceback" not in server.all_stderr()
