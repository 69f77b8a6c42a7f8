"""`lsd bench` end to end on tiny generated models (real llama.cpp, click's CliRunner)."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from lsd_local.cli import cli

WORDS = ("the cat is on the mat", "a dog is in the house", "the cat and the dog are",
         "on the mat the cat is", "in the house a dog", "the dog is on the mat and the cat")


@pytest.fixture()
def qa_set(tmp_path):
    path = tmp_path / "tinyqa.jsonl"
    rows = [{"id": f"q{i}", "split": "dev" if i % 3 == 2 else "test",
             "messages": [{"role": "user", "content": text}]} for i, text in enumerate(WORDS)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def bench(*args):
    return CliRunner().invoke(cli, ["bench", *map(str, args)], catch_exceptions=False)


def by_key(data):
    return {(s["set"], s["config"]): s for s in data["summaries"]}


def test_every_configuration_with_quality_and_outputs(tiny_pair, qa_set, tmp_path):
    external = (f"fake={sys.executable} -c \"print('decoded 12 tokens in 0.5 seconds')\" "
                "{prompt_file} {max_tokens}")
    configs = ["plain", "peer"] + [f"{rule}:{drafter}:3:p_min=0.0"
                                   for rule in ("strict", "fly", "asd")
                                   for drafter in ("lookup", "model", "multilevel")]
    out = tmp_path / "res.json"
    result = bench(tiny_pair[0], "--draft", tiny_pair[1], "--prompts", f"humaneval,{qa_set}",
                   "--limit", "2", "--max-tokens", "16", "--configs", ",".join(configs),
                   "--external", external, "--json", out, "--repeat", "2")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 2 * 2 * 2 * (len(configs) + 1)
    summaries = by_key(data)
    for set_name in ("humaneval", "tinyqa"):
        for config in configs:
            s = summaries[(set_name, config)]
            assert s["prompts"] == 2 and s["runs"] == 4 and s["tps"] > 0
            assert s["speedup"] > 0 and len(s["speedup_per_rep"]) == 2
            assert "identical" in s and "first_divergence" in s
            if config != "plain" and config != "peer":
                assert {"tau", "acceptance", "loose_per_100", "draft_share"} <= set(s)
            if config.startswith("strict") or config == "plain":
                assert s["identical"] == 1.0, (set_name, config)  # lossless
                assert s["first_divergence"] is None
        assert summaries[(set_name, "fake")]["tps"] == pytest.approx(24.0)
    drafted = [s for (_, c), s in summaries.items() if ":model" in c]
    assert any(s["acceptance"] > 0 for s in drafted)  # p_min=0: the draft model did draft
    he = [s for (set_name, _), s in summaries.items() if set_name == "humaneval"]
    assert all("accuracy" in s and "retention" in s for s in he if "identical" in s)
    checked = [r for r in data["runs"] if r["set"] == "humaneval" and r["rep"] == 0
               and "text" in r]
    assert checked and all(r["check"] in ("passed", "failed", "timeout", "sandbox")
                           for r in checked)
    assert not any("passed" in r for r in data["runs"] if r["set"] == "tinyqa")
    assert data["cost"]["target_s"]["16"] > 0 and data["cost"]["draft_token_s"] > 0
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tinyqa (2 prompts)" in result.output and "t(16)=" in result.output
    # (the fake command's answers are never read: no like-with-like median beside its speed)
    versus = result.output.split("fastest external drafting command on each prompt:\n")[1]
    assert "tinyqa     strict:lookup:3:p_min=0.0 " in versus
    assert "median of 2" in versus and "no prompt with equal answers" in versus
    total = len(data["runs"])
    assert f"[{'#' * 20}] {total}/{total}" in result.output and "ETA" in result.output


def test_default_configurations_without_a_draft(tiny_pair, qa_set, tmp_path):
    out = tmp_path / "plain.json"
    result = bench(tiny_pair[0], "--prompts", qa_set, "--limit", "3", "--max-tokens", "12",
                   "--json", out, "--no-cost", "--plot", tmp_path / "p.png")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert [s["config"] for s in data["summaries"]] == [
        "plain", "strict:lookup", "fly:lookup", "asd:lookup", "peer"]
    assert data["cost"] is None and (tmp_path / "p.png").exists()


def test_tune_sweeps_on_the_dev_split(tiny_pair, qa_set, tmp_path):
    out = tmp_path / "tune.json"
    result = bench(tiny_pair[0], "--prompts", qa_set, "--tune", "--max-tokens", "12",
                   "--json", out, "--quality-floor", "0.5")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert {r["id"] for r in data["runs"]} == {"q2", "q5"}  # the dev prompts only
    assert "tuning on the dev split" in result.output and "quality floor 50%" in result.output
    tuned = data["meta"]["tune"]
    assert len(tuned["scores"]) == 15
    assert tuned["best"]["strict"]["quality"] == 1.0


@pytest.mark.parametrize("args, message", [
    (["--configs", "plain,fast:lookup"], "invalid config"),
    (["--configs", "strict:model"], "need a draft model"),
    (["--prompts", "no-such-set"], "no prompt set 'no-such-set'"),
    (["--external", "oops"], "expected NAME=COMMAND"),
])
def test_bad_options_are_clear_errors(tiny_pair, args, message):
    result = CliRunner().invoke(cli, ["bench", str(tiny_pair[0]), *args])
    assert result.exit_code in (1, 2)
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_model_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(cli, ["bench", str(tmp_path / "nope.gguf")])
    assert result.exit_code == 1 and "nope.gguf" in result.output
    assert "Traceback" not in result.output


def test_cold_runs_each_prompt_in_its_own_process(tiny_pair, qa_set, tmp_path, monkeypatch):
    """--cold: every run a separate `lsd run --json`; the answers equal the in-process ones
    (greedy, lossless), and the processes remember what auto learned between them."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("LSD_RUN_MAX_TOKENS", "3")  # a caller's settings must not leak in
    dashed = tmp_path / "dashed.jsonl"  # a prompt the child's argument parser would eat
    dashed.write_text(json.dumps({"id": "d", "split": "test", "messages": [
        {"role": "user", "content": "- the cat is on the mat"}]}) + "\n")
    configs = "plain,strict:lookup:4,strict:lookup,strict:auto"
    runs = {}
    for cold in (False, True):
        out = tmp_path / f"cold-{cold}.json"
        result = bench(tiny_pair[0], "--prompts", f"{qa_set},{dashed}", "--limit", "2",
                       "--max-tokens", "12",
                       "--configs", configs, "--ctx", "256", "--json", out,
                       *(["--cold"] if cold else []))
        assert result.exit_code == 0, result.output
        runs[cold] = json.loads(out.read_text())["runs"]
    assert [r["text"] for r in runs[True]] == [r["text"] for r in runs[False]]
    assert all(r["tps"] > 0 and r["n_tokens"] == 12 for r in runs[True])
    learned = json.loads((tmp_path / "cache" / "lsd" / "learned.json").read_text())
    assert learned["costs"]  # the cold processes of strict:auto saved what they learned


