"""Agents from the command line (click's CliRunner, the tiny agent model): tool calls shown
as calls and under tool_calls in --json, reasoning apart (stderr for `lsd run`, /think in
chat), llama.cpp's sampling flags."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from lsd_local.cli import cli

TOOLS = [{"type": "function", "function": {"name": "now", "description": "The time",
                                           "parameters": {"type": "object",
                                                          "properties": {}}}}]
END = ("--logit-bias", "2+30")  # the tiny model's end of text made likely
THINK = 'root ::= "<think>" [a-z ]{4,12} "</think>" [a-z ]{4,12}'


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


@pytest.fixture()
def tools_file(tmp_path):
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    return path


def test_run_shows_a_call_as_a_call_and_json_has_it(tiny_agent, tools_file):
    args = ("run", "-m", tiny_agent, "--tools", tools_file, "--tool-choice", "required",
            "--max-tokens", "80", *END, "what time is it?")
    shown = invoke(*args)
    assert shown.exit_code == 0, shown.output
    assert "→ now({" in shown.stdout
    data = json.loads(invoke(*args[:-1], "--json", args[-1]).stdout)
    assert [call["name"] for call in data["tool_calls"]] == ["now"]
    assert data["finish_reason"] == "tool_calls" and data["text"] == ""
    named = json.loads(invoke("run", "-m", tiny_agent, "--tools", tools_file, "--tool-choice",
                              "now", "--max-tokens", "80", *END, "--json", "time?").stdout)
    assert named["tool_calls"][0]["id"].startswith("call_")


def test_run_puts_reasoning_on_stderr_and_in_json(tiny_agent):
    shown = invoke("run", "-m", tiny_agent, "--grammar", THINK, "--max-tokens", "60", "hi")
    assert shown.exit_code == 0, shown.output
    data = json.loads(invoke("run", "-m", tiny_agent, "--grammar", THINK, "--max-tokens",
                             "60", "--json", "hi").stdout)
    assert data["reasoning"] and data["reasoning"] in shown.stderr
    assert shown.stdout.strip() == data["text"].strip() and "<think>" not in shown.stdout
    kept = json.loads(invoke("run", "-m", tiny_agent, "--grammar", THINK, "--max-tokens",
                             "60", "--json", "--reasoning-format", "none", "hi").stdout)
    assert kept["text"].startswith("<think>") and kept["reasoning"] == ""


def test_chat_thinks_on_and_off_and_hides(tiny_agent):
    script = "/think off\n/think hide\nhi\n/think show\n/think nonsense\n"
    result = invoke("chat", tiny_agent, "--max-tokens", "4", input=script)
    assert result.exit_code == 0, result.output
    assert "enable_thinking is False" in result.output
    assert "(reasoning hidden)" in result.output and "(reasoning shown" in result.output
    assert "usage: /think on|off|show|fold|hide" in result.output


def test_chat_folds_reasoning_by_default_and_shows_or_hides_it(tiny_agent):
    """Reasoning is one line by default ("thought for N tokens"), in full after /think show,
    nothing after /think hide; the answer is shown each time."""
    script = "hi\n/think show\n/reset\nhi\n/think hide\n/reset\nhi\n"
    result = invoke("chat", tiny_agent, "--grammar", THINK, "--max-tokens", "60",
                    input=script)
    assert result.exit_code == 0, result.output
    data = json.loads(invoke("run", "-m", tiny_agent, "--grammar", THINK, "--max-tokens",
                             "60", "--json", "hi").stdout)
    first, second, third = result.output.split("(reasoning")[0], \
        result.output.split("(reasoning shown")[1].split("(reasoning hidden")[0], \
        result.output.split("(reasoning hidden)")[1]
    assert "(thought for" in first and data["reasoning"].strip() not in first
    assert data["reasoning"].strip() in second and "(thought for" not in second
    assert "(thought for" not in third and data["reasoning"].strip() not in third
    assert all(data["text"].strip() in part for part in (first, second, third))


def test_sampling_flags_are_llama_cpps(tiny_pair):
    base = ("run", "-m", tiny_pair[0], "--drafter", "none", "--max-tokens", "30", "--json",
            "the cat is on the mat")
    plain = json.loads(invoke(*base).stdout)["tokens"]
    penalized = invoke(*base, "--repeat-penalty", "1.5", "--repeat-last-n", "16",
                       "--presence-penalty", "0.5", "--frequency-penalty", "0.5")
    assert penalized.exit_code == 0, penalized.output
    assert json.loads(penalized.stdout)["tokens"] != plain
    banned = json.loads(invoke(*base, "-l", f"{plain[0]}-inf").stdout)["tokens"]
    assert plain[0] not in banned


@pytest.mark.parametrize("args,words", [
    (("-l", "5x1"), "TOKEN+BIAS"), (("--chat-template-kwargs", "{bad"), "not JSON"),
    (("--tools", "/nonexistent.json"), "cannot read"), (("--presence-penalty", "3"), "range"),
])
def test_bad_agent_flags_are_one_line_errors(tiny_agent, args, words):
    result = invoke("run", "-m", tiny_agent, *args, "hi")
    assert result.exit_code == 2 and words in result.output
    assert "Traceback" not in result.output
