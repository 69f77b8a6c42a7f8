"""`lsd serve` as users meet it: a real server subprocess on loopback with the tiny GGUF pair,
spoken to with the real `openai` client and with raw HTTP."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import serving
import tinymodels
from click.testing import CliRunner

from lsd_local.cli import cli

CTX = str(tinymodels.TINY_CTX)
QUESTION = [{"role": "user", "content": "the cat is"}]


@pytest.fixture(scope="module")
def server(tiny_pair):
    with serving.Server(tiny_pair[0], "--draft", str(tiny_pair[1]), "--ctx", CTX) as srv:
        yield srv


def test_auto_measures_its_costs_before_the_server_is_ready(server):
    """With nothing learned, auto's costs are measured while the server loads, so that no
    request's stream waits for them; it says so before its ready line."""
    text = "".join(server.stderr)
    assert text.index("auto measured what drafting costs") < text.index("ready at")


def test_a_server_whose_measuring_fails_still_starts_and_says_why(tiny_pair, tmp_path):
    """A target that returns NaN logits fails auto's measuring at startup: the server still
    starts (the first request measures, or fails with its own error), and says why."""
    nan = tinymodels.make_nan_model(tmp_path)
    with serving.Server(nan, "--draft", str(tiny_pair[1]), "--ctx", CTX) as srv:
        assert srv.port is not None
    text = srv.all_stderr()
    assert "auto could not measure what drafting costs" in text and "NaN" in text


def test_what_auto_measured_at_startup_is_kept_for_the_next_server(tiny_pair, tmp_path):
    """Where auto remembers (no LSD_NO_STATE), a second server on the same pair starts from
    what the first measured."""
    env = {"LSD_NO_STATE": "", "XDG_CACHE_HOME": str(tmp_path)}
    starts = []
    for _ in range(2):
        with serving.Server(tiny_pair[0], "--draft", str(tiny_pair[1]), "--ctx", CTX,
                            env=env) as srv:
            pass
        starts.append(srv.all_stderr())
    assert "auto measured what drafting costs" in starts[0]
    assert "auto measured" not in starts[1] and "ready at" in starts[1]


def lsd_run(tiny_pair, prompt: str, *args: str) -> dict:
    """What `lsd run --json` answers with the same model and settings."""
    result = CliRunner().invoke(cli, ["run", "--json", "-m", str(tiny_pair[0]), "--draft",
                                      str(tiny_pair[1]), "--ctx", CTX, *args, prompt])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_chat_answer_equals_lsd_run(server, tiny_pair):
    expected = lsd_run(tiny_pair, "the cat is", "--max-tokens", "40")
    answer = server.client().chat.completions.create(model="anything", messages=QUESTION,
                                                     max_tokens=40)
    assert answer.choices[0].message.content == expected["text"]
    assert answer.choices[0].finish_reason == expected["finish_reason"] == "length"
    assert answer.model == tiny_pair[0].name  # any model name is served by the loaded one
    assert answer.usage.completion_tokens == 40
    assert answer.usage.prompt_tokens == expected["stats"]["prompt_tokens"]
    lsd = answer.model_extra["lsd"]
    assert lsd["rounds"] >= 1 and lsd["tau"] == pytest.approx(40 / lsd["rounds"])


def test_raw_completion_equals_lsd_run_raw(server, tiny_pair):
    expected = lsd_run(tiny_pair, "the cat is", "--raw", "--max-tokens", "30", "--rule", "fly")
    answer = server.client().completions.create(model="x", prompt="the cat is", max_tokens=30,
                                                extra_body={"rule": "fly"})
    assert answer.choices[0].text == expected["text"]


def test_streamed_chat_equals_the_whole_answer(server):
    client = server.client()
    whole = client.chat.completions.create(model="x", messages=QUESTION, max_tokens=50,
                                           extra_body={"drafter": "lookup", "k": 8})
    chunks = list(client.chat.completions.create(
        model="x", messages=QUESTION, max_tokens=50, stream=True,
        stream_options={"include_usage": True}, extra_body={"drafter": "lookup", "k": 8}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 50
    # the lookup drafter's sources: the prompt, the suffix index of earlier answers, text matches
    sources = chunks[-2].model_extra["lsd"]["draft_sources"].keys()
    assert sources <= {"lookup", "suffix", "text", "none"}
    lsd = chunks[-2].model_extra["lsd"]
    assert sum(lsd["accepted_by_source"].values()) == lsd["accepted_exact"] + lsd["accepted_loose"]


def test_json_schema_response_format_is_obeyed(server):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                               "n": {"type": "integer"}},
              "required": ["ok", "n"]}
    answer = server.client().chat.completions.create(
        model="x", messages=QUESTION, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema}})
    assert answer.choices[0].finish_reason == "stop", answer.choices[0].message.content
    value = json.loads(answer.choices[0].message.content)
    assert isinstance(value["ok"], bool) and isinstance(value["n"], int)


