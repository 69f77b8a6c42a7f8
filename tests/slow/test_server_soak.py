"""`lsd serve` under a long run (`pytest -m slow`): 220 requests from 4 clients, streamed and
not, some dropped midway, over alternating conversations; every answer stays whole and the
memory of both processes after them is within 10 % of what it was after the first 20. And on
the real Qwen target, an answer through the server equals `lsd run`'s."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import serving
import tinymodels
from click.testing import CliRunner

from lsd_local.cli import cli

pytestmark = pytest.mark.slow

PROMPTS = ["the cat is", "a dog and a cat", "def f(x): return", "in the end it is"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def one_request(srv, expected: dict, i: int) -> str:
    prompt = PROMPTS[i % len(PROMPTS)]
    if i % 7 == 3:
        serving.drop_stream(srv.port, prompt, 80)
        return "dropped"
    text = serving.complete(srv, prompt, 80, stream=bool(i % 2))
    assert text == expected[prompt], i
    return "ok"


def batch(srv, expected: dict, start: int, count: int) -> list[str]:
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda i: one_request(srv, expected, i),
                             range(start, start + count)))


def test_memory_is_flat_over_220_requests(tiny_pair):
    with serving.Server(tiny_pair[0], "--draft", str(tiny_pair[1]), "--ctx",
                        str(tinymodels.TINY_CTX)) as srv:
        expected = {p: srv.client().completions.create(model="x", prompt=p, max_tokens=80)
                    .choices[0].text for p in PROMPTS}
        outcomes = batch(srv, expected, 0, 20)
        engine = srv.engine_pid()
        after_20 = rss_mb(srv.process.pid) + rss_mb(engine)
        outcomes += batch(srv, expected, 20, 200)
        after_220 = rss_mb(srv.process.pid) + rss_mb(engine)
        assert srv.engine_pid() == engine  # no restart happened
        assert outcomes.count("ok") + outcomes.count("dropped") == 220
        assert after_220 <= 1.10 * after_20, (after_20, after_220)


def test_qwen_answer_through_the_server_equals_lsd_run(qwen_pair):
    prompt = "Write a Python function that returns the square of a number."
    args = ["--drafter", "none", "--ctx", "2048", "--threads", "2"]
    result = CliRunner().invoke(cli, ["run", "--json", "-m", str(qwen_pair[0]),
                                      "--max-tokens", "48", *args, prompt])
    assert result.exit_code == 0, result.output
    expected = json.loads(result.stdout)["text"]
    with serving.Server(qwen_pair[0], *args) as srv:
        answer = srv.client().chat.completions.create(
            model="x", messages=[{"role": "user", "content": prompt}], max_tokens=48)
    assert answer.choices[0].message.content == expected
