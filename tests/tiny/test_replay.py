"""Replay of drafting policies on recorded answers (lsd_local.bench.replay)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from benchscripts import load_bench_script

from lsd_local import Engine
from lsd_local.bench import replay as rp
from lsd_local.drafters.auto.estimators import CostCurve
from lsd_local.drafters.auto.policy import AutoDrafter
from lsd_local.drafters.base import Draft, Drafter
from lsd_local.drafters.lookup import LookupDrafter

ANSWER = list(range(100, 140))  # 40 tokens
PROMPT = [1, 2, 3]


def linear(n: int) -> float:
    return 0.010 + 0.005 * n


class Oracle(Drafter):
    """Proposes the recorded answer itself (every draft accepted), in the replay's ids."""

    def __init__(self, k: int, wrong_at: int | None = None) -> None:
        self.k, self.wrong_at = k, wrong_at
        self.sequence = rp.dense_sequence(PROMPT, ANSWER)[0]

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        done = len(history)
        tokens = self.sequence[done:done + min(k, self.k)].copy()
        if self.wrong_at is not None and len(tokens) > self.wrong_at:
            tokens[self.wrong_at] = self.sequence[0]  # a prompt token: never the answer's
        return Draft(tokens)


def test_plain_steps_cost_one_target_step_per_token():
    result = rp.replay(PROMPT, ANSWER, None, linear)
    assert result.rounds == len(ANSWER)
    assert result.seconds == pytest.approx(len(ANSWER) * linear(1))
    assert result.speedup(linear(1), len(ANSWER)) == pytest.approx(1.0)


@pytest.mark.parametrize("k", [1, 3, 7, 64])
def test_accepted_drafts_commit_k_plus_one_per_round(k):
    result = rp.replay(PROMPT, ANSWER, Oracle(k), linear)
    assert result.rounds == math.ceil(len(ANSWER) / (k + 1))
    assert sum(n + 1 for n in result.draft_lengths) == len(ANSWER)  # last round: what is left
    assert result.seconds == pytest.approx(sum(linear(n + 1) for n in result.draft_lengths))


def test_a_wrong_token_ends_the_accepted_prefix():
    result = rp.replay(PROMPT, ANSWER, Oracle(4, wrong_at=2), linear)
    # every round drafts 4, keeps 2 and the target's own token: 3 tokens per round
    assert result.draft_lengths[:12] == [4] * 12
    # 12 rounds leave 4 tokens: a 3-token draft keeps 2 (+1), then one plain step
    assert result.draft_lengths[12:] == [3, 0] and result.rounds == 14


def test_a_growing_batch_pays_its_one_time_cost_once():
    """With growth_s_per_row, a decode asking more logit rows than any before it costs the
    added rows once more; a smaller or equal batch later does not."""
    target = rp.ReplayTarget(np.arange(50, dtype=np.int32), 50, lambda n: 1.0,
                             growth_s_per_row=0.25)
    target.decode(np.arange(4, dtype=np.int32), 0, 4)  # 4 new rows: 1 + 4 * 0.25
    target.decode(np.arange(2, dtype=np.int32), 4, 2)  # 1
    target.decode(np.arange(6, dtype=np.int32), 6, 6)  # 2 rows more: 1 + 0.5
    assert target.now == pytest.approx(2.0 + 1.0 + 1.5)
    plain = rp.replay(PROMPT, ANSWER, None, linear, growth_s_per_row=0.25)
    assert plain.seconds == pytest.approx(rp.replay(PROMPT, ANSWER, None, linear).seconds + 0.25)


def test_cost_curve_interpolates_and_extrapolates():
    curve = CostCurve([1, 5, 9], [1.0, 3.0, 4.0])
    assert curve(1) == 1.0 and curve(3) == pytest.approx(2.0) and curve(7) == pytest.approx(3.5)
    assert curve(13) == pytest.approx(5.0)  # last slope 0.25 per token
    assert rp.nearest_curve({300: curve, 1500: CostCurve([1], [9.0])}, 1000)(1) == 9.0


def test_save_and_load_round_trip(tmp_path):
    records = [rp.Recorded("chat/a", PROMPT, ANSWER)]
    curves = {300: CostCurve([1, 2], [0.03, 0.05])}
    rp.save(tmp_path / "r.json", records, curves)
    loaded_records, loaded_curves = rp.load(tmp_path / "r.json")
    assert loaded_records == records and loaded_curves == curves