def test_models_health_and_metrics(server, tiny_pair):
    status, models = server.request("GET", "/v1/models")[::2]
    assert status == 200 and json.loads(models)["data"][0]["id"] == tiny_pair[0].name
    status, _, body = server.request("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    before = server.metric("lsd_generated_tokens_total")
    server.client().completions.create(model="x", prompt="a", max_tokens=7)
    assert server.metric("lsd_generated_tokens_total") == before + 7
    assert server.metric("lsd_requests_total", 'endpoint="completions",status="200"') >= 1
    assert server.metric("lsd_time_to_first_token_seconds_count") >= 1


BAD_REQUESTS = [
    (b"{not json", 400, None, "not valid JSON"),
    ({"messages": "hi"}, 400, "messages", "messages"),
    ({"messages": QUESTION, "temperature": "hot"}, 400, "temperature", "temperature"),
    ({"messages": QUESTION, "max_tokens": -1}, 400, "max_tokens", "max_tokens"),
    ({"messages": QUESTION, "n": 2}, 400, "n", "n must be 1"),
    ({"messages": QUESTION, "top_p": 1.5}, 400, "top_p", "top_p"),
    ({"messages": QUESTION, "rule": "loose"}, 400, "rule", "choose one of"),
    ({"messages": QUESTION, "k": 0}, 400, "k", "k"),
    # (a library user's own Drafter: no request can name one into a server)
    ({"messages": QUESTION, "drafter": "custom"}, 400, "drafter", "of your own"),
    ({"messages": QUESTION, "rule": "asd", "temperature": 0.7}, 400, "rule", "greedy"),
    ({"messages": [{"role": "user", "content": "the " * 2000}]}, 400, "messages", "context"),
    ({"messages": QUESTION, "grammar": "root ::= ("}, 400, "response_format", "grammar"),
    ({"messages": QUESTION, "grammar": "/etc/passwd"}, 400, "grammar", "GBNF"),
    ({"messages": QUESTION, "response_format": {"type": "json_schema",
                                                "json_schema": {"schema": {"type": "frob"}}}},
     400, "response_format", "schema"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "messages.0.content", "only text"),
    ({"messages": QUESTION, "tools": [{"type": "function"}]}, 400, "tools", "invalid tools[0]"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "json_schema": '
     + b'{"a": ' * 600 + b"1" + b"}" * 601, 400, "json_schema", "nested more than 32 deep"),
    (b'{"x": ' + b"[" * 100000 + b"]" * 100000 + b"}", 400, None, "nested too deeply"),
]


@pytest.mark.parametrize(("body", "status", "param", "words"), BAD_REQUESTS)
def test_bad_request_is_a_clear_error_and_the_server_goes_on(server, body, status, param,
                                                             words):
    got, answer = server.post("/v1/chat/completions", body)
    assert got == status, answer
    assert answer["error"]["param"] == param and words in answer["error"]["message"]
    assert answer["error"]["type"] == "invalid_request_error"
    got, answer = server.post("/v1/completions", {"prompt": "a", "max_tokens": 3})
    assert got == 200 and answer["usage"]["completion_tokens"] == 3


def test_unknown_fields_are_ignored(server):
    got, answer = server.post("/v1/chat/completions", {
        "messages": QUESTION, "max_tokens": 5, "user": "me", "frobnicate": {"x": 1},
        "messages_extra": 3})
    assert got == 200 and answer["usage"]["completion_tokens"] == 5


def test_body_over_the_limit_is_413_and_unknown_paths_404(tiny_pair):
    with serving.Server(tiny_pair[0], "--ctx", CTX, "--max-body", "2048") as srv:
        big = {"messages": [{"role": "user", "content": "x" * 5000}]}
        got, answer = srv.post("/v1/chat/completions", big)
        assert got == 413 and "2048" in answer["error"]["message"]
        status, _, body = srv.request("GET", "/v1/nothing")
        assert status == 404 and json.loads(body)["error"]["type"] == "not_found_error"
        status, _, body = srv.request("GET", "/v1/chat/completions")
        assert status == 405


def test_api_key_guards_everything_but_health(tiny_pair):
    with serving.Server(tiny_pair[0], "--ctx", CTX, env={"LSD_API_KEY": "s3cret"}) as srv:
        assert srv.request("GET", "/health")[0] == 200
        assert srv.request("GET", "/v1/models", headers={"Authorization": "bearer s3cret"})[
            0] == 200  # the scheme is case-insensitive (RFC 7235)
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"},
                        {"Authorization": "Basic s3cret"}):
            status, got_headers, _ = srv.request("GET", "/v1/models", headers=headers)
            assert status == 401 and got_headers["www-authenticate"] == "Bearer"
        assert srv.request("GET", "/metrics")[0] == 401
        with pytest.raises(openai.AuthenticationError):
            srv.client("wrong").models.list()
        assert srv.client("s3cret").models.list().data[0].id == tiny_pair[0].name


