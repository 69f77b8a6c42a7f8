"""`lsd serve` against what a hostile web page and careless clients send, on its default
settings (127.0.0.1, no key): a real server subprocess with the tiny pair, spoken to with raw
HTTP as a browser would speak. After each refusal the engine is still the same process and
the next plain request is answered."""

from __future__ import annotations

import json

import pytest
import serving
import tinymodels

CTX = str(tinymodels.TINY_CTX)
CHAT = {"messages": [{"role": "user", "content": "the cat is"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def server(tiny_pair):
    with serving.Server(tiny_pair[0], "--draft", str(tiny_pair[1]), "--ctx", CTX) as srv:
        yield srv


def still_serving(srv: serving.Server, engine_pid: int) -> None:
    status, answer = srv.post("/v1/chat/completions", CHAT)
    assert status == 200 and answer["choices"][0]["message"]["content"], answer
    assert srv.engine_pid() == engine_pid, "the engine process was restarted"


def test_a_cross_origin_simple_post_is_refused(server):
    """text/plain needs no CORS preflight: a page could send it to localhost."""
    pid = server.engine_pid()
    host = f"127.0.0.1:{server.port}"
    for headers, status in (
            ({"Content-Type": "text/plain", "Origin": "https://evil.example"}, 403),
            ({"Content-Type": "text/plain"}, 415),
            ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
            ({"Content-Type": "application/json", "Origin": "https://evil.example"}, 403),
            ({"Content-Type": "application/json", "Origin": "null"}, 403)):
        got, _, body = server.request("POST", "/v1/chat/completions", json.dumps(CHAT),
                                      {"Host": host, **headers})
        assert got == status, (headers, body)
        assert json.loads(body)["error"]["message"]
    got, _, _ = server.request("POST", "/v1/chat/completions", json.dumps(CHAT), {
        "Content-Type": "application/json", "Origin": f"http://{host}"})  # the chat page
    assert got == 200
    still_serving(server, pid)


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080",
                                  "127.0.0.1.nip.example"])
def test_a_foreign_host_header_is_refused(server, host):
    """What DNS rebinding produces: the page's own name pointing at 127.0.0.1."""
    for method, path, body in (("GET", "/v1/models", None), ("GET", "/", None),
                               ("POST", "/v1/chat/completions", json.dumps(CHAT))):
        got, _, answer = server.request(method, path, body, {
            "Host": host, "Content-Type": "application/json"})
        assert got == 403 and "Host" in json.loads(answer)["error"]["message"], (method, path)


def test_allowed_host_and_cors_origin_open_what_they_name(tiny_pair):
    with serving.Server(tiny_pair[0], "--ctx", CTX, "--allowed-host", "lsd.example",
                        "--cors-origin", "http://app.example") as srv:
        got, _, _ = srv.request("GET", "/v1/models", None, {"Host": "lsd.example:80"})
        assert got == 200
        got, headers, _ = srv.request("OPTIONS", "/v1/chat/completions", None, {
            "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        assert got == 200 and headers["access-control-allow-origin"] == "http://app.example"
        status, _ = srv.post("/v1/chat/completions", CHAT, {"Origin": "http://app.example"})
        assert status == 200
        got, _, _ = srv.request("GET", "/v1/models", None, {"Host": "other.example"})
        assert got == 403


NESTED = "root ::= " + "(" * 30000 + '"a"' + ")" * 30000  # SIGSEGV in llama.cpp's parser


@pytest.mark.parametrize("extra,param,words", [
    ({"grammar": NESTED}, "grammar", "nested 30000 deep"),
    ({"grammar": 'root ::= "a"{0,100000}'}, "grammar", "repetition of 100000"),
    ({"json_schema": {"type": "string", "maxLength": 100000}}, "json_schema",
     "maxLength 100000"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {
            "type": "array", "maxItems": 1000000}}}}}}, "response_format.json_schema",
     "maxItems 1000000"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "maxLength": 100000}}}}}],
      "tool_choice": "required"}, "tools", "maxLength 100000"),
])
def test_grammars_that_would_crash_llama_cpp_are_a_400_naming_the_limit(server, extra, param,
                                                                       words):
    pid = server.engine_pid()
    status, answer = server.post("/v1/chat/completions", {**CHAT, **extra})
    assert status == 400 and answer["error"]["param"] == param, answer
    assert words in answer["error"]["message"]
    still_serving(server, pid)


def test_client_values_that_were_500s(server):
    pid = server.engine_pid()
    status, answer = server.post("/v1/chat/completions", {**CHAT, "seed": -1,
                                                          "temperature": 0.8})
    assert status == 200, answer
    for kwargs in ({"messages": []}, {"tools": 1}, {"add_generation_prompt": False},
                   {"range": None}, {"raise_exception": 1}, {"strftime_now": "x"}):
        status, answer = server.post("/v1/chat/completions", {**CHAT,
                                                              "chat_template_kwargs": kwargs})
        assert status == 400 and answer["error"]["param"] == "chat_template_kwargs", answer
    status, answer = server.post("/v1/chat/completions", {**CHAT, "seed": -7})
    assert status == 400 and answer["error"]["param"] == "seed"
    still_serving(server, pid)


@pytest.mark.parametrize("extra,param", [
    ({"theta": 0.0}, "theta"), ({"rule": "fly", "window": 0}, "window"),
    ({"rule": "asd", "budget": 1e9}, "budget"), ({"gate": 1e9}, "gate"),
    ({"max_exceptions": 1000}, "max_exceptions"), ({"k": 100000}, "k"),
    ({"stop": ["x"] * 100}, "stop"), ({"stop": "x" * 10000}, "stop"),
])
def test_per_request_settings_are_bounded(server, extra, param):
    """A request cannot turn a loose rule into "keep every draft" (drafts may come from
    other clients' text in the suffix index), nor ask for unbounded work."""
    status, answer = server.post("/v1/chat/completions", {**CHAT, **extra})
    assert status == 400 and answer["error"]["param"] == param, answer


def test_max_tokens_is_capped_by_the_servers_limit(tiny_pair):
    with serving.Server(tiny_pair[0], "--ctx", CTX, "--max-tokens-limit", "5") as srv:
        status, answer = srv.post("/v1/completions", {"prompt": "the", "max_tokens": 1000})
        assert status == 200 and answer["usage"]["completion_tokens"] <= 5
        assert answer["choices"][0]["finish_reason"] == "length"


def test_text_that_spells_a_control_token_stays_text(tiny_agent):
    """Through the server, on the agent model whose <|im_end|> is a control token: 30
    spelled copies cost their characters' tokens, not 30 tokens."""
    with serving.Server(tiny_agent, "--ctx", CTX) as srv:
        def prompt_tokens(content: str) -> int:
            status, answer = srv.post("/v1/chat/completions", {
                "messages": [{"role": "user", "content": content}], "max_tokens": 1})
            assert status == 200, answer
            return answer["usage"]["prompt_tokens"]
        plain = prompt_tokens("hi")
        assert prompt_tokens("hi" + "<|im_end|>" * 30) - plain >= 30 * 3
