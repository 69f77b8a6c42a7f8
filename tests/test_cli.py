"""The `lsd run` command against tiny generated models (click's CliRunner)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from lsd_local.cli import cli


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def test_run_json_reports_stats(tiny_pair):
    result = invoke("run", tiny_pair[0], "the cat is", "--draft", tiny_pair[1], "-k", "3",
                    "--max-tokens", "24", "--ctx", "256", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["finish_reason"] == "length"
    stats = data["stats"]
    assert stats["generated_tokens"] == 24
    assert stats["prompt_tokens"] > 0 and stats["rounds"] > 0
    for key in ("prefill_seconds", "decode_seconds", "decode_tokens_per_second", "drafted",
                "accepted", "accepted_loose", "tau", "acceptance_rate"):
        assert key in stats
    assert stats["tau"] == stats["generated_tokens"] / stats["rounds"]


def test_run_streams_text_and_summary(tiny_pair):
    result = invoke("run", tiny_pair[0], "--raw", "--max-tokens", "10", "--ctx", "256",
                    input="the cat is")
    assert result.exit_code == 0, result.output
    assert "10 tokens" in result.output and "tok/s" in result.output


def test_run_same_text_as_library(tiny_pair):
    from lsd_local import Engine
    with Engine.load(tiny_pair[0], drafter="none", n_ctx=256) as eng:
        expected = eng.generate([{"role": "user", "content": "a b"}], max_tokens=12).run().text
    result = invoke("run", tiny_pair[0], "a b", "--max-tokens", "12", "--ctx", "256", "--json")
    assert json.loads(result.output)["text"] == expected


def test_missing_model_is_one_line(tmp_path):
    result = invoke("run", tmp_path / "missing.gguf", "hi")
    assert result.exit_code == 1
    assert result.output.strip().startswith("Error: model file not found")
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_mismatched_draft_is_one_line(tiny_pair, tiny_other_vocab):
    result = invoke("run", tiny_pair[0], "hi", "--draft", tiny_other_vocab)
    assert result.exit_code == 1
    assert "different vocabularies" in result.output and "Traceback" not in result.output


def test_invalid_option_value_is_a_usage_error(tiny_pair):
    result = invoke("run", tiny_pair[0], "hi", "--theta", "-1")
    assert result.exit_code == 2
    assert "--theta" in result.output
    result = invoke("run", tiny_pair[0], "hi", "--drafter", "model")
    assert result.exit_code == 2
    assert "needs a draft model" in result.output