def test_cors_only_for_named_origins(tiny_pair, server):
    preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
    status, headers, _ = server.request("OPTIONS", "/v1/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in headers
    with serving.Server(tiny_pair[0], "--ctx", CTX, "--cors-origin", "http://app.example",
                        "--api-key", "k") as srv:
        status, headers, _ = srv.request("OPTIONS", "/v1/chat/completions", headers=preflight)
        assert status == 200 and headers["access-control-allow-origin"] == "http://app.example"


def long_request(server) -> tuple:
    """A streaming answer that runs until the context is full; (connection, response) after
    its first text chunk arrived, so the engine is busy with it."""
    conn, response = serving.stream_raw(server.port, {"prompt": "the", "max_tokens": 100000})
    assert response.status == 200
    serving.read_event(response)
    return conn, response


def test_full_queue_is_503_with_retry_after_and_a_dropped_stream_stops(tiny_pair):
    with serving.Server(tiny_pair[0], "--ctx", CTX, "--max-queue", "0",
                        "--parallel", "1") as srv:
        conn, _ = long_request(srv)
        got, headers, body = srv.request("POST", "/v1/completions",
                                         {"prompt": "a", "max_tokens": 2},
                                         {"Content-Type": "application/json"})
        assert got == 503 and headers["retry-after"] == "1", body
        assert "busy" in json.loads(body)["error"]["message"]
        conn.close()  # the client goes away: its generation stops at the next round
        got, answer = srv.post("/v1/completions", {"prompt": "a", "max_tokens": 2})
        while got == 503:  # the engine has not noticed yet (one round at most)
            got, answer = srv.post("/v1/completions", {"prompt": "a", "max_tokens": 2})
        assert got == 200
        assert srv.metric("lsd_requests_total", 'endpoint="completions",status="499"') == 1
        assert srv.metric("lsd_generated_tokens_total") < tinymodels.TINY_CTX


def test_timeout_ends_the_answer_with_length(server):
    got, answer = server.post("/v1/completions", {"prompt": "a", "max_tokens": 100000,
                                                  "timeout": 0.001})
    assert got == 200 and answer["choices"][0]["finish_reason"] == "length"
    assert answer["lsd"]["timed_out"] and answer["usage"]["completion_tokens"] < 900


def test_alternating_conversations_keep_their_cache(tiny_pair):
    """Two clients take turns: each turn after the first reuses at least its conversation's
    previous prompt from the cache, whether saved states bring it back (one sequence, or
    idle sequences parked), or each conversation keeps its own sequence (--parallel 2 with no
    state cache), and the answers equal those of a server that keeps nothing."""
    answers = {}
    for cache, parallel in (("4", "1"), ("0", "2"), ("4", "3"), ("0", "1")):
        with serving.Server(tiny_pair[0], "--draft", str(tiny_pair[1]), "--ctx", CTX,
                            "--state-cache", cache, "--parallel", parallel) as srv:
            client = srv.client()
            talks = {name: [{"role": "system", "content": f"you are {name} " * 10}]
                     for name in ("ann", "bob")}
            cached = []
            for turn in range(3):
                for name, messages in talks.items():
                    messages.append({"role": "user", "content": f"question {turn} of {name}"})
                    answer = client.chat.completions.create(model="x", messages=messages,
                                                            max_tokens=20)
                    messages.append({"role": "assistant",
                                     "content": answer.choices[0].message.content})
                    cached.append((answer.usage.prompt_tokens,
                                   answer.usage.prompt_tokens_details.cached_tokens))
            answers[cache + parallel] = (talks, cached)
    assert answers["41"][0] == answers["02"][0] == answers["43"][0] == answers["01"][0]
    for kept in ("41", "02", "43"):  # (43: idle sequences parked in the state cache)
        turns = answers[kept][1]
        # each turn reuses at least its conversation's previous prompt (the tiny model's
        # byte soup answers tokenize differently when sent back, so not always the answer)
        for (earlier, _), (_, cached) in zip(turns, turns[2:], strict=False):
            assert cached >= earlier, (kept, turns)
    assert all(cached < 20 for _, cached in answers["01"][1][2:]), answers["01"][1]


def test_engine_death_mid_stream_is_an_error_event_and_the_server_recovers(tiny_pair):
    with serving.Server(tiny_pair[0], "--ctx", CTX) as srv:
        expected = srv.client().completions.create(model="x", prompt="the cat",
                                                   max_tokens=20).choices[0].text
        _, response = long_request(srv)
        os.kill(srv.engine_pid(), signal.SIGKILL)  # what a llama.cpp abort does
        events = []
        while (event := serving.read_event(response)) is not None:
            events.append(event)
        error = json.loads(events[-1])["error"]
        assert "engine process was killed by SIGKILL" in error["message"]
        assert error["type"] == "server_error"
        srv.wait_for("the engine process is back")
        answer = srv.client().completions.create(model="x", prompt="the cat", max_tokens=20)
        assert answer.choices[0].text == expected
        assert srv.metric("lsd_engine_restarts_total") == 1


def test_an_engine_killed_by_one_signal_three_times_is_not_restarted_again(tiny_pair):
    """A deterministic crash that no request causes (a CPU that traps what llama.cpp uses)
    must not restart forever: after three SIGILL deaths of an idle engine, /health says
    failed and why, and requests get 503 naming it."""
    with serving.Server(tiny_pair[0], "--ctx", CTX) as srv:
        for death in range(3):
            os.kill(srv.engine_pid(), signal.SIGILL)
            if death < 2:
                srv.wait_for("the engine process is back")
        srv.wait_for("giving up: the engine process was killed by SIGILL")
        status, _, body = srv.request("GET", "/health")
        health = json.loads(body)
        assert status == 503 and health["status"] == "failed", health
        assert "SIGILL" in health["reason"] and "--no-repack" in health["reason"]
        status, answer = srv.post("/v1/completions", {"prompt": "the", "max_tokens": 4})
        assert status == 503 and "SIGILL" in answer["error"]["message"]


def test_requests_that_crash_the_engine_never_stop_the_server(tiny_pair):
    """What a hostile page could do: crash the engine during its requests, again and again.
    Each such request fails naming the signal, is not retried, and the next request is
    served."""
    with serving.Server(tiny_pair[0], "--ctx", CTX) as srv:
        for _ in range(4):
            _, response = long_request(srv)
            os.kill(srv.engine_pid(), signal.SIGSEGV)
            events = []
            while (event := serving.read_event(response)) is not None:
                events.append(event)
            error = json.loads(events[-1])["error"]
            assert "SIGSEGV" in error["message"] and "not retried" in error["message"]
            srv.wait_for("the engine process is back")
        status, answer = srv.post("/v1/completions", {"prompt": "the", "max_tokens": 4})
        assert status == 200 and answer["choices"][0]["text"]
        assert srv.metric("lsd_engine_restarts_total") == 4


def test_sigterm_lets_the_stream_finish_then_exits_0(tiny_pair):
    srv = serving.Server(tiny_pair[0], "--ctx", CTX)
    with srv:
        conn, response = serving.stream_raw(srv.port, {"prompt": "the", "max_tokens": 300})
        serving.read_event(response)
        srv.process.send_signal(signal.SIGTERM)
        events = []
        while (event := serving.read_event(response)) is not None:
            events.append(event)
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
        assert srv.process.wait(timeout=serving.HANG) == 0


def test_sigterm_grace_period_ends_a_long_stream_with_an_error(tiny_pair):
    with serving.Server(tiny_pair[0], "--ctx", CTX, "--shutdown-grace", "0") as srv:
        conn, response = long_request(srv)
        srv.process.send_signal(signal.SIGINT)  # Ctrl-C
        events = []
        while (event := serving.read_event(response)) is not None:
            events.append(event)
        assert "shutting down" in json.loads(events[-1])["error"]["message"]
        assert srv.process.wait(timeout=serving.HANG) == 0


def _client_session(srv, expected: dict, worker: int) -> list[str]:
    """Five requests of one client: streamed or not, every second stream dropped midway."""
    outcomes = []
    for i in range(5):
        prompt = ["the cat", "a dog", "def f"][(worker + i) % 3]
        if (worker + i) % 3 == 1 and i % 2:  # drop this stream after its first chunk
            serving.drop_stream(srv.port, prompt, 60)
            outcomes.append("dropped")
            continue
        text = serving.complete(srv, prompt, 60, stream=bool(i % 2))
        assert text == expected[prompt], (worker, i, prompt)
        outcomes.append("ok")
    return outcomes


def test_load_eight_clients_mixed_streaming_and_disconnects(tiny_pair):
    with serving.Server(tiny_pair[0], "--draft", str(tiny_pair[1]), "--ctx", CTX) as srv:
        expected = {p: srv.client().completions.create(model="x", prompt=p, max_tokens=60)
                    .choices[0].text for p in ("the cat", "a dog", "def f")}
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(_client_session, srv, expected, w) for w in range(8)]
            outcomes = [f.result(timeout=serving.HANG) for f in futures]
        flat = [o for session in outcomes for o in session]
        assert flat.count("ok") + flat.count("dropped") == 40 and flat.count("dropped") >= 4
        status, _, body = srv.request("GET", "/health")
        assert status == 200 and json.loads(body) == {"status": "ok", "queue": 0,
                                                      "processing": 0}


