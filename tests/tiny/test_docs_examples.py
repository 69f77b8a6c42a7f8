"""The Python examples in the docs run: each block whose first line says it runs in the
tests is executed against a tiny model (the model file and the server's address swapped in)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import serving
import tinymodels

ROOT = Path(__file__).resolve().parents[2]
MARK = "# runs in the tests, on a tiny model"


def examples(page: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return [block for block in re.findall(r"```python\n(.*?)```", text, re.S)
            if block.startswith(MARK)]


def run(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<docs example>", "exec"), {})  # noqa: S102 - the docs' own code
    return out.getvalue()


def test_every_page_with_agents_has_a_runnable_example():
    assert examples("library.md") and examples("server.md")


@pytest.mark.parametrize("code", examples("library.md"))
def test_library_examples_run(code, tiny_agent):
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" in code
    printed = run(code.replace("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", str(tiny_agent)))
    assert printed.strip().endswith(("stop", "length", "tool_calls"))


@pytest.mark.parametrize("code", examples("server.md"))
def test_server_examples_run(code, tiny_agent):
    with serving.Server(tiny_agent, "--ctx", str(tinymodels.TINY_CTX), "--drafter", "lookup",
                        "--max-tokens", "40") as srv:
        printed = run(code.replace("http://127.0.0.1:8080/v1", srv.base_url))
    assert printed
