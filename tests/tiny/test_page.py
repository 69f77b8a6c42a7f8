"""The chat page's server side on a real `lsd serve` (tiny models): the page and its files
are served, public and locked down (no script from elsewhere), and a stream with
`lsd_rounds` carries each round's origin spans and counts, which add up to the answer and
its statistics. The page itself is tested in a real browser (tests/browser/)."""

from __future__ import annotations

import json
import re
import time

import pytest
import serving
import tinymodels

from lsd_local.server.page import FILES, WEB_DIR

CTX = str(tinymodels.TINY_CTX)


@pytest.fixture(scope="module")
def server(tiny_pair):
    with serving.Server(tiny_pair[0], "--draft", str(tiny_pair[1]), "--ctx", CTX,
                        "--api-key", "k") as srv:
        yield srv


def test_the_page_and_its_files_are_served_without_the_key(server):
    status, headers, body = server.request("GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "script-src" not in headers["content-security-policy"]  # default-src 'self' only
    assert "default-src 'self'" in headers["content-security-policy"]
    page = body.decode()
    for name in FILES:
        if name != "index.html":
            assert f"/static/{name}" in page
            status, headers, data = server.request("GET", f"/static/{name}")
            assert status == 200 and data == (WEB_DIR / name).read_bytes()
            assert headers["content-type"] == FILES[name]
    assert "http" not in page.replace("http-equiv", "")  # nothing fetched from elsewhere
    assert server.request("GET", "/v1/models")[0] == 401  # the API still needs the key


@pytest.mark.parametrize("path", ["/static/index.html", "/static/..%2Fapp.py",
                                  "/static/nothing.js", "/static/", "/static/page.py"])
def test_only_the_pages_files_are_served(server, path):
    assert server.request("GET", path)[0] in (401, 404)


def stream_chunks(server, body: dict) -> list[dict]:
    status, _, data = server.request("POST", "/v1/chat/completions", body,
                                     {"Content-Type": "application/json",
                                      "Authorization": "Bearer k"})
    assert status == 200, (data, "".join(server.stderr[-40:]))  # (the server's log: why)
    events = [line[6:] for line in data.decode().split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_lsd_rounds_carry_origin_spans_that_add_up_to_the_answer(server):
    body = {"messages": [{"role": "user", "content": "the cat is"}], "max_tokens": 40,
            "stream": True, "drafter": "lookup", "k": 8, "lsd_rounds": True, "logprobs": True}
    chunks = stream_chunks(server, body)
    rounds = [c["lsd"]["round"] for c in chunks if "round" in c.get("lsd", {})]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    final = chunks[-1]["lsd"]
    assert "".join(t for r in rounds for t, _ in r["spans"]) == text
    assert {o for r in rounds for _, o in r["spans"]} <= {"t", "e", "l"}
    assert len(rounds) == final["rounds"]
    assert sum(r["tokens"] for r in rounds) == 40
    assert sum(r["drafted"] for r in rounds) == final["drafted"]
    assert sum(r["accepted"] for r in rounds) == final["accepted_exact"] + final["accepted_loose"]
    assert sum(r["loose"] for r in rounds) == final["accepted_loose"]
    for chunk, r in ((c, c["lsd"]["round"]) for c in chunks if "round" in c.get("lsd", {})):
        assert len(chunk["choices"][0]["logprobs"]["content"]) == r["tokens"]
    plain = stream_chunks(server, {**body, "lsd_rounds": False})  # as OpenAI's clients get it
    assert all("lsd" not in c for c in plain[:-1]) and "round" not in plain[-1]["lsd"]


def test_open_starts_the_browser_on_the_page_once_the_model_is_loaded(tiny_pair, tmp_path):
    seen = tmp_path / "url"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {seen}.tmp && mv {seen}.tmp {seen}\n')
    browser.chmod(0o755)
    with serving.Server(tiny_pair[0], "--ctx", CTX, "--open",
                        env={"BROWSER": f"{browser} %s"}) as srv:
        srv.wait_for(re.compile(r"chat page: http://127\.0\.0\.1:\d+/"))
        deadline = time.monotonic() + serving.HANG
        while not seen.exists() and time.monotonic() < deadline:  # the browser runs apart
            time.sleep(0.05)
        assert seen.read_text().strip() == f"http://127.0.0.1:{srv.port}/"