def test_a_short_request_is_not_held_behind_a_long_answer(tiny_pair):
    """Side by side (--parallel 2): a short request sent while a long answer streams is
    answered while the long one still runs; with --parallel 1 it waits for the whole long
    answer. Both answers equal what each gets alone."""
    for parallel, overtakes in (("2", True), ("1", False)):
        with serving.Server(tiny_pair[0], "--ctx", CTX, "--parallel", parallel) as srv:
            alone = srv.post("/v1/completions", {"prompt": "a", "max_tokens": 3})[1]
            conn, response = long_request(srv)
            got, short = srv.post("/v1/completions", {"prompt": "a", "max_tokens": 3})
            _, _, health = srv.request("GET", "/health")
            assert got == 200 and short["choices"] == alone["choices"]
            assert (json.loads(health)["processing"] == 1) is overtakes, health
            conn.close()


def test_concurrent_requests_are_served_side_by_side(server):
    """Two requests at once run side by side; both answers are whole and equal alone."""
    results = {}

    def ask(name: str, prompt: str) -> None:
        results[name] = server.client().completions.create(model="x", prompt=prompt,
                                                           max_tokens=30).choices[0].text

    threads = [threading.Thread(target=ask, args=(n, p)) for n, p in (("a", "x"), ("b", "y"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(serving.HANG)
    alone = {n: server.client().completions.create(model="x", prompt=p, max_tokens=30)
             .choices[0].text for n, p in (("a", "x"), ("b", "y"))}
    assert results == alone


def test_serve_errors_are_one_line(tiny_pair, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    srv = serving.Server(broken, "--host", "0.0.0.0", wait_ready=False)
    assert srv.process.wait(timeout=serving.HANG) == 1
    err = srv.all_stderr()
    assert "warning: listening on 0.0.0.0 without --api-key" in err
    assert "Error:" in err and "Traceback" not in err
    with serving.Server(tiny_pair[0], "--ctx", CTX) as running:
        taken = serving.Server(tiny_pair[0], "--port", str(running.port), wait_ready=False)
        code = taken.process.wait(timeout=serving.HANG)
        err = taken.all_stderr()
    assert code == 1 and re.search(r"cannot listen on 127\.0\.0\.1:\d+", err), err
