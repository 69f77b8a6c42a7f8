"""Loading without llama.cpp's extra buffer types, as a user meets it: the engine's notice
when the probe found a trap, the flag llama.cpp is given, `lsd run -nr` and `lsd devices`."""

from __future__ import annotations

import warnings

import tinymodels
from click.testing import CliRunner

from lsd_local import Engine
from lsd_local.backend import cpu_probe, model
from lsd_local.cli import cli
from lsd_local.config import LoadOptions

TRAPPED = cpu_probe.RepackDecision(False, "this CPU reports AMX but traps it",
                                   notice="this CPU reports AMX but traps it (fake)")


def test_a_trapping_cpu_loads_without_extra_buffer_types_and_says_so(tiny_pair, monkeypatch):
    monkeypatch.setattr(model, "repack_decision", lambda no_repack, build: TRAPPED)
    assert model._model_params(LoadOptions())[0].use_extra_bufts is False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eng = Engine.load(tiny_pair[0], drafter="lookup", n_ctx=tinymodels.TINY_CTX)
    with eng:
        assert TRAPPED.notice in eng.notices
        assert any(TRAPPED.notice in str(w.message) for w in caught)
        assert eng.generate("the cat", max_tokens=8).run().stats.generated_tokens == 8


def test_the_flag_reaches_llama_cpp():
    assert model._model_params(LoadOptions(no_repack=True))[0].use_extra_bufts is False
    assert model._model_params(LoadOptions(no_repack=False))[0].use_extra_bufts is True


def test_lsd_run_takes_llama_cpps_spelling(tiny_pair, monkeypatch):
    asked = []
    real = model.repack_decision
    monkeypatch.setattr(model, "repack_decision",
                        lambda no_repack, build: asked.append(no_repack) or real(no_repack, build))
    for flag in ("--no-repack", "-nr", None):
        asked.clear()
        result = CliRunner().invoke(cli, ["run", "-m", str(tiny_pair[0]), "--drafter", "lookup",
                                          "--max-tokens", "4", "--raw", "the cat"]
                                    + ([flag] if flag else []))
        assert result.exit_code == 0, result.output
        assert set(asked) == ({True} if flag else {None})


def test_lsd_devices_shows_the_decision():
    runner = CliRunner()
    assert "on the CPU: off (--no-repack)" in runner.invoke(cli, ["devices", "-nr"]).output
    by_env = runner.invoke(cli, ["devices"], env={"LSD_NO_REPACK": "1"}).output
    assert "on the CPU: off (LSD_NO_REPACK)" in by_env
