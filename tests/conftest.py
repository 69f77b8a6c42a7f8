"""Shared fixtures: tiny generated GGUF models (always) and the real Qwen pair (slow tests)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tinymodels

QWEN_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def models_dir() -> Path:
    return Path(os.environ.get("LSD_MODELS_DIR", "~/.cache/lsd/models")).expanduser()


@pytest.fixture(autouse=True)
def no_lsd_environment(monkeypatch) -> None:
    """Every CLI option reads LSD_<COMMAND>_<OPTION>: a developer's own settings must not
    change what the tests see (LSD_MODELS_DIR only says where the slow tests' models are)."""
    for name in [n for n in os.environ if n.startswith("LSD_") and n != "LSD_MODELS_DIR"]:
        monkeypatch.delenv(name)
    # what auto learned in earlier runs must not make one test depend on another (the
    # tests of the learned statistics turn it back on with a cache dir of their own)
    monkeypatch.setenv("LSD_NO_STATE", "1")


@pytest.fixture(scope="session", autouse=True)
def no_kept_state_for_the_whole_session():
    """LSD_NO_STATE for fixtures of every scope: a module's `lsd serve` starts before the
    per-test environment above, and would otherwise load and save what auto learned and
    the suffix index under the user's cache dir (one test run then drafts from another's)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LSD_NO_STATE", "1")
        yield


@pytest.fixture(scope="session", autouse=True)
def kernels_loaded() -> None:
    """Every test in this process runs on the numba kernels: a test that compares a kernel
    with its numpy reference must not meet the reference on both sides (an Engine would
    otherwise switch this process to the references while the kernels warm up). The
    references serve requests only on a cold cache, which tests/tiny/test_warmup.py checks in
    fresh processes."""
    from lsd_local.kernels.warmup import load_kernels_now

    assert load_kernels_now(timeout=900), "the numba kernels failed to compile or load"


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tiny")


@pytest.fixture(scope="session")
def tiny_pair(tiny_dir) -> tuple[Path, Path]:
    """(target.gguf, draft.gguf): the draft is the target plus 10 % weight noise."""
    return tinymodels.make_pair(tiny_dir, noise=0.1)


@pytest.fixture(scope="module")
def plain(tiny_pair):
    """Plain greedy decoding of the tiny target: the reference every speculative run equals."""
    from lsd_local import Engine

    with Engine.load(tiny_pair[0], drafter="none", n_ctx=tinymodels.TINY_CTX) as eng:
        yield eng


@pytest.fixture(scope="session")
def tiny_other_vocab(tiny_dir) -> Path:
    return tinymodels.make_other_vocab(tiny_dir)


@pytest.fixture(scope="session")
def qwen_pair() -> tuple[Path, Path]:
    target, draft = models_dir() / QWEN_TARGET, models_dir() / QWEN_DRAFT
    if not (target.exists() and draft.exists()):
        pytest.skip(f"Qwen pair not in {models_dir()}: run bench/fetch-models.sh")
    return target, draft


@pytest.fixture(scope="session")
def tiny_agent(tiny_dir) -> Path:
    """The tiny target with a Hermes/Qwen-style template and its markers as tokens."""
    return tinymodels.make_agent_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_harmony(tiny_dir) -> Path:
    """The tiny target with a gpt-oss-style (harmony) template and its markers as tokens."""
    return tinymodels.make_harmony_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_named(tiny_dir) -> Path:
    """The tiny agent model whose GGUF names a "tool_use" template beside a default that
    shows no tools."""
    return tinymodels.make_named_templates_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_gemma(tiny_dir) -> Path:
    """The tiny target with a Gemma-4-style template and its markers as control tokens."""
    return tinymodels.make_gemma_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_kimi(tiny_dir) -> Path:
    """The tiny target with a Kimi-K2-style template and its call markers as control
    tokens."""
    return tinymodels.make_kimi_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_seed(tiny_dir) -> Path:
    """The tiny target with a Seed-OSS-style template and its markers as control tokens."""
    return tinymodels.make_seed_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_minicpm(tiny_dir) -> Path:
    """The tiny target with a MiniCPM5-style template and its call tags as control tokens."""
    return tinymodels.make_minicpm_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_minimax3(tiny_dir) -> Path:
    """The tiny target with a MiniMax-M3-style template, its marker a control token."""
    return tinymodels.make_minimax3_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_kimi3(tiny_dir) -> Path:
    """The tiny target with a Kimi-K3-style template, its markers control tokens."""
    return tinymodels.make_kimi3_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_hy3(tiny_dir) -> Path:
    """The tiny target with a Hy3-style template, its tags control tokens."""
    return tinymodels.make_hy3_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_dsml(tiny_dir) -> Path:
    """The tiny target with a DeepSeek-V3.2-style template and its DSML tags as words."""
    return tinymodels.make_dsml_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_glm(tiny_dir) -> Path:
    """The tiny target with a GLM-4.5-style template and its argument tags as control
    tokens."""
    return tinymodels.make_glm_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_commandr(tiny_dir) -> Path:
    """The tiny target with a Command R7B-style template and its markers as control tokens."""
    return tinymodels.make_commandr_model(tiny_dir)