FAKE_TOOL = '''#!{python}
"""Stands in for llama.cpp's {name}: -f drops one trailing newline, as common/arg.cpp does;
the prompt it got goes to got-{name}.txt; it writes ANSWER the way the real tool prints."""
import sys
args = sys.argv[1:]
prompt = open(args[args.index("-f") + 1], encoding="utf-8", newline="").read()
prompt = prompt[:-1] if prompt.endswith("\\n") else prompt
open(r"{folder}/got-{name}.txt", "a", encoding="utf-8", newline="").write(prompt + "\\0")
answer = open(r"{folder}/answer.txt", encoding="utf-8").read()
if "{name}" == "llama-completion":
    sys.stdout.write(answer + "\\n\\n")
else:
    sys.stdout.write("\\n\\n" + prompt + answer + "\\n\\n\\n\\n")
sys.stderr.write("decoded 4 tokens in 0.5 seconds\\n")
'''


def test_llama_cpp_columns_get_lsds_prompt_bytes_and_their_answers_are_checked(
        qa_set, tmp_path):
    """The C++ peers must answer the same prompt: the file they read holds exactly the text
    lsd evaluates (after llama.cpp's -f drops a newline), and an answer that is not lsd's
    plain greedy answer is flagged."""
    import tinymodels

    from lsd_local import Engine
    from lsd_local.chat.templates import CHATML

    spec = tinymodels.TinySpec()
    weights = tinymodels.random_weights(spec, 259 + len(spec.words))
    model = tinymodels.write_gguf(tmp_path / "chatml.gguf", spec, weights, CHATML)
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("llama-completion", "llama-speculative-simple"):
        tool = folder / name
        tool.write_text(FAKE_TOOL.format(python=sys.executable, name=name, folder=folder))
        tool.chmod(0o755)
    (folder / "answer.txt").write_text("not what lsd wrote")
    out = tmp_path / "cpp.json"
    result = bench(model, "--prompts", qa_set, "--limit", "2", "--max-tokens", "8",
                   "--configs", "plain", "--llama-cpp", folder, "--json", out, "--no-cost")
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["runs"]
    items = [json.loads(line) for line in qa_set.read_text().splitlines()]
    messages = [item["messages"] for item in items if item["split"] == "test"][:2]
    with Engine.load(model, drafter="none") as eng:
        expected = [eng.prompt_text(m) for m in messages]
        assert expected[0].endswith("assistant\n")  # what llama.cpp's -f would cut
        assert eng.prompt_tokens(expected[0]) == eng.prompt_tokens(messages[0])
    for name, calls in (("llama-completion", 1), ("llama-speculative-simple", 5)):
        got = (folder / f"got-{name}.txt").read_text(encoding="utf-8").split("\0")[:-1]
        # (the first call is the warm-up's; each n-gram type is a column of its own)
        assert got[-2 * calls:] == [expected[0]] * calls + [expected[1]] * calls
    assert "warning: llama.cpp:plain: 2 of 2 answers differ" in result.output
    for kind in ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"):
        assert f"warning: llama.cpp:{kind}: 2 of 2 answers differ" in result.output
    assert all(r["text"] == "not what lsd wrote" for r in rows if r.get("external"))
    plain = [r for r in rows if r["config"] == "plain"]
    (folder / "answer.txt").write_text(plain[0]["text"])  # now the same answer as lsd's
    result = bench(model, "--prompts", qa_set, "--limit", "1", "--max-tokens", "8",
                   "--configs", "plain", "--llama-cpp", folder, "--json", out, "--no-cost")
    assert result.exit_code == 0 and "warning" not in result.output, result.output
    assert all(s["identical"] == 1.0 for s in json.loads(out.read_text())["summaries"])