def test_auto_replay_drafts_a_copied_answer_and_skips_a_new_one():
    copy_prompt = list(range(500, 560)) + ANSWER  # the answer is in the prompt
    copied = rp.replay_set([rp.Recorded("x/copy", copy_prompt, ANSWER)],
                           lambda: AutoDrafter(LookupDrafter()), lambda r: linear)
    fresh = rp.replay_set([rp.Recorded("x/new", PROMPT, ANSWER)],
                          lambda: AutoDrafter(LookupDrafter()), lambda r: linear)
    assert copied[0] > 1.8 and fresh[0] == pytest.approx(1.0)  # 2.0-2.07: a tie at one round


def test_replay_makes_the_rounds_the_real_loop_makes(tiny_pair):
    """Strict lookup on real llama.cpp (token and text lookup): the replay over the plain
    answer, given the vocabulary, drafts the same lengths in the same number of rounds
    (strict commits exactly the greedy answer)."""
    prompt = "the cat is on the mat and the dog is in the house " * 4
    with Engine.load(tiny_pair[0], drafter="none", n_ctx=1024) as plain:
        answer = plain.generate(prompt, max_tokens=100).run().tokens
        prompt_ids = plain.prompt_tokens(prompt)
    with Engine.load(tiny_pair[0], drafter="lookup", k=8, n_ctx=1024) as eng:
        stats = eng.generate(prompt, max_tokens=100).run().stats
        result = rp.replay(prompt_ids, answer, rp.FixedLookup(8), linear,
                           vocab=eng.target.vocab)
    assert stats.rounds == result.rounds
    assert dict(stats.draft_lengths) == dict(Counter(result.draft_lengths))
    assert stats.drafted > 0


def test_measure_cost_curve_on_a_real_model(tiny_pair):
    with Engine.load(tiny_pair[0], drafter="none", n_ctx=512) as eng:
        curve = rp.measure_cost_curve(eng.target, 40, [1, 4, 9], repeats=2)
        assert eng.target.n_cached == 0  # the cache is left empty
        assert eng.generate("the cat", max_tokens=3).run().tokens  # and still usable
    assert curve.sizes == [1, 4, 9] and all(s > 0 for s in curve.seconds)


def load_script():
    return load_bench_script("replay_auto")


def replay_table(script, tmp_path, capsys, records, configs: str) -> list[str]:
    """The lines `replay_auto.py run` prints for `records` under a linear cost curve."""
    curve = CostCurve([1, 2, 9, 33], [linear(1), linear(2), linear(9), linear(33)])
    rp.save(tmp_path / "rec.json", records, {300: curve})
    script.main(["run", str(tmp_path / "rec.json"), "--configs", configs])
    return capsys.readouterr().out.splitlines()


def test_replay_script_prints_a_table_per_set(tmp_path, capsys):
    script = load_script()
    copy_prompt = list(range(500, 560)) + ANSWER
    records = [rp.Recorded("humaneval/copy", copy_prompt, ANSWER),
               rp.Recorded("chat/new", PROMPT, ANSWER)]
    lines = replay_table(script, tmp_path, capsys, records,
                         "plain,lookup:8,auto:lookup_prior=0.5")
    header, rows = lines[0].split(), {line.split()[0]: line.split()[1:] for line in lines[1:4]}
    assert header[1:] == ["humaneval", "chat"]
    assert rows["plain"] == ["1.000x", "(1.000)", "1.000x", "(1.000)"]
    assert float(rows["lookup:8"][0].rstrip("x")) > 1.5  # the copied answer
    assert rows["auto:lookup_prior=0.5"][2] == "1.000x"  # nothing to copy: plain steps
    with pytest.raises(SystemExit, match="unknown configuration"):
        script.main(["run", str(tmp_path / "rec.json"), "--configs", "magic"])


