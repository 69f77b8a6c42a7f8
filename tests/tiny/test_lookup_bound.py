"""bench/lookup_bound.py: the timed lookup bound runs in the real engine (tiny GGUF)."""

from __future__ import annotations

import pytest
from benchscripts import load_bench_script
from tinymodels import TINY_CTX

from lsd_local import Engine
from lsd_local.bench.prompts import PromptItem


def load_script():
    return load_bench_script("lookup_bound")


def test_the_bound_drafts_only_tokens_plain_decoding_commits(tiny_pair, capsys):
    """The bound's drafts are lookup's cut where plain's answer parts: its answer is plain's,
    every drafted token is kept, and it drafts at all (the tiny model repeats itself)."""
    script = load_script()
    items = [PromptItem("tiny", str(i), ({"role": "user", "content": text},))
             for i, text in enumerate(["a b a b a b", "the cat is"])]
    with Engine.load(tiny_pair[0], n_ctx=TINY_CTX) as engine:
        rows = script.measure(engine, items, {}, {}, 80)
        assert engine.drafter_config.drafter == "custom"  # the bound ran last
    for row in rows:
        bound, plain = row["bound"], row["plain"]
        assert bound["tokens"] == plain["tokens"]
        assert bound["accepted"] == bound["drafted"]
        assert row["auto"]["tokens"] == plain["tokens"]
    assert sum(row["bound"]["drafted"] for row in rows) > 0
    assert any(max(map(int, row["bound"]["draft_lengths"])) > 3 for row in rows)
    printed = capsys.readouterr().out
    assert "tiny/0" in printed and "bound" in printed


def row(plain, auto, bound, a, b, differ=()):
    """A hand-made prompt's columns: speeds, and answers equal to plain's but `differ`."""
    def column(tps, name):
        return {"tps": tps, "text": "other" if name in differ else "answer"}

    return {"plain": {"tps": plain, "text": "answer", "finish_reason": "stop"},
            **{name: column(tps, name) for name, tps in
               (("auto", auto), ("bound", bound), ("a", a), ("b", b))}}


def test_summary_divides_by_the_fastest_type_on_each_prompt():
    script = load_script()
    rows = [row(10, 12, 13, 11, 12), row(10, 15, 15, 14, 10), row(10, 9, 12, 0, 8)]
    lines = script.summary(rows, ["a", "b"])
    assert lines[1].startswith("bound over plain: 1.300x")
    # per prompt bound / fastest type: 13/12, 15/14, 12/8 -> median 13/12
    assert lines[4].startswith(f"bound over the fastest type per prompt: {13 / 12:.3f}x")
    assert lines[5].startswith(f"auto over the fastest type per prompt: {15 / 14:.3f}x")
    assert lines[-1].startswith(f"auto over the bound per prompt: {12 / 13:.3f}x")


def test_summary_keeps_apart_the_prompts_whose_answers_differ():
    """Where the bound's answer parts from plain's its cut is no bound: the like-with-like
    median leaves that prompt out, as one where the fastest type's answer differs."""
    script = load_script()
    rows = [row(10, 12, 13, 11, 12), row(10, 15, 20, 14, 10, differ=("bound",)),
            row(10, 9, 12, 0, 8, differ=("b",))]
    lines = script.summary(rows, ["a", "b"])
    assert lines[4] == (f"bound over the fastest type per prompt: {20 / 14:.3f}x"
                        f" ({13 / 12:.3f}x over the 1 with equal answers)")
    assert lines[-1].endswith(f"({(12 / 13 + 9 / 12) / 2:.3f}x over the 2 with equal answers)")


def test_a_failed_command_is_a_column_without_speed():
    """A llama.cpp command that failed (no speed, no answer) is printed as failed and left
    out of every median; a command that ran past plain's length limit still counts as equal."""
    script = load_script()
    failed = row(10, 12, 13, 0, 12)
    failed["a"] = {"tps": 0.0, "text": None, "error": "exit 1"}
    failed["plain"]["finish_reason"] = "length"
    failed["b"].update(text="answer and more", may_run_past=True)
    failed.update(id="x/1")
    failed["bound"]["draft_lengths"] = {"63": 1}
    line = script.row_line(failed, ["auto", "bound", "a", "b"])
    assert "a failed*" in line and "b 1.200 " in line
    lines = script.summary([failed], ["a", "b"])
    assert lines[2] == "a over plain: - (no equal answers)"
    assert lines[4] == f"bound over the fastest type per prompt: {13 / 12:.3f}x " \
                       f"({13 / 12:.3f}x over the 1 with equal answers)"


def test_an_unknown_type_is_a_clear_error(tiny_pair):
    with pytest.raises(SystemExit, match="unknown --types ngram-magic"):
        load_script().main([str(tiny_pair[0]), "--llama-cpp", "/nowhere",
                            "--types", "ngram-map-k,ngram-magic"])


def test_the_generation_drafts_with_the_cut_drafter(tiny_pair):
    """bound_drafter's drafter is the one the next generation uses: told an empty answer, it
    cuts every proposal to nothing, where the same lookup drafts on its own."""
    script = load_script()
    messages = [{"role": "user", "content": "a b a b a b"}]
    with Engine.load(tiny_pair[0], n_ctx=TINY_CTX) as engine:
        engine.configure(drafter="lookup", k=script.BOUND_K, fresh_drafter=True)
        assert engine.generate(messages, max_tokens=60).run().stats.drafted > 0
        engine.reset()
        script.bound_drafter(engine, [])
        assert engine.generate(messages, max_tokens=60).run().stats.drafted == 0
