"""How a shared step weighs what each generation commits (sidebyside.expected_length and
weighed_others): pure arithmetic, checked by hand and against a double-loop reference."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from lsd_local.sidebyside import EXPECTED_LENGTH_PRIOR, expected_length, weighed_others


def generation(written: int, max_tokens: int) -> SimpleNamespace:
    return SimpleNamespace(stats=SimpleNamespace(generated_tokens=written),
                           _settings=SimpleNamespace(max_tokens=max_tokens))


def test_a_request_is_expected_to_write_about_as_much_again_within_max_tokens():
    assert expected_length(generation(0, 512)) == EXPECTED_LENGTH_PRIOR
    assert expected_length(generation(200, 4096)) == 200 + EXPECTED_LENGTH_PRIOR
    assert expected_length(generation(200, 210)) == 10  # max_tokens leaves 10
    assert expected_length(generation(0, 8)) == 8
    assert expected_length(generation(8, 8)) == 1  # (never nothing: it weighs, finite)


def test_the_others_are_weighed_by_how_much_sooner_they_end():
    """A long answer (232 tokens expected) beside a new short one (32): what the short one
    commits counts 7.25 times for the long one, the long one's 1/7.25 for the short one."""
    long_sees, short_sees = weighed_others([(232, 1), (32, 1)])
    assert long_sees == pytest.approx(232 / 32)
    assert short_sees == pytest.approx(32 / 232)
    assert weighed_others([(100, 3), (100, 2), (100, 1)]) == pytest.approx([3, 4, 5])
    assert weighed_others([(40, 2)]) == [0.0]  # alone: nobody else's tokens
    assert weighed_others([(50, 0), (10, 4)]) == pytest.approx([20.0, 0.0])  # 0: a prefill


def test_weighed_others_equals_its_definition_on_random_steps():
    rng = np.random.default_rng(3)
    for _ in range(500):
        n = int(rng.integers(1, 9))
        members = [(int(rng.integers(1, 5000)), int(rng.integers(0, 40))) for _ in range(n)]
        got = weighed_others(members)
        for j, (length_j, _) in enumerate(members):
            reference = sum(length_j / length_i * tokens_i
                            for i, (length_i, tokens_i) in enumerate(members) if i != j)
            assert got[j] == pytest.approx(reference, rel=1e-9, abs=1e-9)