def test_smooth_curves_price_every_block_on_a_line_through_each_contexts_step():
    stepped = {300: CostCurve([1, 2, 16, 32], [0.1, 0.2, 1.6, 1.7]),
               1500: CostCurve([1, 2, 16, 32], [0.2, 0.3, 2.0, 2.1])}
    smooth = rp.smooth_curves(stepped, 0.01)
    assert smooth[300].sizes == [1, 2, 16, 32]
    assert smooth[300](1) == pytest.approx(0.1) and smooth[1500](1) == pytest.approx(0.2)
    assert smooth[300](16) == pytest.approx(0.1 * 1.15)
    assert smooth[1500](32) == pytest.approx(0.2 * 1.31)
    assert stepped[300](16) == pytest.approx(1.6)  # the recording's curves are not changed
    for bad in (-0.01, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="slope"):
            rp.smooth_curves(stepped, bad)


def test_replay_script_smooth_prices_drafts_cheaper_than_a_steep_curve(tmp_path, capsys):
    """--smooth 0: every block costs one step, so a copied answer replays faster than on the
    recording's own curve (linear: a block of 9 costs 3.7 steps), plain stays 1.0; a
    negative slope is a clear error, not a traceback."""
    script = load_script()
    records = [rp.Recorded("humaneval/copy", list(range(500, 560)) + ANSWER, ANSWER)]
    stepped = replay_table(script, tmp_path, capsys, records, "plain,lookup:8")
    script.main(["run", str(tmp_path / "rec.json"), "--configs", "plain,lookup:8",
                 "--smooth", "0"])
    flat = capsys.readouterr().out.splitlines()
    assert flat[1].split()[1] == "1.000x"
    assert float(flat[2].split()[1].rstrip("x")) > 1.5 * float(stepped[2].split()[1].rstrip("x"))
    with pytest.raises(SystemExit, match="--smooth: a curve's slope"):
        script.main(["run", str(tmp_path / "rec.json"), "--smooth", "-1"])


def test_replay_script_models_text_lookup_with_the_targets_vocabulary(tmp_path, capsys,
                                                                     tiny_pair):
    """--text-lookup MODEL: the recording's tokens spelled by MODEL's vocabulary. An answer
    that repeats the prompt's words under other tokens (the tiny vocabulary spells " a" after
    a space as one token, "a" after "(" as another) is drafted sooner where text lookup runs."""
    with Engine.load(tiny_pair[0], drafter="none", n_ctx=512) as eng:
        vocab = eng.target.vocab
        prompt = vocab.tokenize("say a word, a world, a wonder\n", add_special=False)
        answer = vocab.tokenize("(a word, (a world, (a wonder", add_special=False)
        assert vocab.tokenize(" a", add_special=False)[-1] not in answer
    script = load_script()
    records = [rp.Recorded("x/retokenized", prompt, answer, family="retokenized")]
    plain_lookup = replay_table(script, tmp_path, capsys, records, "lookup:8")
    script.main(["run", str(tmp_path / "rec.json"), "--configs", "lookup:8",
                 "--text-lookup", str(tiny_pair[0])])
    with_text = capsys.readouterr().out.splitlines()
    without = float(plain_lookup[1].split()[1].rstrip("x"))
    assert float(with_text[1].split()[1].rstrip("x")) > without


def test_remembering_replay_starts_each_answer_from_the_previous_ones():
    """`remember:auto` replays as `lsd run` with what it learned: the second copied answer
    drafts from its first round (a fresh auto spends it measuring t(1)), and gains."""
    script = load_script()
    # the prompt holds the passage and ends with its first 12 tokens: the answer (the rest)
    # can be looked up from its first round
    copy_prompt = list(range(500, 560)) + ANSWER + [999] + ANSWER[:12]
    records = [rp.Recorded(f"x/copy{i}", copy_prompt, ANSWER[12:]) for i in range(3)]
    fresh = rp.replay_set(records, script.make_factory("auto"), lambda r: linear)
    remembering = script.make_factory("remember:auto")()
    warm = rp.replay_set(records, remembering, lambda r: linear)
    assert warm[0] == pytest.approx(fresh[0])  # nothing to remember yet
    assert warm[1] > fresh[1] and warm[2] > fresh[2]
    assert remembering.last.cost.observed


