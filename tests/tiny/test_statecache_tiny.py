"""llama.cpp's sequence state, saved and restored through the backend: the restored cache
gives the logits of a fresh evaluation, and an engine that keeps conversations answers
exactly like one that keeps none."""

from __future__ import annotations

import numpy as np
import pytest
import tinymodels

from lsd_local.backend import LoadOptions, Model


def test_a_restored_cache_gives_the_logits_of_a_fresh_evaluation(tiny_pair):
    model = Model.load(tiny_pair[0], LoadOptions(n_ctx=tinymodels.TINY_CTX))
    try:
        rng = np.random.default_rng(0)
        ann = rng.integers(3, model.n_vocab, 120).astype(np.int32)
        bob = rng.integers(3, model.n_vocab, 90).astype(np.int32)
        model.decode(ann, 0, 0)
        saved = model.save_state()
        assert saved.nbytes > 0 and saved.tokens.tolist() == ann.tolist()
        model.truncate(0)
        model.decode(bob, 0, 1)
        model.restore_state(saved)
        assert model.n_cached == 120 and model.cached_tokens.tolist() == ann.tolist()
        after_restore = model.decode(ann[:5], 120, 5).copy()
        model.truncate(0)  # the same tokens in the same batches, never set aside
        model.decode(ann, 0, 0)
        fresh = model.decode(ann[:5], 120, 5).copy()
        np.testing.assert_allclose(after_restore, fresh, rtol=1e-5, atol=1e-5)
    finally:
        model.close()


@pytest.mark.parametrize("drafter", ["model", "auto"])
def test_kept_conversations_change_no_answer(tiny_pair, plain, drafter):
    with tinymodels.load_tiny(tiny_pair, drafter, draft=tiny_pair[1]) as eng:
        eng.keep_conversations(4)
        talks = {name: f"{name} says the cat is on the mat and {name} " * 6
                 for name in ("ann", "bob", "cy")}
        previous: dict[str, int] = {}
        for turn in range(3):
            for name in talks:
                gen = eng.generate(talks[name], max_tokens=24).run()
                expected = plain.generate(talks[name], max_tokens=24).run()
                assert gen.tokens == expected.tokens, (turn, name)
                if turn:  # the whole earlier prompt came back from RAM
                    assert gen.stats.cached_prompt_tokens >= previous[name], (turn, name)
                previous[name] = gen.stats.prompt_tokens
                talks[name] += gen.text + f" turn {turn} "
        assert eng.state_cache.restored >= 6
