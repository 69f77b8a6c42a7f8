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
    offloaded = profile.format_profile({"target_s": CURVE, "free_drafts":
                                        profile.perfect_speedups(CURVE), "best_free": (31, 1.73),
                                        "context": 300, "types": types, "machine": "x86_64",
                                        "placement": "29/29 layers on CUDA0"})
    # (seen on an H200: the note about the CPU's kernels was printed for a file on the GPU)
    assert "x86" not in offloaded and "29/29 layers on CUDA0: the CPU's" in offloaded
    partly = profile.format_profile({"target_s": CURVE, "free_drafts":
                                     profile.perfect_speedups(CURVE), "best_free": (31, 1.73),
                                     "context": 300, "types": types, "machine": "x86_64",
                                     "placement": "10/29 layers on CUDA0 (the other 19 on the "
                                                  "CPU)"})
    assert "no batched kernel on this x86 CPU for: Q6_K" in partly


def test_the_types_of_a_real_gguf_file(tiny_pair):
    """The tiny test model's weights are F32 (its norms, 1-D, are left out)."""
    types = profile.tensor_types(tiny_pair[0])
    assert set(types) == {"F32"} and types["F32"]["tensors"] >= 2 * 7


def test_a_copy_of_a_whole_answer_pays_its_first_tokens_and_its_last_partial_block():
    """t(1) = 1, t(2) = 1.5, t(4) = 2 (hand-made): a 10-token answer whose first 2 tokens
    cannot be drafted costs 2 steps and two blocks of 4 (6 in all); an 11-token one a step
    more; an answer no longer than its lead is plain decoding."""
    curve = {1: 1.0, 2: 1.5, 4: 2.0}
    assert profile.copy_speedup(curve, 10, lead=2) == pytest.approx(10 / 6)
    assert profile.copy_speedup(curve, 11, lead=2) == pytest.approx(11 / 7)
    assert profile.copy_speedup(curve, 2, lead=2) == pytest.approx(1.0)
    # a long copy approaches the best block's speedup from below
    best_block = profile.best(profile.perfect_speedups(curve))[1]
    assert profile.copy_speedup(curve, 10, 2) < profile.copy_speedup(curve, 1000, 2) \
        < best_block


def test_the_profile_prints_the_copy_ceiling():
    text = profile.format_profile({"target_s": CURVE, "free_drafts":
                                   profile.perfect_speedups(CURVE), "best_free": (31, 1.73),
                                   "copy": 1.41, "context": 300, "types": {},
                                   "machine": "x86_64"})
    assert f"an answer of {profile.COPY_TOKENS} tokens copied" in text and "1.41x" in text


def test_a_copys_last_block_may_be_a_cheaper_larger_one():
    """Where a block of 4 costs less than one of 3 (a CPU's steps), the last 3 tokens of a
    copy are drafted in a block of 4 (what runs past the end is not committed)."""
    curve = {1: 1.0, 3: 2.5, 4: 2.0}
    assert profile.copy_speedup(curve, 7, lead=0) == pytest.approx(7 / 4.0)


def test_a_copy_is_drafted_only_in_the_block_sizes_auto_may_draft():
    """A block of 24 (measured to show the curve's steps) is never drafted by auto: a copy
    of 24 tokens where t(24) is cheap costs a block of 16 and one of 8 instead, the sizes
    config allows (up to 16, then 32, 48, 64), not one of 24."""
    curve = {1: 1.0, 8: 6.0, 16: 10.0, 24: 11.0, 32: 18.0}
    assert profile.copy_speedup(curve, 24, lead=0) == pytest.approx(24 / 16.0)
    assert all(profile.is_auto_block(n) for n in (1, 15, 16, 32, 48, 64))
    assert not any(profile.is_auto_block(n) for n in (0, 17, 24, 31, 33, 63, 65))


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_profile_says_how_long_it_will_take_from_its_first_pass():
    """A slow machine (the 2-core EPYC VM: a pass over the sizes ~13 s, 300 tokens of prompt
    ~11 s) takes minutes: the user hears so after the first, untimed pass, and again when
    the long context's first pass tells its own pace."""
    said, clock = [], _Clock()
    progress = profile.ProfileProgress(said.append, 5, n_context=300, n_long=1500, clock=clock)
    clock.now = 11.0 + 13.0  # the prompt, then the first pass
    progress(0, 13.0)
    progress(1, 13.0)  # (timed passes say nothing)
    assert said == [f"  a pass over {len(profile.PROFILE_SIZES)} block sizes took 13.0 s; "
                    "5 more, then 6 after 1500 tokens of context: about 4 min to go"]
    # 5 passes of 13 s; 1500 tokens at 300's pace (55 s) and 6 passes of 13 s, both dearer
    # by the long context's growth (1.38x from 167 to 1500 tokens measured)
    growth = progress.long_growth
    assert 1.25 <= growth <= 1.45
    assert progress.seconds_left(13.0) == pytest.approx(5 * 13 + growth * (55 + 6 * 13))
    shorter = profile.ProfileProgress(said.append, 5, n_context=167, n_long=703, clock=clock)
    assert 1.05 <= shorter.long_growth < growth  # (1.10x measured)
    progress.start_long()
    clock.now += 70.0
    progress(0, 16.0)
    assert said[1].endswith("5 more after 1500 tokens: about 80 s to go")


def test_a_profile_without_a_long_context_or_a_listener():
    said, clock = [], _Clock()
    progress = profile.ProfileProgress(said.append, 3, n_context=150, n_long=0, clock=clock)
    clock.now = 2.0
    progress(0, 0.5)
    assert said == [f"  a pass over {len(profile.PROFILE_SIZES)} block sizes took 0.5 s; "
                    "3 more: about 2 s to go"]
    profile.ProfileProgress(None, 3, 150, 0, clock)(0, 0.5)  # (nobody to tell: no error)
