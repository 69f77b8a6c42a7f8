"""lsd bench --profile's arithmetic (bench/profile.py) on hand-made timings: the best case
with perfect drafts is read off the measured curve, never a line through two points."""

from __future__ import annotations

import pytest

from lsd_local.bench import profile

# the pulled Q4_K_M file's shape on these 2-core VMs (docs): 8 cost 8 steps, 16 cost 10.5
CURVE = {1: 0.064, 2: 0.106, 4: 0.211, 8: 0.518, 16: 0.672, 32: 1.184}


def test_perfect_drafts_pay_at_long_k_where_the_curve_flattens():
    gains = profile.perfect_speedups(CURVE)
    assert gains[7] == pytest.approx(8 * 0.064 / 0.518)  # about 1: K = 7 gains nothing
    assert profile.best(gains) == (31, pytest.approx(32 * 0.064 / 1.184))


def test_a_drafters_cost_per_token_comes_off_the_best_case():
    free = profile.perfect_speedups(CURVE)
    paid = profile.perfect_speedups(CURVE, draft_token_s=0.037)  # the 0.5B draft model
    assert all(paid[k] < free[k] for k in free)
    assert profile.best(paid)[1] < profile.best(free)[1]


def test_no_k_that_beats_plain_decoding_is_k_zero():
    flat = {1: 0.05, 2: 0.11, 4: 0.3}  # batches dearer than their steps
    assert profile.best(profile.perfect_speedups(flat)) == (0, 1.0)


def test_weight_types_without_a_batched_kernel_on_x86():
    types = {"Q4_K": {"tensors": 100, "bytes": 9}, "Q6_K": {"tensors": 20, "bytes": 4},
             "F32": {"tensors": 1, "bytes": 1}}
    assert profile.unbatched(types, "x86_64") == ["Q6_K"]
    assert profile.unbatched(types, "arm64") == []  # not known there: nothing claimed
    text = profile.format_profile({"target_s": CURVE, "free_drafts":
                                   profile.perfect_speedups(CURVE), "best_free": (31, 1.73),
                                   "context": 300, "types": types, "machine": "x86_64"})
    assert "no batched kernel on this x86 CPU for: Q6_K" in text and "K = 31" in text


def test_the_types_of_a_real_gguf_file(tiny_pair):
    """The tiny test model's weights are F32 (its norms, 1-D, are left out)."""
    types = profile.tensor_types(tiny_pair[0])
    assert set(types) == {"F32"} and types["F32"]["tensors"] >= 2 * 7