def test_profile_prints_the_ceiling_after_a_short_and_a_long_context(tiny_pair, qa_set):
    from lsd_local.bench.profile import LONG_CONTEXT, PROFILE_SIZES

    result = bench(tiny_pair[0], "--draft", tiny_pair[1], "--prompts", qa_set, "--profile",
                   "--ctx", 2048)
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines() if line.startswith("    ")]
    assert [int(row[0]) for row in rows] == list(PROFILE_SIZES)  # every size timed
    assert "best case, drafts free and all accepted" in result.output
    long_line = next(line for line in result.output.splitlines()
                     if line.startswith(f"  after {LONG_CONTEXT} tokens"))
    # every size but 1 priced again after the long context, as a multiple of its t(1)
    assert [part.split(":")[0] for part in long_line.split("there: ")[1].split()] == \
        [str(n) for n in PROFILE_SIZES[1:]]
    assert "draft model:" in result.output
    # how long it takes (on stderr): once before the first context's timed passes, once
    # before the long one's
    progress = [line for line in result.output.splitlines() if line.endswith(" to go")]
    assert len(progress) == 2 and f"then 6 after {LONG_CONTEXT} tokens" in progress[0]


def test_profile_in_a_small_context_skips_the_long_one(tiny_pair):
    from lsd_local import Engine
    from lsd_local.bench.profile import format_profile, profile

    engine = Engine.load(tiny_pair[0], drafter="none", n_ctx=256)
    try:  # (room for 191 cached tokens: not twice the 150 of the prompt)
        result = profile(engine.target, None, list(range(1, 151)), repeats=1)
    finally:
        engine.close()
    assert "long" not in result and result["context"] == 150
    assert "  after " not in format_profile(result)


def test_concurrency_serves_clients_side_by_side_and_compares_each_answer(tiny_pair, qa_set):
    result = bench(tiny_pair[0], "--draft", tiny_pair[1], "--prompts", qa_set, "--limit", "4",
                   "--max-tokens", "24", "--concurrency", "2", "--ctx", "1024")
    assert result.exit_code == 0, result.output
    rows = {line[:36].strip(): line[36:].split() for line in result.output.splitlines()
            if line.startswith("lsd serve --parallel") and ":" not in line[:36]}
    assert set(rows) == {"lsd serve --parallel 1", "lsd serve --parallel 2"}
    for name, cells in rows.items():
        tps, same, errors = float(cells[0]), cells[4], int(cells[5])
        assert tps > 0 and errors == 0, result.output
        answered, asked = map(int, same.split("/"))
        assert asked == 4  # 2 clients x 2 requests each
        ties = [t.split(":") for t in cells[6:]]  # where answers part: "3:0.074", "3:again"
        assert all(int(n) in range(1, 5) and (t in ("again", "?") or float(t) >= 0)
                   for n, t in ties), result.output
        if name.endswith("1"):  # the reference; its ties: where it parts from itself again
            assert answered == 4 and len(ties) <= 4
        else:  # side by side, each answer is the same text or listed where it parts
            assert len(ties) == asked - answered, result.output
    assert "sent while a 512-token answer streams" in result.output


def test_an_answer_asked_again_with_logprobs_spells_its_text(tiny_pair):
    from lsd_local.bench.concurrency import Ask, _spell, ask_once, divergence_gap, lsd_server

    server = lsd_server(tiny_pair[0], tiny_pair[1], 1, 1024, None)
    try:
        ask = Ask(({"role": "user", "content": "the cat is on the mat"},), 24)
        first, again = ask_once(server.port, ask), ask_once(server.port, ask, logprobs=True)
    finally:
        server.stop()
    assert first.error is None and again.error is None and again.text
    assert len(again.top_two_gaps) == again.tokens and not first.top_two_gaps
    # (the tiny model writes bytes that are not UTF-8: the server streams them as U+FFFD)
    assert _spell(t for t, _ in again.top_two_gaps)[0] == again.text
    assert all(gap >= 0 for _, gap in again.top_two_gaps)
    assert divergence_gap(again.text[:-1] + "\x00", again) is not None