def test_mixed_replay_keeps_one_memory_for_all_sets_and_families_name_requests(capsys,
                                                                               tmp_path):
    """--mixed: the sets' answers interleaved through one remembering drafter, each begun as
    a request of its family; recordings without families get them from the prompt sets."""
    from lsd_local.bench.prompts import load_set
    from lsd_local.drafters.auto.learned import request_family

    script = load_script()
    he, chat = load_set("humaneval", "all")[:2], load_set("chat", "all")[:2]
    copy_prompt = list(range(500, 560)) + ANSWER + [999] + ANSWER[:12]
    records = [rp.Recorded(f"humaneval/{item.id}", copy_prompt, ANSWER[12:]) for item in he] + \
        [rp.Recorded(f"chat/{item.id}", PROMPT, ANSWER) for item in chat]
    script.add_families(records)
    assert records[0].family == records[1].family == request_family(list(he[0].messages))
    assert records[2].family != records[3].family  # each chat question its own
    order = script.interleaved(records, ["humaneval", "chat"])
    assert [r.key for r in order] == [records[i].key for i in (0, 2, 1, 3)]
    begun = []

    class Spy(AutoDrafter):
        def begin(self, family=None, n_prompt=None):
            begun.append((family, n_prompt))
            super().begin(family, n_prompt)

    remembering = script.Remembering(lambda: Spy(LookupDrafter()))
    speedups = rp.replay_set(order, remembering, lambda r: linear)
    assert begun == [(r.family, len(r.prompt)) for r in order]
    separate = script.speedups_per_set(records, {300: CostCurve([1, 33], [linear(1), linear(33)])},
                                       "remember:auto", ["humaneval", "chat"], mixed=False)
    assert len(speedups) == 4 and speedups[2] > 1.5  # the second copied answer, remembered
    assert len(separate["humaneval"]) == 2 and len(separate["chat"]) == 2
    rp.save(tmp_path / "rec.json", records, {300: CostCurve([1, 33], [linear(1), linear(33)])})
    script.main(["run", str(tmp_path / "rec.json"), "--configs", "plain,remember:auto",
                 "--mixed"])
    out = capsys.readouterr().out
    assert "one memory for all sets" in out and out.splitlines()[0].split()[1:] == \
        ["humaneval", "chat"]


def test_cut_lookup_drafts_only_what_the_answer_keeps():
    """cut:K, the bound: each round drafts lookup's proposal cut where the answer parts from
    it, so every drafted token is kept; on a copy that breaks it beats fixed lookup K, and
    it makes the most of lookup's proposals (no fixed K beats it)."""
    broken = ANSWER[:20] + [7000 + i for i in range(5)] + ANSWER[25:]  # the copy breaks at 20
    prompt = list(range(500, 560)) + ANSWER + [999] + ANSWER[:8]
    cut = rp.replay(prompt, broken[8:], rp.CutLookup(16), linear)
    drafted = sum(cut.draft_lengths)
    assert drafted > 0
    # every drafted token was kept: rounds commit draft + 1 each, covering the answer exactly
    assert sum(n + 1 for n in cut.draft_lengths) == len(broken) - 8
    for k in (2, 4, 8, 16):
        fixed = rp.replay(prompt, broken[8:], rp.FixedLookup(k), linear)
        assert cut.seconds <= fixed.seconds + 1e-12
    assert cut.seconds < rp.replay(prompt, broken[8:], rp.FixedLookup(16), linear).seconds


def test_calibration_from_curves_is_what_the_engine_would_time():
    from lsd_local.drafters.auto.calibration import (
        CALIBRATION_SIZES,
        MIN_DOUBLING_CONTEXT,
        SLOPE_SIZE,
    )

    near = CostCurve([1, 64], [0.01, 0.01 + 63 * 0.004])
    far = CostCurve([1, 64], [0.012, 0.012 + 63 * 0.0045])
    measured = rp.calibration_from_curves({300: near, 1500: far})
    assert [n for n, _, _ in measured.timings] == list(CALIBRATION_SIZES)
    assert all(c == 300 and s == pytest.approx(near(n)) for n, s, c in measured.timings)
    expected = (far(SLOPE_SIZE) - near(SLOPE_SIZE)) / (SLOPE_SIZE * 1200)
    assert measured.per_query_context_s == pytest.approx(expected)
    assert rp.calibration_from_curves({300: near}).per_query_context_s is None
    steep = CostCurve([1, 64], [0.01, 5.0])  # a noisy pair: capped as the engine caps it
    capped = rp.calibration_from_curves({300: near, 1500: steep}).per_query_context_s
    assert capped == pytest.approx(near(1) / MIN_DOUBLING_CONTEXT)
    with pytest.raises(ValueError):
        rp.calibration_from_curves({})


