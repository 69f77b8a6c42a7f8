"""bench/lookup_bound.py: the timed lookup bound runs in the real engine (tiny GGUF)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from tinymodels import TINY_CTX

from lsd_local import Engine
from lsd_local.bench.prompts import PromptItem


def load_script():
    path = Path(__file__).resolve().parents[2] / "bench" / "lookup_bound.py"
    spec = importlib.util.spec_from_file_location("lookup_bound", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bound_drafts_only_tokens_plain_decoding_commits(tiny_pair, capsys):
    """The bound's drafts are lookup's cut where plain's answer parts: its answer is plain's,
    every drafted token is kept, and it drafts at all (the tiny model repeats itself)."""
    script = load_script()
    items = [PromptItem("tiny", str(i), ({"role": "user", "content": text},))
             for i, text in enumerate(["a b a b a b", "the cat is"])]
    with Engine.load(tiny_pair[0], n_ctx=TINY_CTX) as engine:
        rows = script.measure(engine, items, {}, {}, 80)
        assert engine.drafter_config.drafter == "lookup"  # the bound ran last
    for row in rows:
        bound, plain = row["bound"], row["plain"]
        assert bound["tokens"] == plain["tokens"]
        assert bound["accepted"] == bound["drafted"]
        assert row["auto"]["tokens"] == plain["tokens"]
    assert sum(row["bound"]["drafted"] for row in rows) > 0
    assert any(max(map(int, row["bound"]["draft_lengths"])) > 3 for row in rows)
    printed = capsys.readouterr().out
    assert "tiny/0" in printed and "bound" in printed


def test_summary_divides_by_the_fastest_type_on_each_prompt():
    script = load_script()

    def row(plain, auto, bound, a, b):
        return {"plain": {"tps": plain}, "auto": {"tps": auto}, "bound": {"tps": bound},
                "a": {"tps": a}, "b": {"tps": b}}

    rows = [row(10, 12, 13, 11, 12), row(10, 15, 15, 14, 10), row(10, 9, 12, 0, 8)]
    lines = script.summary(rows, ["a", "b"])
    assert "bound                    1.300x plain" in lines[1]
    # per prompt bound / fastest type: 13/12, 15/14, 12/8 -> median 13/12
    assert f"bound over the fastest type per prompt: {13 / 12:.3f}x" in lines
    assert f"auto over the fastest type per prompt: {15 / 14:.3f}x" in lines  # 12/12, 15/14, 9/8
    assert lines[-1] == f"auto over the bound per prompt: {12 / 13:.3f}x"  # 12/13, 1, 0.75


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
        script.bound_drafter(engine, [], engine.prompt_tokens(messages))
        assert engine.generate(messages, max_tokens=60).run().stats.drafted == 0
