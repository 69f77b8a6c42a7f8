"""User mistakes give one clear error (LsdError subclasses) and lose nothing."""

from __future__ import annotations

import math

import gguf
import numpy as np
import pytest
import tinymodels

from lsd_local import (
    ContextOverflowError,
    Engine,
    IncompatibleModelsError,
    LsdError,
    ModelLoadError,
    ParameterError,
)
from lsd_local.backend import LoadOptions, Model, check_vocab_compatible


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        Engine.load(tmp_path / "nope.gguf")


def test_directory(tmp_path):
    with pytest.raises(ModelLoadError, match="directory"):
        Engine.load(tmp_path)


def test_not_a_gguf(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("this is not a model")
    with pytest.raises(ModelLoadError, match="not a GGUF"):
        Engine.load(path)


def test_truncated_gguf(tmp_path, tiny_pair):
    data = tiny_pair[0].read_bytes()
    path = tmp_path / "truncated.gguf"
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ModelLoadError, match="GGUF file truncated.gguf: tensor .* starts beyond "
                       "the end of the file .truncated download"):
        Engine.load(path)


def test_unknown_architecture(tmp_path):
    path = tmp_path / "alien.gguf"
    writer = gguf.GGUFWriter(str(path), "alien-arch")
    writer.add_tensor("x.weight", np.zeros((4, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError, match="alien-arch"):
        Engine.load(path)


def test_mismatched_vocabularies_draft_through_text(tiny_pair, tiny_other_vocab):
    with pytest.raises(IncompatibleModelsError, match="lookup"):  # the check itself still says
        check_vocab_compatible(Model.load(tiny_pair[0], LoadOptions(n_ctx=64)),
                               Model.load(tiny_other_vocab, LoadOptions(n_ctx=64)))
    with pytest.warns(UserWarning, match="larger than the target"), Engine.load(
            tiny_pair[0], tiny_other_vocab, drafter="model") as eng:  # 22 vs 20 word pieces
        assert eng.cross_vocab and "drafts through text" in eng.notices[0]


def test_same_file_as_draft_accepts_everything(tiny_pair):
    with pytest.warns(UserWarning, match="the draft is the target itself"), Engine.load(
            tiny_pair[0], tiny_pair[0], drafter="model", k=4, p_min=0.0, n_ctx=512) as eng:
        gen = eng.generate("the cat is", max_tokens=60).run()
    assert gen.stats.acceptance_rate > 0.95


def test_draft_larger_than_the_target_is_a_warning(tmp_path):
    (tmp_path / "small").mkdir()
    (tmp_path / "big").mkdir()
    small, _ = tinymodels.make_pair(tmp_path / "small", spec=tinymodels.TinySpec(n_layer=1))
    big, _ = tinymodels.make_pair(tmp_path / "big", spec=tinymodels.TinySpec(n_layer=3))
    with pytest.warns(UserWarning, match="is larger than the target"), Engine.load(
            small, big, drafter="model", k=2, n_ctx=256) as eng:
        assert eng.notices and eng.generate("the cat", max_tokens=8).run().tokens


def test_prompt_longer_than_context(tiny_pair):
    with Engine.load(tiny_pair[0], n_ctx=256) as eng:
        with pytest.raises(ContextOverflowError, match=r"prompt has \d+ tokens .* holds 256"):
            eng.generate("the cat is " * 80)
        # the engine is still usable afterwards
        assert eng.generate("the cat", max_tokens=5).run().stats.generated_tokens == 5


@pytest.mark.parametrize("drafter", ["lookup", "model", "none"])
def test_generation_reaching_the_context_end(tiny_pair, drafter):
    draft = tiny_pair[1] if drafter == "model" else None
    with Engine.load(tiny_pair[0], draft, drafter=drafter, n_ctx=256, k=8, p_min=0.0) as eng:
        gen = eng.generate("the cat is", max_tokens=1000).run()
        n_prompt = gen.stats.prompt_tokens
        assert gen.finish_reason == "length"
        assert n_prompt + len(gen.tokens) == eng.target.n_ctx == 256
    with Engine.load(tiny_pair[0], drafter="none", n_ctx=256) as plain:
        assert plain.generate("the cat is", max_tokens=1000).run().tokens == gen.tokens


def test_max_tokens_zero(tiny_pair):
    with Engine.load(tiny_pair[0], n_ctx=128) as eng:
        gen = eng.generate("the cat", max_tokens=0)
        assert list(gen) == []
        assert gen.tokens == [] and gen.text == "" and gen.finish_reason == "length"


def test_empty_chat(tiny_pair):
    with Engine.load(tiny_pair[0], n_ctx=128) as eng, pytest.raises(LsdError, match="no chat"):
        eng.generate([])


@pytest.mark.parametrize("kwargs,name", [
    ({"k": 0}, "k"), ({"rule": "loose"}, "rule"), ({"drafter": "magic"}, "drafter"),
    ({"rule": "fly", "theta": -1.0}, "theta"), ({"rule": "fly", "window": 0}, "window"),
    ({"rule": "fly", "theta": math.nan}, "theta"), ({"rule": "asd", "budget": -1.0}, "budget"),
    ({"rule": "asd", "gate": -0.5}, "gate"), ({"drafter": "model"}, "drafter"),
    ({"n_ctx": 0}, "n_ctx"), ({"split_mode": "diagonal"}, "split_mode"),
    ({"bogus_option": 1}, "bogus_option"),
])
def test_invalid_load_parameters(tiny_pair, kwargs, name):
    with pytest.raises(ParameterError, match=name):
        Engine.load(tiny_pair[0], **kwargs)


@pytest.mark.parametrize("kwargs,name", [
    ({"temperature": -0.1}, "temperature"), ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"), ({"min_p": 2.0}, "min_p"), ({"top_k": -1}, "top_k"),
    ({"max_tokens": -5}, "max_tokens"),
])
def test_invalid_generation_parameters(tiny_pair, kwargs, name):
    with Engine.load(tiny_pair[0], n_ctx=128) as eng, pytest.raises(ParameterError, match=name):
        eng.generate("x", **kwargs)


def test_abandoned_generation_leaves_engine_consistent(tiny_pair):
    """Stopping iteration mid-way (e.g. Ctrl-C in a chat) must not corrupt the caches."""
    with Engine.load(tiny_pair[0], tiny_pair[1], drafter="model", k=4, p_min=0.0,
                     n_ctx=512) as eng, \
            Engine.load(tiny_pair[0], drafter="none", n_ctx=512) as plain:
        gen = eng.generate("the cat is", max_tokens=100)
        for i, _ in enumerate(gen):
            if i == 3:
                break
        again = eng.generate("a b a b", max_tokens=50).run()
        assert again.tokens == plain.generate("a b a b", max_tokens=50).run().tokens


def test_other_vocab_model_generates(tiny_other_vocab):
    """The second tiny vocabulary is a working model too (so the mismatch test is fair)."""
    with Engine.load(tiny_other_vocab, n_ctx=128) as eng:
        assert len(eng.generate("x y", max_tokens=5).run().tokens) == 5
    assert tinymodels.OTHER_WORDS != tinymodels.WORDS


def test_nan_logits_from_llama_cpp_are_a_clear_error(tmp_path):
    """A NaN logit is refused where llama.cpp hands it over (backend), not ranked by a
    verifier: generation stops with ModelOutputError and the CLI prints one line."""
    from click.testing import CliRunner

    from lsd_local import ModelOutputError
    from lsd_local.cli import cli

    path = tinymodels.make_nan_model(tmp_path)
    with Engine.load(path, drafter="none") as eng:
        with pytest.raises(ModelOutputError, match="NaN or infinite logits from nan-logits"):
            eng.generate("the cat", max_tokens=4).run()
        eng.target.truncate(0)
        logits = eng.target.decode(np.array([1, 270], np.int32), 0, 0)
        assert logits.shape == (0, eng.target.n_vocab)  # no rows asked for, nothing checked
    result = CliRunner().invoke(cli, ["run", str(path), "the cat", "--drafter", "none"])
    assert result.exit_code == 1
    assert "Error: llama.cpp returned NaN or infinite logits" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("bad,refused", [(np.nan, True), (np.inf, True), (-np.inf, False),
                                         ("both", True), (3e38, False)])
def test_logit_check_refuses_nan_and_plus_inf_only(bad, refused):
    from lsd_local import ModelOutputError
    from lsd_local.backend.logits import check_finite

    logits = np.zeros((3, 50), np.float32)
    if bad == "both":  # no NaN, but their sum is NaN
        logits[1, 3], logits[2, 4] = np.inf, -np.inf
    elif bad == 3e38:  # huge but finite: the sum overflows, no entry is bad
        logits[:, :] = 3e38
    else:
        logits[2, 7] = bad
    if refused:
        with pytest.raises(ModelOutputError, match="row [12] of 3"):
            check_finite(logits, "m.gguf")
    else:
        check_finite(logits, "m.gguf")


def test_logit_check_matches_a_full_scan_on_random_rows():
    """The max-based check refuses exactly the blocks a full scan for NaN / +inf does,
    on rows with NaN, +inf, -inf, ties and all -inf rows in random places."""
    from lsd_local import ModelOutputError
    from lsd_local.backend.logits import check_finite

    rng = np.random.default_rng(7)
    refused_count = 0
    for _ in range(400):
        rows, vocab = int(rng.integers(1, 6)), int(rng.integers(1, 300))
        logits = rng.normal(size=(rows, vocab)).astype(np.float32)
        if rng.random() < 0.3:
            logits = np.round(logits)  # ties
        for value in (np.nan, np.inf, -np.inf):
            for _ in range(int(rng.integers(0, 3))):
                if rng.random() < 0.25:
                    logits[rng.integers(rows), rng.integers(vocab)] = value
        if rng.random() < 0.1:
            logits[rng.integers(rows)] = -np.inf
        bad_rows = np.flatnonzero((np.isnan(logits) | (logits == np.inf)).any(axis=1))
        if len(bad_rows):
            refused_count += 1
            with pytest.raises(ModelOutputError, match=f"row {bad_rows[0]} of {rows}"):
                check_finite(logits, "m.gguf")
        else:
            check_finite(logits, "m.gguf")
    assert 50 < refused_count < 350  # both outcomes were exercised