def test_replay_script_replays_calibrated_auto_and_the_cut_bound(tmp_path, capsys):
    script = load_script()
    copy_prompt = list(range(500, 560)) + ANSWER + [999] + ANSWER[:12]
    records = [rp.Recorded("six-edits/a", copy_prompt, ANSWER[12:]),
               rp.Recorded("chat/new", PROMPT, ANSWER)]
    lines = replay_table(script, tmp_path, capsys, records, "auto,calibrated:auto,cut:31")
    assert lines[0].split()[1:] == ["six-edits", "chat"]  # sets in recorded order
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:4]}
    speed = {name: float(cells[0].rstrip("x")) for name, cells in rows.items()}
    assert speed["cut:31"] >= speed["calibrated:auto"] > 1.5
    assert speed["calibrated:auto"] >= speed["auto"]  # no first plain step to time t(1)
    near = CostCurve([1, 33], [linear(1), linear(33)])
    far = CostCurve([1, 33], [linear(1) * 1.1, linear(33) * 1.5])
    drafter = script.make_factory("remember:calibrated:auto", {300: near, 1500: far})()()
    assert drafter.cost.observed and not script.make_factory("auto")().cost.observed
    assert drafter.cost.per_query_context_s == pytest.approx(
        rp.calibration_from_curves({300: near, 1500: far}).per_query_context_s)
    assert drafter.cost.predict(np.array([32]), 300)[0] == pytest.approx(near(32))
    with pytest.raises(SystemExit, match="auto configurations only"):
        script.main(["run", str(tmp_path / "rec.json"), "--configs", "calibrated:lookup:8"])


def test_an_answer_that_ends_lets_drafts_run_past_it_unless_lookup_stops_there():
    """With `end`, an answer closed by its end-of-generation token was asked for more
    tokens, so a copy's draft runs on past the end as in the engine; the lookup the replay
    builds stops at that token (as the engine's does), and no tokens are scored past it."""
    eog = 7777
    passage = list(range(100, 140))
    prompt = [1] + passage + [eog, 3, 4, 5, 6, 7, 8, 9] + [2]  # the template goes on after it
    answer = passage + [eog]  # a copy that ends where the prompt's passage ends
    end = rp.AnswerEnd(eog, 192)
    bounded = rp.replay(prompt, answer, rp.FixedLookup(16), linear)  # (no end: as before)
    ended = rp.replay(prompt, answer, rp.FixedLookup(16), linear, end=end)
    assert bounded.draft_lengths[-1] == 0 and ended.draft_lengths[-1] == 1  # just the end

    class Unstopped(rp.FixedLookup):  # the engine before lookup stopped at the end
        def propose(self, history, k, sampler=None, rng=None, grammar=None):
            self.lookup.is_stop = None
            return super().propose(history, k)

    past = rp.replay(prompt, answer, Unstopped(16), linear, end=end)
    assert max(past.draft_lengths[-1:]) > ended.draft_lengths[-1]  # drafted past the end
    assert past.seconds > ended.seconds
    assert sum(n + 1 for n in ended.draft_lengths) >= len(answer)  # the answer is whole


def test_replay_script_sets_autos_long_blocks():
    """`auto:long_blocks=48+64` / `long_blocks=` (none: blocks of at most the dense sizes)
    and `dense_blocks=32` reach the drafter, so that a replay can compare the policies."""
    from lsd_local.drafters.auto.estimators import allowed_blocks

    script = load_script()
    default = script.make_factory("auto")()
    none = script.make_factory("auto:long_blocks=")()
    before = script.make_factory("auto:dense_blocks=32:long_blocks=48+64")()
    assert default.lookup_cap == 63 and none.lookup_cap == 15 and before.lookup_cap == 63

    def blocks(drafter):  # the blocks it may draft
        return (np.flatnonzero(allowed_blocks(63, *drafter._blocks)) + 1).tolist()

    assert blocks(default) == [*range(1, 17), 32, 48, 64]
    assert blocks(before) == [*range(1, 33), 48, 64]
