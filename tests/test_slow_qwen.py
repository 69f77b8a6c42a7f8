"""Opt-in tests on the real Qwen2.5-Coder 1.5B/0.5B pair (`pytest -m slow`).

Fetch the models with ../shared/models/fetch-models.sh (into $LSD_MODELS_DIR); without them
these tests are skipped with that reason.
"""

from __future__ import annotations

import pytest

from lsd_local import Engine

pytestmark = pytest.mark.slow

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Rename the variable x to count in this code:\n\n```python\ndef f(x):\n    x = x + 1\n"
    "    return x * x\n```",
    "Explain in two sentences what a hash map is.",
]


@pytest.fixture(scope="module")
def greedy_outputs(qwen_pair):
    with Engine.load(qwen_pair[0], drafter="none", n_threads=2) as plain:
        return [plain.generate([{"role": "user", "content": p}], max_tokens=64).run().tokens
                for p in PROMPTS]


@pytest.mark.parametrize("drafter", ["lookup", "model", "multilevel"])
def test_strict_equals_greedy_on_qwen(qwen_pair, greedy_outputs, drafter):
    draft = qwen_pair[1] if drafter != "lookup" else None
    with Engine.load(qwen_pair[0], draft, drafter=drafter, n_threads=2) as eng:
        for prompt, expected in zip(PROMPTS, greedy_outputs, strict=True):
            gen = eng.generate([{"role": "user", "content": prompt}], max_tokens=64).run()
            assert gen.tokens == expected, prompt
            assert gen.stats.accepted_loose == 0


@pytest.mark.parametrize("rule", ["fly", "asd"])
def test_loose_rules_run_on_qwen(qwen_pair, rule):
    with Engine.load(qwen_pair[0], qwen_pair[1], drafter="model", rule=rule,
                     n_threads=2) as eng:
        gen = eng.generate([{"role": "user", "content": PROMPTS[0]}], max_tokens=64).run()
    assert gen.stats.generated_tokens > 0 and gen.text.strip()
    assert gen.stats.accepted_exact > 0
