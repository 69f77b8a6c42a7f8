"""What auto learned survives the process: a second engine over the same files starts from
the first one's costs and acceptance (per request family too), a changed model file or a
damaged learned file starts empty, LSD_NO_STATE and remember=False save nothing. (That a
restored drafter drafts a running copy from its first round is tested on a scripted machine,
tests/unit/test_controller.py: the tiny models' answers do not copy their prompts, and
their decode times are too short to rank K by.)"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tinymodels

from lsd_local.drafters.auto import learned

PROMPT = "the cat is on the mat. the cat is on the mat. the cat is on the mat. the cat is"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("LSD_NO_STATE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "lsd"


def auto_engine(pair, **kw):
    return tinymodels.load_tiny(pair, "auto", draft=pair[1], remember=True, **kw)


def test_the_second_process_starts_where_the_first_stopped(tiny_pair, cache_dir):
    with auto_engine(tiny_pair) as first:
        assert not first.drafter.cost.observed  # nothing learned yet
        first.generate(PROMPT, max_tokens=60).run()
        learned_costs = first.drafter.learned_costs()
        learned_acceptance = first.drafter.learned_acceptance()
    saved = json.loads((cache_dir / "learned.json").read_text())
    assert saved["format"] == learned.FORMAT and len(saved["costs"]) == 1
    with auto_engine(tiny_pair) as second:
        assert second.drafter.cost.observed
        sizes, means = second.drafter.cost.measured()
        saved_weight = np.array(learned_costs["weight"])
        saved_means = np.array(learned_costs["seconds"])[sizes] / saved_weight[sizes]
        np.testing.assert_allclose(means, saved_means)  # the same t(n) ...
        assert second.drafter.cost.counts()[0].sum() <= 16.0 + 1e-9  # ... weighing a few rounds
        for key, saved in learned_acceptance.items():
            model = second.drafter.acceptance[key]
            tried = np.array(saved["tried"])
            np.testing.assert_allclose(model.accepted * tried.sum(),
                                       np.array(saved["accepted"]) * model.tried.sum())


def test_a_changed_model_file_starts_empty(tiny_pair, cache_dir, tmp_path):
    copy = tmp_path / "target.gguf"
    copy.write_bytes(tiny_pair[0].read_bytes())
    pair = (copy, tiny_pair[1])
    with auto_engine(pair) as first:
        first.generate(PROMPT, max_tokens=30).run()
    os.utime(copy, ns=(1, 1))  # the file changed (as far as its identity can tell)
    with auto_engine(pair) as second:
        assert not second.drafter.cost.observed


def test_a_damaged_state_file_is_a_notice_and_an_empty_start(tiny_pair, cache_dir):
    cache_dir.mkdir(parents=True)
    (cache_dir / "learned.json").write_text('{"format": 1, "costs": {"x": ')
    with auto_engine(tiny_pair) as engine:
        assert not engine.drafter.cost.observed
        assert any("ignoring what auto learned" in n for n in engine.notices)
        engine.generate(PROMPT, max_tokens=20).run()
    assert json.loads((cache_dir / "learned.json").read_text())["costs"]  # replaced whole


def test_nothing_is_saved_when_told_not_to(tiny_pair, cache_dir, monkeypatch):
    with tinymodels.load_tiny(tiny_pair, "auto", draft=tiny_pair[1]) as engine:  # default
        engine.generate(PROMPT, max_tokens=20).run()
    monkeypatch.setenv("LSD_NO_STATE", "1")
    with auto_engine(tiny_pair) as engine:
        engine.generate(PROMPT, max_tokens=20).run()
    assert not (cache_dir / "learned.json").exists()


def test_lsd_run_remembers_unless_fresh(tiny_pair, cache_dir):
    from click.testing import CliRunner

    from lsd_local.cli import cli

    args = ["run", "-m", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--ctx", "256",
            "--max-tokens", "10", PROMPT]
    assert CliRunner().invoke(cli, [*args[:1], "--fresh", *args[1:]]).exit_code == 0
    assert not (cache_dir / "learned.json").exists()
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert json.loads((cache_dir / "learned.json").read_text())["costs"]


def test_lookup_acceptance_is_remembered_per_request_family(tiny_pair, cache_dir):
    """The engine names each request's family (its instruction): the learned file holds what
    lookup learned for it, and the next process restores it for the same instruction."""
    copy = "Repeat this passage.\n" + "the cat is on the mat and the dog is in the house. " * 6
    family = learned.request_family(copy)
    with tinymodels.load_tiny(tiny_pair, "auto", remember=True) as engine:
        engine.generate(copy, max_tokens=40).run()
        runs = engine.drafter.runs  # (which one priced a proposal: drafters/auto/context.py)
        assert {model.family for model in runs.values()} == {family}
        tried = {name: model.families[family][1].sum() for name, model in runs.items()}
    assert sum(tried.values()) > 0
    saved = json.loads((cache_dir / "learned.json").read_text())
    (entry,) = saved["acceptance"].values()
    for name in runs:
        assert list(entry[name]["families"]) == [family]
        assert sum(entry[name]["families"][family]["tried"]) == pytest.approx(tried[name])
    with tinymodels.load_tiny(tiny_pair, "auto", remember=True) as engine:
        for name, model in engine.drafter.runs.items():
            assert list(model.families) == [family]
            assert (model.families[family][1].sum() > 0) == (tried[name] > 0)
