"""bench/lookup_keys: what a per-key n-gram memory could act on, on hand-made answers."""

from __future__ import annotations

import numpy as np

from lsd_local.bench.lookup_keys import (
    continuation_choices,
    continuations,
    key_recurrence,
    occurrences,
    proposal_positions,
)


def test_a_key_counts_as_recurring_only_where_the_answer_proposed_from_it_before():
    # the answer copies the prompt 1..8, then 1..7 again: lookup proposes from the answer's
    # 7th token on (a 6-gram needs an earlier occurrence with a token after it), and only the
    # last position's key (1..6) was proposed from before (at the first copy's 7th token)
    prompt = list(range(1, 9))
    sequence = np.array(prompt + list(range(1, 9)) + list(range(1, 8)), np.int32)
    proposed = proposal_positions(sequence, len(prompt))
    assert sorted(proposed) == list(range(14, 23))
    assert all(proposed[p] == sequence[p] for p in proposed)  # (a copy: every one right)
    assert key_recurrence(sequence, proposed, 6) == (9, 1)
    assert key_recurrence(sequence, proposed, 4) == (9, 1)
    assert key_recurrence(sequence, {}, 6) == (0, 0)


def test_lookup_follows_the_longer_copy_where_the_most_frequent_continuation_is_wrong():
    # 1..6 went on with 7 once (after 20 21 22) and with 8 twice; the answer follows
    # 20 21 22 1..6 and writes 7: lookup's longer match names it, the most frequent, the
    # latest and k4v's rule (8 is twice as frequent as 7) name 8
    common = [1, 2, 3, 4, 5, 6]
    prompt = [20, 21, 22, *common, 7, 30, *common, 8, 31, *common, 8, 32, 20, 21, 22]
    sequence = np.array(prompt + [*common, 7], np.int32)
    at = len(prompt) + 6
    assert continuations(sequence, at, 6) == [7, 8, 8]
    proposed = proposal_positions(sequence, len(prompt))
    assert proposed[at] == 7
    counts = continuation_choices(sequence, len(prompt), proposed, 6)
    assert counts == {"ambiguous": 1, "lookup": 1, "frequent": 0, "latest": 0,
                      "k4v drafts": 1, "k4v right": 0}


def test_a_key_is_the_tokens_just_before_the_position():
    # 1..6 then 7 in the prompt (after 10) and twice in the answer (after 20, then 21): at
    # the answer's end the 6-token key 1..6 recurs, the 7-token keys (20 1..6, 21 1..6) do not
    prompt = [10, 1, 2, 3, 4, 5, 6, 7, 11]
    sequence = np.array(prompt + [20, 1, 2, 3, 4, 5, 6, 7, 21, 1, 2, 3, 4, 5, 6, 7], np.int32)
    proposed = proposal_positions(sequence, len(prompt))
    assert sorted(proposed) == [16, 17, 24]
    assert key_recurrence(sequence, proposed, 6) == (3, 1)
    assert key_recurrence(sequence, proposed, 7) == (3, 0)


def test_an_occurrence_counts_when_its_next_token_is_the_last_one_seen():
    sequence = np.full(8, 5, np.int32)
    assert occurrences(sequence, 8, 6).tolist() == [0, 1]  # (start 1 is followed by [7])
    assert continuations(sequence, 8, 6) == [5, 5]


def test_k4v_drafts_what_followed_the_latest_occurrence_in_the_prompt():
    # 1..6 went on with 7 twice in the prompt and with 8 in the answer: 7 dominates (2 of 3),
    # and k4v drafts what followed the prompt's latest occurrence (7, right) where lookup
    # and the latest overall name the answer's 8
    common = [1, 2, 3, 4, 5, 6]
    prompt = [*common, 7, 30, *common, 7, 31]
    sequence = np.array(prompt + [*common, 8, 32, *common, 7], np.int32)
    at = len(sequence) - 1
    assert continuations(sequence, at, 6) == [7, 7, 8]
    proposed = proposal_positions(sequence, len(prompt))
    assert proposed[at] == 8  # (equal runs: the most recent)
    counts = continuation_choices(sequence, len(prompt), proposed, 6)
    assert counts == {"ambiguous": 1, "lookup": 0, "frequent": 1, "latest": 0,
                      "k4v drafts": 1, "k4v right": 1}


def test_k4v_gate_weighs_the_most_frequent_against_all_others_together():
    # continuations 7, 7, 8, 9: 7 is twice 8 and twice 9 but not twice both: no draft
    common = [1, 2, 3, 4, 5, 6]
    prompt = [*common, 7, 30, *common, 7, 31, *common, 8, 32, *common, 9, 33]
    sequence = np.array(prompt + [*common, 7], np.int32)
    at = len(sequence) - 1
    assert continuations(sequence, at, 6) == [7, 7, 8, 9]
    counts = continuation_choices(sequence, len(prompt), {at: 9}, 6)
    assert counts["frequent"] == 1 and counts["k4v drafts"] == 0


def test_k4v_drafts_nothing_where_no_continuation_dominates():
    # 1..6 went on with 7, then 8: neither is twice the other, so k4v's rule drafts nothing;
    # the latest (8) is the one that comes here
    common = [1, 2, 3, 4, 5, 6]
    prompt = [*common, 7, 30, *common, 8, 31, 40]
    sequence = np.array(prompt + [*common, 8], np.int32)
    at = len(prompt) + 6
    assert continuations(sequence, at, 6) == [7, 8]
    counts = continuation_choices(sequence, len(prompt), {at: 7}, 6)
    assert counts["ambiguous"] == 1 and counts["latest"] == 1 and counts["lookup"] == 0
    assert counts["k4v drafts"] == 0
    assert continuations(sequence, 3, 6) == []  # (no key yet)


def test_the_replay_script_prints_the_counts_per_prompt_set(tmp_path, capsys):
    from benchscripts import load_bench_script

    from lsd_local.bench import replay as rp
    from lsd_local.drafters.auto.estimators import CostCurve

    script = load_bench_script("replay_auto")
    common = [1, 2, 3, 4, 5, 6]
    records = [rp.Recorded("edits/twice", list(range(1, 9)), list(range(1, 9)) + common + [7]),
               rp.Recorded("code/ambiguous",
                           [20, 21, 22, *common, 7, 30, *common, 8, 31, *common, 8, 32, 20, 21,
                            22], [*common, 7])]
    rp.save(tmp_path / "rec.json", records, {300: CostCurve([1, 2], [0.1, 0.15])})
    script.main(["keys", str(tmp_path / "rec.json"), "--key-lens", "6,12"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["edits", "code"]
    assert "9 answer positions" in lines[0] and "6 tokens 1, 12 tokens 1" in lines[0]
    assert "ambiguous (6-token key continued differently before) 1: lookup's choice right 1, " \
           "the most frequent 0" in lines[1]
