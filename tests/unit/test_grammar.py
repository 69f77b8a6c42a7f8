"""Grammar constraints on hand-made logits and in the round loop, with a fake grammar (no
llama.cpp): constrained rows, forbidden drafts, every rule, sampling."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import EOS, FakeTarget, ScriptedDrafter, TableGrammar, V, fake_generation

from lsd_local.config import RuleConfig, SamplerSettings
from lsd_local.drafters.base import Draft, Drafter
from lsd_local.errors import GrammarError
from lsd_local.kernels.rows import row_top, row_top_reference
from lsd_local.loop import LoopSettings, RoundState
from lsd_local.text import TextAssembler
from lsd_local.verify import asd, fly, strict
from lsd_local.verify.constrain import constrain_row, prepare_block
from lsd_local.verify.verifier import Verifier


def random_table(rng: np.random.Generator, period: int, v: int, density: float) -> np.ndarray:
    table = rng.random((period, v)) < density
    table[np.arange(period), rng.integers(0, v, period)] = True  # never an empty set
    return table


def reference_row(row: np.ndarray, allowed: np.ndarray, n_top: int) -> np.ndarray:
    """The documented semantics, slowly: walk tokens best-first (stable), set forbidden ones to
    -inf until n_top allowed are found (all of them when n_top is 0 or not enough exist)."""
    out = row.copy()
    found = 0
    for token in np.argsort(-row.astype(np.float64), kind="stable"):
        if allowed[token]:
            found += 1
            if found == n_top:
                break
        else:
            out[token] = -np.inf
    return out


def test_row_top_matches_its_reference():
    rng = np.random.default_rng(0)
    for _ in range(300):
        v = int(rng.integers(1, 400))
        row = rng.standard_normal(v).astype(np.float32)
        if rng.random() < 0.5:  # ties and extremes
            row = np.round(row * 2).astype(np.float32) * np.float32(rng.choice([1, 1e4]))
        if rng.random() < 0.3:  # grammar-masked entries
            row[rng.random(v) < 0.5] = -np.inf
        m = int(rng.integers(1, 40))
        obvious = np.argsort(-row.astype(np.float64), kind="stable")[:m]  # the definition
        assert np.array_equal(row_top_reference(row, m), obvious)
        assert np.array_equal(row_top(row, m), obvious)


@pytest.mark.parametrize("n_top", [0, 1, 3, 40])
def test_constrain_row_equals_the_reference(n_top):
    rng = np.random.default_rng(n_top)
    for _ in range(300):
        v = int(rng.integers(2, 200))
        table = random_table(rng, 1, v, float(rng.choice([0.02, 0.3, 0.9])))
        row = rng.standard_normal(v).astype(np.float32)
        if rng.random() < 0.3:
            row = np.round(row).astype(np.float32)  # ties
        expected = reference_row(row, table[0], n_top)
        best = constrain_row(TableGrammar(table), row, n_top)
        assert best == int(np.argmax(expected)) and table[0][best]
        assert np.array_equal(row, expected)


def test_allowed_argmax_costs_one_check_and_no_mask():
    v = 151_936
    table = np.ones((1, v), bool)
    table[0, 7] = False
    row = np.random.default_rng(1).standard_normal(v).astype(np.float32)
    grammar = TableGrammar(table)
    best = constrain_row(grammar, row, 1)
    assert best == int(np.argmax(row)) and grammar.calls == {"allows": 1, "mask": 0, "clone": 0}


def test_sparse_grammar_on_a_large_vocabulary_falls_back_to_a_full_mask():
    v = 5000
    table = np.zeros((1, v), bool)
    table[0, [11, 4000]] = True
    rng = np.random.default_rng(2)
    row = rng.standard_normal(v).astype(np.float32)
    row[[11, 4000]] = [-5.0, -4.0]  # both far below the 256 best
    grammar = TableGrammar(table)
    assert constrain_row(grammar, row, 1) == 4000
    assert grammar.calls["mask"] == 1 and np.isfinite(row).sum() == 2


def test_no_allowed_token_is_a_clear_error():
    table = np.zeros((1, 8), bool)
    with pytest.raises(GrammarError, match="allows no token"):
        constrain_row(TableGrammar(table), np.zeros(8, np.float32), 1)


def full_mask_block(logits, draft, table):
    """Reference for strict/ASD: every row fully masked along the draft, draft cut before its
    first forbidden token."""
    masked = logits.astype(np.float32).copy()
    n_ready = len(draft)
    for j in range(len(draft) + 1):
        masked[j][~table[j % len(table)]] = -np.inf
        if j < len(draft) and not table[j % len(table)][draft[j]]:
            n_ready = j
            break
    return masked[:n_ready + 1], draft[:n_ready]


def random_block(rng, table, k, v):
    logits = (rng.standard_normal((k + 1, v)) * rng.choice([0.3, 3.0])).astype(np.float32)
    greedy_allowed = [int(np.argmax(np.where(table[j % len(table)], logits[j], -np.inf)))
                      for j in range(k)]
    draft = np.array(greedy_allowed, np.int32)
    flip = rng.random(k) < 0.3
    draft[flip] = rng.integers(0, v, int(flip.sum()))
    return logits, draft


@pytest.mark.parametrize("rule", ["strict", "asd"])
def test_prepared_block_verifies_like_a_fully_masked_block(rule):
    rng = np.random.default_rng(10)
    for _ in range(400):
        k, v = int(rng.integers(1, 12)), int(rng.integers(4, 40))
        table = random_table(rng, 7, v, 0.6)
        logits, draft = random_block(rng, table, k, v)
        ref_logits, ref_draft = full_mask_block(logits, draft, table)
        block = logits.copy()
        n = prepare_block(TableGrammar(table), block, draft, 1, rule == "strict")
        if rule == "strict":
            got, want = strict(block[:n + 1], draft[:n]), strict(ref_logits, ref_draft)
        else:
            kw = dict(gate=50.0, max_exceptions=3, budget=20.0)
            got, want = asd(block[:n + 1], draft[:n], **kw), asd(ref_logits, ref_draft, **kw)
        assert (got.n_accept, got.next_token) == (want.n_accept, want.next_token)
        assert table[got.n_accept % 7][got.next_token]


@pytest.mark.parametrize("entropy,top", [("topk", 3), ("normalized", 1)])
def test_prepared_block_for_fly_equals_the_reference_rows(entropy, top):
    rng = np.random.default_rng(11)
    for _ in range(300):
        k, v = int(rng.integers(1, 10)), int(rng.integers(4, 40))
        table = random_table(rng, 5, v, 0.5)
        logits, draft = random_block(rng, table, k, v)
        block = logits.copy()
        n = prepare_block(TableGrammar(table), block, draft, top, False)
        forbidden = [j for j in range(k) if not table[j % 5][draft[j]]]
        assert n == (forbidden[0] if forbidden else k)
        for j in range(n + 1):
            assert np.array_equal(block[j], reference_row(logits[j], table[j % 5], top))
        verdict = fly(block[:n + 1], draft[:n], theta=0.0, window=1, entropy=entropy)
        kept = draft[:verdict.n_accept].tolist() + [verdict.next_token]
        assert all(table[i % 5][t] for i, t in enumerate(kept))


def loose_bait():
    """Row 0 is flat (high entropy, tiny regret) and the draft's token 2 is not its argmax 1;
    rows 1..3 agree with the draft: FLy and ASD keep token 2 loosely when nothing forbids it."""
    v = 8
    logits = np.zeros((5, v), np.float32)
    logits[0] = 1.0
    logits[0, 1] = 1.01
    draft = np.array([2, 4, 5, 6], np.int32)
    for j, token in enumerate(draft[1:], start=1):
        logits[j, token] = 9.0
    logits[4, 3] = 9.0
    return logits, draft


@pytest.mark.parametrize("rule", ["fly-topk", "fly-normalized", "asd"])
def test_loose_rule_never_keeps_a_forbidden_draft_token(rule):
    logits, draft = loose_bait()
    entropy = rule.partition("-")[2]
    verify = (lambda lg, d: fly(lg, d, theta=0.1, window=2, entropy=entropy)) if entropy else (
        lambda lg, d: asd(lg, d, gate=10.0, max_exceptions=2, budget=10.0))
    free = verify(logits, draft)
    assert free.n_accept == 4 and free.loose[0] == 1  # the bait works without a grammar
    table = np.ones((1, 8), bool)
    table[0, 2] = False  # token 2 is forbidden everywhere
    block = logits.copy()
    n = prepare_block(TableGrammar(table), block, draft, 3, False)
    constrained = verify(block[:n + 1], draft[:n])
    assert (n, constrained.n_accept, constrained.next_token) == (0, 0, 1)


def constrained_greedy(target: FakeTarget, table, prompt, n):
    seq, out = list(prompt), []
    for i in range(n):
        row = target.next_logits(seq)
        row[~table[i % len(table)]] = -np.inf
        out.append(int(np.argmax(row)))
        seq.append(out[-1])
        if out[-1] == EOS:
            break
    return out


def run_constrained(target, drafter, table, rule="strict", k=4, sampler=None, seed=0,
                    max_tokens=40, entropy="topk", **rule_params):
    prompt = [3, 5]
    grammar = TableGrammar(table)
    top = sampler.top_k if sampler else (3 if rule == "fly" and entropy == "topk" else 1)
    req = LoopSettings(max_tokens, k, sampler, top)
    verifier = Verifier(RuleConfig(rule=rule, entropy=entropy, **rule_params), sampler)
    gen = fake_generation(target, drafter, prompt, req, verifier,
                          TextAssembler(lambda t: bytes([65 + t]), ()),
                          RoundState(np.random.default_rng(seed), grammar))
    events = list(gen)
    assert grammar.closed  # the request frees its grammar when it ends
    return gen.tokens, events


@pytest.mark.parametrize("corrupt_every", [0, 2])
def test_constrained_strict_equals_constrained_greedy(corrupt_every):
    for seed in range(6):
        table = random_table(np.random.default_rng(seed), 5, V, 0.4)
        target = FakeTarget()
        out, events = run_constrained(target, ScriptedDrafter(FakeTarget(), corrupt_every),
                                      table)
        assert out == constrained_greedy(FakeTarget(), table, [3, 5], 40)
        assert sum(e.n_drafted for e in events) > sum(e.n_accepted for e in events) > 0


@pytest.mark.parametrize("rule,params", [("fly", {"theta": 0.0, "window": 1}),
                                         ("fly", {"theta": 0.0, "window": 1,
                                                  "entropy": "normalized"}),
                                         ("asd", {"gate": 100.0, "budget": 1e6}),
                                         ("strict", {})])
def test_every_rule_commits_only_allowed_tokens(rule, params):
    n_loose = 0
    for seed in range(8):
        table = random_table(np.random.default_rng(100 + seed), 3, V, 0.5)
        out, events = run_constrained(FakeTarget(), ScriptedDrafter(FakeTarget(), 1), table,
                                      rule, k=6, **params)
        assert all(table[i % 3][t] for i, t in enumerate(out))
        n_loose += sum(e.n_loose for e in events)
    assert (n_loose > 0) == (rule != "strict")  # the loose paths really ran


@pytest.mark.parametrize("rule,entropy", [("strict", "topk"), ("fly", "topk"),
                                          ("fly", "normalized")])
def test_sampling_commits_only_allowed_tokens(rule, entropy):
    sampler = SamplerSettings(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0)
    for seed in range(10):
        table = random_table(np.random.default_rng(seed), 4, V, 0.4)
        out, _ = run_constrained(FakeTarget(), ScriptedDrafter(FakeTarget(), 2), table, rule,
                                 sampler=sampler, seed=seed, entropy=entropy, theta=0.0)
        assert all(table[i % 4][t] for i, t in enumerate(out))


def test_grammar_block_cuts_draft_probabilities_with_the_draft():
    from lsd_local.loop import _grammar_block

    table = np.ones((1, 4), bool)
    table[0, 2] = False
    req = LoopSettings(10, 3, SamplerSettings(temperature=0.8), 0)
    state = RoundState(np.random.default_rng(0), TableGrammar(table))
    probs = np.full((3, 4), 0.25)
    draft = Draft(np.array([1, 2, 3], np.int32), probs)
    logits, cut = _grammar_block(req, state, np.zeros((4, 4), np.float32), draft, False)
    assert cut.tokens.tolist() == [1] and cut.probs.shape == (1, 4)
    assert logits.shape == (2, 4) and np.all(logits[:, 2] == -np.inf)


class UniformAllowedDrafter(Drafter):
    """Samples each draft token uniformly among the tokens the grammar allows (its p_d)."""

    name = "uniform"

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        state = grammar.clone()
        tokens, probs = [], []
        for _ in range(k):
            allowed = state.allowed()
            p = allowed / allowed.sum()
            tokens.append(int(rng.choice(len(p), p=p)))
            probs.append(p)
            state.accept(tokens[-1])
        return Draft(np.array(tokens, np.int32), np.stack(probs))

    def reset(self):
        pass


def test_constrained_speculative_sampling_keeps_the_constrained_distribution():
    """The first committed token follows the target's distribution over allowed tokens."""
    from lsd_local.verify.sampling import sampling_probs

    table = random_table(np.random.default_rng(5), 2, V, 0.5)
    sampler = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    target = FakeTarget()
    row = target.next_logits([3, 5])
    row[~table[0]] = -np.inf
    expected = sampling_probs(row, sampler)
    counts = np.zeros(V)
    for seed in range(3000):
        out, _ = run_constrained(FakeTarget(), UniformAllowedDrafter(), table, k=2,
                                 sampler=sampler, seed=seed, max_tokens=1)
        counts[out[0]] += 1
    assert counts[~table[0]].sum() == 0
    assert 0.5 * np.abs(counts / counts.sum() - expected).sum() < 0.03
