"""Soak test (`pytest -m slow`, tiny models, ~1 minute): long chat sessions under every rule
and drafter; afterwards the KV caches still give the logits of a fresh evaluation and the
process's memory has not grown from turn to turn."""

from __future__ import annotations

import numpy as np
import pytest

from lsd_local import Engine
from lsd_local.cli.session import ChatSession

pytestmark = pytest.mark.slow

QUESTIONS = ["the cat is", "def f(x): return", "a b a b a b", "in the end it is",
             "héllo wörld ✓", "the mat and the dog"]
TURNS = 20
RESET_EVERY = 5  # /reset between groups of turns


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cache_matches_fresh_evaluation(model) -> float:
    """Largest |logit| difference between the next row computed on the cache as left by the
    session and on a fresh evaluation of the same tokens (one big batch: other kernels and
    summation order, so float32 rounding differs; the same tolerance as test_engine_tiny)."""
    cached = model.cached_tokens.copy()
    probe = np.array([5], np.int32)
    on_cache = model.decode(probe, len(cached), 1)[0].copy()
    model.truncate(0)
    fresh = model.decode(np.concatenate([cached, probe]), 0, 1)[0].copy()
    model.truncate(0)
    np.testing.assert_allclose(on_cache, fresh, rtol=1e-2, atol=1e-2)
    assert int(np.argmax(on_cache)) == int(np.argmax(fresh))
    return float(np.abs(on_cache - fresh).max())


@pytest.mark.parametrize("rule,params", [("strict", {}), ("fly", {"theta": 0.3}),
                                         ("asd", {"budget": 50.0})])
@pytest.mark.parametrize("drafter", ["lookup", "model", "multilevel", "auto"])
def test_long_chat_sessions_stay_consistent(tiny_pair, rule, params, drafter, capsys):
    draft = None if drafter == "lookup" else tiny_pair[1]
    with Engine.load(tiny_pair[0], draft, drafter=drafter, rule=rule, p_min=0.0,
                     n_ctx=2048, **params) as eng:
        session = ChatSession(eng, "be brief", {"max_tokens": 140})
        rss = []
        for turn in range(TURNS):
            if turn and turn % RESET_EVERY == 0:
                session.reset()
            gen = session.ask(QUESTIONS[turn % len(QUESTIONS)])
            gen.run()
            session.finish(gen)
            rss.append(rss_mb())
        totals = session.totals
        # (a long session: its rounds depend on how much is drafted; the suffix index drafts
        # the repeated questions' answers from earlier ones: 205-269 rounds with lookup)
        assert totals.generated_tokens >= 2000 and totals.rounds >= 5 * TURNS
        assert totals.drafted > 0
        target_error = cache_matches_fresh_evaluation(eng.target)
        draft_error = (cache_matches_fresh_evaluation(eng.draft_model)
                       if eng.draft_model is not None and eng.draft_model.n_cached else 0.0)
    growth = rss[-1] - rss[RESET_EVERY - 1]  # after the first group: buffers are allocated
    with capsys.disabled():
        print(f"\nsoak {rule}/{drafter}: {totals.generated_tokens} tokens, {totals.rounds} "
              f"rounds, {TURNS} turns; RSS {rss[RESET_EVERY - 1]:.0f} -> {rss[-1]:.0f} MB; "
              f"max logit diff target {target_error:.2e} draft {draft_error:.2e}")
    assert growth < 8.0, f"RSS grew by {growth:.1f} MB over {TURNS - RESET_EVERY} turns"
