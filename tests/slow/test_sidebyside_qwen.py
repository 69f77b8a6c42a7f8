"""Requests side by side on the real Qwen2.5-Coder pair (-m slow): four generations in one
context, one decode per step, each writes what plain greedy decoding writes for it alone (up
to a numerical tie: a batch's composition moves Q4_K_M logits, as a block's length does)."""

from __future__ import annotations

import pytest
from test_drafting_qwen import logged, same_or_numerical_tie

from lsd_local import Engine
from lsd_local.bench.prompts import load_set

pytestmark = pytest.mark.slow


def test_four_requests_side_by_side_write_what_each_writes_alone(qwen_pair):
    items = load_set("humaneval", "test", 2) + load_set("chat", "test", 2)
    lengths = [96, 24, 96, 24]  # long answers beside short ones
    with Engine.load(qwen_pair[0], drafter="none", n_ctx=2048, n_threads=2) as plain:
        want = [logged(plain.generate(list(i.messages), max_tokens=n, logprobs=2))
                for i, n in zip(items, lengths, strict=True)]
    with Engine.load(qwen_pair[0], qwen_pair[1], drafter="auto", n_ctx=2048, n_threads=2,
                     parallel=4) as eng:
        gens = [eng.generate(list(i.messages), max_tokens=n)
                for i, n in zip(items, lengths, strict=True)]
        rounds = [iter(g) for g in gens]
        while rounds:
            for it in list(rounds):
                if next(it, None) is None:
                    rounds.remove(it)
        for gen, expected in zip(gens, want, strict=True):
            same_or_numerical_tie(gen.tokens, expected)
        assert gens[1].stats.generated_tokens == 24
