"""The cost-aware auto drafter and its estimators (online cost and acceptance models), driven
by a simulated machine whose costs and acceptance are scripted (no llama.cpp)."""

from __future__ import annotations

import numpy as np
import pytest

from lsd_local.config import AUTO_DENSE_BLOCKS, AUTO_LONG_BLOCKS, LOOKUP_CAP, MODEL_CAP
from lsd_local.drafters.auto.estimators import AcceptanceModel, CostModel, best_k
from lsd_local.drafters.auto.policy import AutoDrafter
from lsd_local.drafters.base import DecodeCall, Draft, Drafter, run_steps

# --- the models ----------------------------------------------------------------------------


def test_cost_model_per_size_means_interpolation_and_optimistic_extrapolation():
    cost = CostModel()
    for _ in range(20):
        cost.observe(1, 0.040)
        cost.observe(5, 0.120)
        cost.observe(9, 0.250)
    assert cost.predict(5) == pytest.approx(0.120)
    assert cost.predict(7) == pytest.approx(0.185)  # between 5 and 9
    slope = (0.250 - 0.120) / 4
    assert cost.predict(33) == pytest.approx(0.250 + 0.5 * slope * 24)  # half the last slope
    sizes, times = cost.measured()
    assert sizes.tolist() == [1, 5, 9] and times == pytest.approx([0.040, 0.120, 0.250])


def test_cost_model_follows_a_change_and_forgets_stale_sizes():
    cost = CostModel()
    for _ in range(50):
        cost.observe(1, 0.040)
        cost.observe(33, 0.500)
    for _ in range(1500):  # the machine changes; size 33 is no longer tried
        cost.observe(1, 0.020)
        cost.observe(3, 0.021)
    assert cost.predict(1) == pytest.approx(0.020, rel=0.01)
    assert 33 not in cost.measured()[0]
    assert cost.predict(33) < 0.05


def test_a_first_timing_stands_in_only_until_the_size_is_known():
    """The first timing of a size in a process (one-time costs) is ignored when the size is
    known, used while nothing else is, and replaced by the size's next timing."""
    cost = CostModel()
    for _ in range(10):
        cost.observe(1, 0.040)
        cost.observe(9, 0.250)
    cost.observe(9, 0.400, first=True)  # known: ignored
    assert cost.predict(9) == pytest.approx(0.250)
    cost.observe(5, 0.300, first=True)  # unknown: the best there is
    assert cost.predict(5) == pytest.approx(0.300)
    assert 5 in cost.measured()[0]
    weight, seconds, _ = cost.counts()  # what is saved for the next process: the best there is
    assert seconds[5] / weight[5] == pytest.approx(0.300) and weight[5] > 0.05
    cost.observe(5, 0.120)  # a later timing replaces it
    assert cost.predict(5) == pytest.approx(0.120)
    fresh = CostModel()
    fresh.observe(1, 0.050, first=True)
    assert fresh.observed and fresh.predict(1) == pytest.approx(0.050)
    fresh.observe(17, 0.300, first=True)
    for _ in range(700):  # a stand-in is forgotten as a measured size is, when unused
        fresh.observe(1, 0.050)
    assert fresh.measured()[0].tolist() == [1]


def test_cost_model_moves_each_size_to_the_context_it_is_asked_at():
    """t(n) = F(n) + slope * n * context: timed after 64 tokens (calibration) and, for a
    step, after 1500 (the rounds), a block of 32 after 1500 is predicted as dear as it is;
    without a known slope contexts are not told apart (the timings' plain means)."""
    slope = 3e-6

    def true_t(n, context):
        return 0.030 + 0.009 * (n - 1) + slope * n * context
    cost = CostModel()
    for n in (1, 2, 9, 16, 32):
        cost.observe(n, true_t(n, 64), context=64)
    for _ in range(20):
        cost.observe(1, true_t(1, 1500), context=1500)
    mixed = cost.predict(1)
    assert true_t(1, 64) < mixed < true_t(1, 1500)
    assert cost.predict(32, context=1500) == pytest.approx(cost.predict(32))
    cost.per_query_context_s = slope
    for n in (1, 2, 9, 16, 32):
        assert cost.predict(n, context=1500) == pytest.approx(true_t(n, 1500))
        assert cost.predict(n, context=64) == pytest.approx(true_t(n, 64))
    # between measured sizes: the interpolation of the moved sizes
    assert cost.predict(24, context=1500) == pytest.approx(
        (true_t(16, 1500) + true_t(32, 1500)) / 2)
    # a slope measured four times too steep: after a shorter context than they were timed
    # at, blocks cost at least half their timing, never nothing
    steep = CostModel()
    for n in (1, 2, 9, 16, 32):
        steep.observe(n, true_t(n, 6000), context=6000)
    steep.per_query_context_s = 4 * slope
    predicted = steep.predict(np.arange(1, 34), context=100)
    timed = steep.predict(np.arange(1, 34))
    assert (predicted >= 0.5 * timed - 1e-12).all() and (predicted < timed).all()


def test_auto_drafts_a_shorter_block_where_the_context_makes_blocks_dear():
    """The same copy (a 16-token match, nothing learned) is worth a longer block after a
    short prompt than after a long one, where each scored token attends to 3000 cached
    ones: what the context slope is for (without it both choose alike)."""
    def chosen(context_tokens: int) -> int:
        drafter = AutoDrafter(FakeLookup(World(*CPU, p_lookup=0.8)))
        for n in (1, 2, 9, 16, 32):
            drafter.cost.observe(n, 0.030 + 0.009 * (n - 1) + 4e-6 * n * 64, context=64)
        drafter.cost.per_query_context_s = 4e-6
        history = np.zeros(context_tokens, np.int32)
        drafter._context = context_tokens
        return drafter._choose(history, n_lookup=LOOKUP_CAP, k=LOOKUP_CAP, run=16).k
    assert 0 < chosen(3000) < chosen(100)


def test_a_batch_that_grew_the_targets_logits_buffer_is_not_learned_as_its_cost():
    """Whether a batch grows llama.cpp's logits buffer is the target's history, which the
    round tells the drafter: a timing that grew it is left out for a size already known;
    the same timing of a batch that did not is learned."""
    grew, did_not = AutoDrafter(None), AutoDrafter(None)
    for drafter in (grew, did_not):
        for _ in range(10):
            drafter.cost.observe(1, 0.040)
            drafter.cost.observe(33, 0.500)
    for drafter in (grew, did_not):  # (a round: the context of its block is known)
        drafter.propose(np.ones(8, np.int32), 32)
    grew.accept(32, 32, 0.600, grew_logits=True)
    did_not.accept(32, 32, 0.600, grew_logits=False)
    assert did_not.cost.predict(33) > 0.505
    assert grew.cost.predict(33) == pytest.approx(0.500)


def test_acceptance_updates_tested_positions_only():
    acc = AcceptanceModel(4, decay=1.0)
    acc.update(4, 2)  # positions 1, 2 accepted, 3 rejected, 4 untested
    assert acc.accepted.tolist() == [1, 1, 0, 0] and acc.tried.tolist() == [1, 1, 1, 0]
    acc.update(2, 2)  # all accepted
    assert acc.accepted.tolist() == [2, 2, 0, 0] and acc.tried.tolist() == [2, 2, 1, 0]
    p = acc.probabilities()
    pooled = (4 + 1) / (5 + 2)  # all positions together, with one pseudo-count each way
    assert p[3] == pytest.approx(pooled)  # untested: what the drafter shows elsewhere
    assert p[0] > pooled > p[2]  # always accepted vs. rejected once in one try


def test_expected_accepted_is_the_sum_of_reach_probabilities():
    acc = AcceptanceModel(6)
    rng = np.random.default_rng(1)
    for _ in range(50):
        n = int(rng.integers(1, 7))
        acc.update(n, int(rng.integers(0, n + 1)))
    p = acc.probabilities()
    expected = acc.expected_accepted(6)
    for k in range(7):
        assert expected[k] == pytest.approx(sum(np.prod(p[:j]) for j in range(1, k + 1)))


def test_best_k_maximises_tokens_per_second():
    expected = np.array([0.0, 0.9, 1.7, 2.4])
    assert best_k(expected, np.array([1.0, 1.1, 1.2, 1.3]))[0] == 3  # flat costs: draft long
    assert best_k(expected, np.array([1.0, 2.0, 3.0, 4.0]))[0] == 0  # linear: don't draft


# --- a simulated machine -------------------------------------------------------------------


class World:
    """A target whose greedy continuation is `truth`; drafts are right up to a scripted
    failure point; verifying n tokens costs a + b*n virtual seconds."""

    def __init__(self, a, b, p_lookup, p_model=0.0, draft_s=0.0, seed=0):
        self.rng = np.random.default_rng(seed)
        self.truth = self.rng.integers(0, 1000, 200_000).astype(np.int32)
        self.a, self.b = a, b
        self.p = {"lookup": p_lookup, "model": p_model}
        self.draft_s = draft_s
        self.clock = 0.0
        self.n_forward = 0

    def proposal(self, source, start, k):
        """truth[start:start+k] with the first failure (prob 1 - p per position) corrupted."""
        tokens = self.truth[start:start + k].copy()
        fails = self.rng.random(k) >= self.p[source]
        if fails.any():
            first = int(np.argmax(fails))
            tokens[first] = (tokens[first] + 1) % 1000
        return tokens


class FakeLookup(Drafter):
    """Proposes from the world's truth with i.i.d. failures; reports runs as LookupDrafter
    would for a copy that goes on after each failure: a 6-gram match, extended by every
    token committed since the last wrong proposal. Acceptance does not depend on the run
    here: a model that conditions on it must learn the same rate for every run."""

    def __init__(self, world):
        self.world = world
        self.last_run = 6
        self._last = (0, np.zeros(0, np.int32))  # (start, tokens) of the last proposal
        self._break = 0  # position of the last wrong proposed token

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        start, tokens = self._last
        if len(history) < start:  # a new text (simulate started over)
            start, tokens, self._break = 0, tokens[:0], 0
        seen = history[start:start + len(tokens)]
        wrong = np.flatnonzero(seen != tokens[:len(seen)])
        if len(wrong):
            self._break = start + int(wrong[0]) + 1
        self.last_run = 6 + len(history) - self._break
        proposal = self.world.proposal("lookup", len(history), k)
        self._last = (len(history), proposal)
        return Draft(proposal, run=self.last_run)


class FakeModel(Drafter):
    def __init__(self, world):
        self.world = world
        self.n_forward = 0
        self.synced = 0

    def pending(self, history):
        return len(history) - self.synced

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        self.n_forward += k + 1  # catch-up pass + one per drafted token
        self.synced = len(history)
        self.world.clock += self.world.draft_s * (k + 1)
        return Draft(self.world.proposal("model", len(history), k))

    def reset(self):
        pass


def simulate(drafter, world, rounds, k_cap=32, history=None):
    """Run the loop: propose, verify against truth, commit, feed back. Returns per-round
    (k, source) and the throughput in tokens per virtual second."""
    history = np.zeros(0, np.int32) if history is None else history
    log = []
    start_clock, start_n = world.clock, len(history)
    for _ in range(rounds):
        n = len(history)
        draft = drafter.propose(history, k_cap)
        k = len(draft)
        truth = world.truth[n:n + k + 1]
        mismatch = np.flatnonzero(draft.tokens != truth[:k])
        n_accept = int(mismatch[0]) if len(mismatch) else k
        seconds = world.a + world.b * (k + 1)
        world.clock += seconds
        drafter.accept(k, n_accept, seconds)
        history = np.concatenate([history, truth[:n_accept + 1]])
        log.append((k, draft.source or "none"))
    rate = (len(history) - start_n) / (world.clock - start_clock)
    return log, rate, history


def best_fixed_rate(world, source, k_cap=32, draft_s=0.0):
    """Tokens per second of the best fixed K for i.i.d. acceptance p (K = 0 included)."""
    p = world.p[source]
    rates = [1 / (world.a + world.b)]
    for k in range(1, k_cap + 1):
        expected = sum(p ** j for j in range(k + 1))
        rates.append(expected / (world.a + world.b * (k + 1) + draft_s * (k + 1)))
    return max(rates), int(np.argmax(rates))


CPU = (0.013, 0.024)  # t(n) = 13 + 24 n ms: K extra tokens cost ~K steps
GPU = (0.030, 0.0005)  # t(n) nearly flat


@pytest.mark.parametrize("costs, p", [(CPU, 0.9), (CPU, 0.97), (GPU, 0.7), (GPU, 0.95)])
def test_converges_near_the_best_fixed_k(costs, p):
    world = World(*costs, p_lookup=p, seed=3)
    drafter = AutoDrafter(FakeLookup(world))
    simulate(drafter, world, 300)  # learn
    _, rate, _ = simulate(drafter, world, 1500)
    best, k_best = best_fixed_rate(world, "lookup")
    assert rate >= 0.93 * best, (rate, best, k_best)


def test_falls_back_to_plain_steps_when_drafts_are_never_accepted():
    world = World(*GPU, p_lookup=0.0)
    drafter = AutoDrafter(FakeLookup(world))
    simulate(drafter, world, 200)
    log, rate, _ = simulate(drafter, world, 1000)
    plain_share = sum(k == 0 for k, _ in log) / len(log)
    assert plain_share > 0.97  # a short exploration every 128 rounds at most
    assert rate >= 0.97 / (world.a + world.b)


def test_switches_when_the_costs_change():
    """Sizes measured on the "CPU" are forgotten after ~600 rounds unused, then longer drafts
    get tried. Every path switches to longer drafts, but not every one reaches 0.9 of the
    best fixed K in the rounds given: a size the CPU rounds timed often (K = 2 here) keeps
    its CPU cost for ~1,600 rounds, and some paths (2 of 12 seeds, before and after runs
    were priced by the answer's context: docs/auto.md) read 0.54-0.57 of it in the last
    600 rounds. A known weakness of forgetting by decay, bounded here, not hidden."""
    switched = 0
    for seed in range(10):
        world = World(*CPU, p_lookup=0.9, seed=seed)
        drafter = AutoDrafter(FakeLookup(world))
        log_cpu, _, history = simulate(drafter, world, 800)
        world.a, world.b = GPU
        _, _, history = simulate(drafter, world, 1200, history=history)
        log_gpu, rate, _ = simulate(drafter, world, 600, history=history)
        mean_cpu = np.mean([k for k, _ in log_cpu[-300:]])
        mean_gpu = np.mean([k for k, _ in log_gpu[-300:]])
        switched += mean_gpu > 3 * max(mean_cpu, 1.0) and \
            rate >= 0.9 * best_fixed_rate(world, "lookup")[0]
    assert switched >= 8


@pytest.mark.parametrize("costs, draft_s, wanted", [(CPU, 0.022, {"lookup", "none"}),
                                                     (GPU, 0.0015, {"model"})])
def test_chooses_the_drafter_that_pays(costs, draft_s, wanted):
    world = World(*costs, p_lookup=0.3, p_model=0.95, draft_s=draft_s, seed=7)
    drafter = AutoDrafter(FakeLookup(world), FakeModel(world), clock=lambda: world.clock)
    simulate(drafter, world, 400)
    log, rate, _ = simulate(drafter, world, 1000)
    used = [source for k, source in log if k]
    share = sum(source in wanted for k, source in log if (source in wanted or k)) / len(log)
    assert share > 0.9, (used[:20], share)
    best = max(best_fixed_rate(world, "lookup")[0],
               best_fixed_rate(world, "model", k_cap=MODEL_CAP, draft_s=draft_s)[0])
    assert rate >= 0.9 * best


def test_fixed_k_keeps_k_and_chooses_the_drafter():
    world = World(*GPU, p_lookup=0.2, p_model=0.9, draft_s=0.001, seed=2)
    drafter = AutoDrafter(FakeLookup(world), FakeModel(world), fixed_k=4,
                          clock=lambda: world.clock)
    simulate(drafter, world, 300)
    log, _, _ = simulate(drafter, world, 300)
    assert {k for k, _ in log} <= {2, 4}  # 2: an occasional exploration round
    assert sum(source == "model" for _, source in log) > 0.9 * len(log)


# The fake lookups here say nothing of where a proposal was found (Draft.origin -1): the
# answer never leaves a first copy of its prompt, so all of them are priced, and learned, by
# the first copy's run model (drafters/auto/context.py), lookup's beliefs kept apart.
UNPLACED = "first"


def test_shadow_proposals_teach_lookup_acceptance_without_verifying():
    world = World(*CPU, p_lookup=0.99, seed=9)
    drafter = AutoDrafter(FakeLookup(world))
    drafter.cost.observe(1, 0.037)
    for _ in range(5):  # force plain steps by claiming huge verification costs
        drafter.cost.observe(33, 100.0)
    log, _, _ = simulate(drafter, world, 50)
    assert all(k == 0 for k, _ in log)  # nothing was verified
    assert drafter.acceptance[UNPLACED].probabilities(6, 1)[0] > 0.9


class FakeMatchLookup(Drafter):
    """Lookup whose proposals come from a 12-gram match (right with p_long per position) or a
    shorter one (p_short), at random; says which through the Draft's run like
    LookupDrafter."""

    def __init__(self, world, p_long, p_short, long_share=0.5):
        self.world, self.p_long, self.p_short = world, p_long, p_short
        self.long_share = long_share
        self.last_match = self.last_run = 0

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        long = self.world.rng.random() < self.long_share
        self.last_match = self.last_run = 12 if long else 6
        self.world.p["lookup"] = self.p_long if long else self.p_short
        return Draft(self.world.proposal("lookup", len(history), k), run=self.last_run)


def test_long_and_short_matches_are_learned_apart():
    world = World(*CPU, p_lookup=0.0, seed=11)
    lookup = FakeMatchLookup(world, p_long=0.99, p_short=0.2)
    drafter = AutoDrafter(lookup)
    simulate(drafter, world, 300)
    ks = {12: [], 6: []}
    history = np.zeros(0, np.int32)
    for _ in range(400):
        draft = drafter.propose(history, 32)
        ks[lookup.last_match].append(len(draft))
        truth = world.truth[len(history):len(history) + len(draft) + 1]
        mismatch = np.flatnonzero(draft.tokens != truth[:len(draft)])
        n_accept = int(mismatch[0]) if len(mismatch) else len(draft)
        drafter.accept(len(draft), n_accept, world.a + world.b * (len(draft) + 1))
        history = np.concatenate([history, truth[:n_accept + 1]])
    p_long = drafter.acceptance[UNPLACED].probabilities(12, 8)
    p_short = drafter.acceptance[UNPLACED].probabilities(6, 1)
    assert p_long.min() > 0.9 and p_short[0] < 0.5
    # copy long passages at about the best fixed K for their acceptance, skip the rest
    k_best = best_fixed_rate(World(*CPU, p_lookup=0.99), "lookup")[1]
    assert np.mean(ks[12]) > 0.6 * k_best and np.mean(ks[6]) < 1, (k_best, np.mean(ks[12]))


class ScriptedLookup(Drafter):
    """Returns scripted (tokens, n-gram) proposals in order, then nothing."""

    def __init__(self, proposals):
        self.proposals = list(proposals)
        self.last_match = self.last_run = 0

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        if not self.proposals:
            self.last_match = self.last_run = 0
            return Draft(np.zeros(0, np.int32))
        tokens, self.last_match = self.proposals.pop(0)
        self.last_run = self.last_match
        return Draft(np.array(tokens[:k], np.int32), run=self.last_run)


def plain_stepping(drafter: AutoDrafter) -> AutoDrafter:
    """`drafter` told that a step costs 0.04 s and a block of 33 costs 100 s: it steps
    plainly, and its lookup proposals are only scored in the shadow (free)."""
    drafter.cost.observe(1, 0.04)
    for _ in range(3):
        drafter.cost.observe(33, 100.0)
    return drafter


def test_a_copy_met_while_a_short_match_is_pending_is_learned_and_counted_once():
    """A short proposal stays right (pending) when a copy is found: the copy's failure must
    be learned at once (not after the short proposal ends), and the tokens both would score
    must count once: the short one ends there, having scored what was committed so far."""
    truth = list(range(100, 140))
    short = (truth[1:30], 6)  # made at position 1, right all along
    long_wrong = ([7, 7, 7], 12)  # made at position 2, wrong at once
    drafter = plain_stepping(AutoDrafter(ScriptedLookup([short, long_wrong])))
    for n in range(1, 6):
        drafter.propose(np.array(truth[:n], np.int32), 32)
        drafter.accept(0, 0, 0.04)
    model = drafter.acceptance[UNPLACED]
    copy_bucket = model.buckets(12, 1)[0]  # the long match's first position: wrong
    assert model.tried[copy_bucket] > 0 and model.accepted[copy_bucket] == 0
    short_bucket = model.buckets(6, 1)[0]  # the short one's first position: right
    assert model.accepted[short_bucket] > 0
    assert model.tried.sum() == pytest.approx(2.0, abs=0.02)  # one each, nothing twice


@pytest.mark.parametrize("costs, acceptance", [
    ([], []),  # not objects at all
    ({"weight": "abc", "seconds": [1.0]}, {"model": "abc"}),
    ({"weight": [1.0, [2.0]], "seconds": None}, {"model": {"accepted": [1, [2]], "tried": 3}}),
    ({"draft_token_s": float("inf")}, {"model": {"accepted": [-1.0] * MODEL_CAP,
                                                 "tried": [1.0] * MODEL_CAP}}),
    ({"draft_token_s": True}, {"model": {"accepted": [10 ** 400] * MODEL_CAP,
                                         "tried": [1] * MODEL_CAP}}),
    (None, {"lookup": {"accepted": "x", "families": {"f": {"tried": [10 ** 400]}}}}),
])
def test_a_damaged_learned_state_is_ignored_not_raised(costs, acceptance):
    """What a damaged or hand-edited state file may hold: every part that is not a valid
    level is ignored (the engine starts as if it were absent), nothing raises."""
    drafter = AutoDrafter(FakeLookup(World(*CPU, p_lookup=0.9)))
    drafter.restore(costs, acceptance)
    assert not drafter.cost.observed and drafter.draft_token_s is None
    model = drafter.acceptance["model"]
    assert not model.tried.any() and not model.accepted.any()
    lookup = drafter.acceptance["lookup"]
    assert not lookup.tried.any() and not lookup.families


def test_a_state_saved_by_the_previous_lookup_model_keeps_what_it_can():
    """Files written before lookup acceptance was learned by run hold per-position "lookup"
    and "lookup-long" entries: those are ignored, the draft model's cost and acceptance
    still come back. Their t(n) counts, saved before contexts were kept, are not restored
    (a draft model's engine calibrates again, measuring the context slope; a lookup-only
    one relearns them within rounds); the current format's come back."""
    old_lookup = {"accepted": [5.0] * 32, "tried": [6.0] * 32}
    old_model = {"accepted": [3.0] * MODEL_CAP, "tried": [4.0] * MODEL_CAP}
    costs = {"weight": [0.0, 4.0] + [0.0] * 127, "seconds": [0.0, 0.16] + [0.0] * 127,
             "draft_token_s": 0.01}
    world = World(*CPU, p_lookup=0.9)
    drafter = AutoDrafter(FakeLookup(world), FakeModel(world))
    drafter.restore(costs, {"lookup": old_lookup, "lookup-long": old_lookup,
                            "model": old_model})
    assert not drafter.cost.observed and drafter.draft_token_s == 0.01
    assert drafter.needs_slope and not drafter.needs_calibration
    assert drafter.acceptance["model"].tried.sum() > 0
    assert not drafter.acceptance["lookup"].tried.any()
    current = {**costs, "context": [0.0, 4.0 * 300] + [0.0] * 127,
               "per_query_context_s": 3e-6}
    drafter.restore(current, {})
    assert drafter.cost.predict(1) == pytest.approx(0.04) and not drafter.needs_slope
    assert drafter.cost.predict(1, context=1300) == pytest.approx(0.04 + 1000 * 3e-6)
    damaged = AutoDrafter(FakeLookup(world), FakeModel(world))
    damaged.restore({**current, "per_query_context_s": 1e308}, {})
    assert damaged.needs_slope  # (a slope no machine has: ignored, measured again)
    assert np.isfinite(damaged.cost.predict(np.arange(1, 34), context=50)).all()


def test_a_proposal_after_tokens_never_committed_teaches_nothing():
    """The loop asks for proposals after a grammar's forced tokens; when those are rejected,
    the proposal continued another context and must not be scored against this one."""
    truth = list(range(100, 140))
    forced = [7, 7]  # the grammar's guess after truth[:5]: rejected
    drafter = plain_stepping(AutoDrafter(ScriptedLookup([(truth[5:20], 12)])))
    drafter.propose(np.array(truth[:5] + forced, np.int32), 32)
    drafter.batch_tokens = 2  # (the two forced tokens were rejected: its own never judged)
    drafter.accept(0, 0, 0.04)
    drafter.batch_tokens = 0
    for n in range(6, 12):
        drafter.propose(np.array(truth[:n], np.int32), 32)
        drafter.accept(0, 0, 0.04)
    assert sum(model.tried.sum() for model in drafter.runs.values()) == 0


def calibrated(drafter, world):
    """What Engine._calibrate measures, from the simulated machine."""
    from lsd_local.drafters.auto.calibration import CALIBRATION_SIZES

    for n in CALIBRATION_SIZES:
        drafter.cost.observe(n, world.a + world.b * n)
    drafter.draft_token_s = world.draft_s
    drafter.cost.per_query_context_s = 0.0  # (the simulated machine's t(n) has no context)


def test_a_draft_model_whose_best_case_cannot_pay_is_never_tried():
    """On a CPU where 9 tokens cost ~6 steps and a draft step 60 % of one, even perfect
    drafts lose: after calibration the draft model is never used, not even to explore."""
    world = World(*CPU, p_lookup=0.3, p_model=1.0, draft_s=0.022, seed=11)
    drafter = AutoDrafter(FakeLookup(world), FakeModel(world), clock=lambda: world.clock)
    assert drafter.needs_calibration
    calibrated(drafter, world)
    assert not drafter.needs_calibration
    log, _, _ = simulate(drafter, world, 1500)
    assert not [source for k, source in log if source == "model"]
    t = drafter.cost.predict(np.arange(1, 34))
    assert not drafter.model_can_pay(t)


class NoMatches(Drafter):
    """Prompt lookup that finds nothing (most rounds of a chat)."""

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        return Draft(np.zeros(0, np.int32))


def test_a_draft_model_that_cannot_pay_is_priced_again_only_now_and_then(monkeypatch):
    """Rounds with nothing to draft but a draft model that could not pay skip the pricing
    (~0.2 ms a round of a chat) and choose what pricing would: no draft. It is priced
    again every MODEL_RECHECK rounds, so a machine that turns faster is still noticed."""
    from lsd_local.drafters.auto import policy

    world = World(*CPU, p_lookup=0.3, p_model=1.0, draft_s=0.022, seed=11)
    drafter = AutoDrafter(NoMatches(), FakeModel(world), clock=lambda: world.clock)
    calibrated(drafter, world)
    priced = []
    original = AutoDrafter._block_costs
    monkeypatch.setattr(AutoDrafter, "_block_costs",
                        lambda self: priced.append(self.rounds) or original(self))
    log, _, _ = simulate(drafter, world, 10 * policy.MODEL_RECHECK)
    assert {source for _, source in log} == {"none"}
    assert priced == list(range(1, 10 * policy.MODEL_RECHECK + 1, policy.MODEL_RECHECK))
    drafter.draft_token_s = 1e-6  # (its cost fell: the next pricing lets it be chosen)
    log, _, _ = simulate(drafter, world, policy.MODEL_RECHECK)
    assert "model" in {source for _, source in log}


def test_a_draft_model_that_can_pay_is_still_used():
    world = World(*GPU, p_lookup=0.3, p_model=0.95, draft_s=0.0015, seed=7)
    drafter = AutoDrafter(FakeLookup(world), FakeModel(world), clock=lambda: world.clock)
    calibrated(drafter, world)
    assert drafter.model_can_pay(drafter.cost.predict(np.arange(1, 34)))
    log, _, _ = simulate(drafter, world, 600)
    assert sum(source == "model" for _, source in log) > 0.8 * len(log)


def test_an_unmeasured_draft_model_may_be_tried():
    world = World(*CPU, p_lookup=0.3, p_model=0.95, draft_s=0.022)
    drafter = AutoDrafter(FakeLookup(world), FakeModel(world))
    assert drafter.model_can_pay(np.full(33, 0.05))  # its cost unknown: a trial measures it
    assert not AutoDrafter(FakeLookup(world)).model_can_pay(np.full(33, 0.05))  # no model


def kinked(n):
    """t(n) of a machine whose first 8 tokens cost nearly nothing more than one, every token
    past them 24 ms (a kernel switch)."""
    return 0.030 + 0.0005 * min(n, 8) + 0.024 * max(n - 8, 0)


def simulate_beside(drafter, world, rounds, others: int, others_yield: float = 0.0):
    """As simulate, with `others` tokens of other requests in every decode (side by side),
    committing `others_yield` (weighed): the decode costs kinked(others + k + 1), and the
    drafter is told both."""
    history, log = np.zeros(0, np.int32), []
    for _ in range(rounds):
        n = len(history)
        drafter.batch_tokens, drafter.batch_yield = others, others_yield
        draft = drafter.propose(history, 32)
        k = len(draft)
        truth = world.truth[n:n + k + 1]
        mismatch = np.flatnonzero(draft.tokens != truth[:k])
        n_accept = int(mismatch[0]) if len(mismatch) else k
        drafter.accept(k, n_accept, kinked(others + k + 1))
        history = np.concatenate([history, truth[:n_accept + 1]])
        log.append(k)
    return log


def _knows_kinked(drafter):
    for n in range(1, 48):  # the curve is known (pricing, not exploring, is tested)
        drafter.cost.observe(n, kinked(n))
    return drafter


def test_side_by_side_a_block_is_priced_with_what_the_others_commit():
    """Alone, drafts up to the kink are nearly free and auto drafts; beside 8 tokens of other
    requests that commit 4, every drafted token costs a full step of theirs, and at 80 %
    acceptance auto stops."""
    alone = _knows_kinked(AutoDrafter(FakeLookup(World(0, 0, p_lookup=0.8, seed=4))))
    beside = _knows_kinked(AutoDrafter(FakeLookup(World(0, 0, p_lookup=0.8, seed=4))))
    k_alone = simulate_beside(alone, alone.lookup.world, 600, 0)[300:]
    k_beside = simulate_beside(beside, beside.lookup.world, 600, 8, 4.0)[300:]
    assert np.mean(k_alone) >= 4, np.mean(k_alone)
    assert np.mean([k > 0 for k in k_beside]) < 0.1, k_beside[:40]


def cpu_t(n):
    """t(n) of this project's 2-core VMs (docs: t(16) ~ 10 t(1), t(32) ~ 18 t(1))."""
    return 0.064 * float(np.interp(n, [1, 2, 4, 8, 16, 32, 64], [1, 1.65, 3.3, 8, 10.5, 18.5, 34]))


@pytest.mark.parametrize("weighed_yield, long_block", [(0.0, True), (0.15, True), (7.0, False)])
def test_a_copy_beside_a_request_expected_to_end_sooner_drafts_short_blocks(weighed_yield,
                                                                            long_block):
    """A long answer copying a passage (every drafted token right) beside one short request
    (one token a step): when the short one is weighed as little (it has more left to write),
    the copy drafts long blocks, as alone; weighed 7 times its own (it has 7 times less
    left), a block of 32 would make its steps 12 times slower, and the copy drafts little."""
    drafter = AutoDrafter(FakeLookup(World(0, 0, p_lookup=1.0, seed=5)))
    for n in range(1, 70):
        drafter.cost.observe(n, cpu_t(n))
    ks = simulate_beside_curve(drafter, 200, 1, weighed_yield)[100:]
    assert (np.median(ks) >= 15) == long_block, ks[:20]
    if not long_block:
        assert np.median(ks) <= 3, ks[:20]


def simulate_beside_curve(drafter, rounds, others, others_yield):
    """simulate_beside on the cpu_t curve (every draft right: the world drafts the truth)."""
    world = drafter.lookup.world
    history, log = np.zeros(0, np.int32), []
    for _ in range(rounds):
        drafter.batch_tokens, drafter.batch_yield = others, others_yield
        draft = drafter.propose(history, 32)
        k = len(draft)
        n = len(history)
        drafter.accept(k, k, cpu_t(others + k + 1))
        history = np.concatenate([history, world.truth[n:n + k + 1]])
        log.append(k)
    return log


def test_the_draft_models_cost_is_learned_only_when_no_other_request_shares_the_step():
    """Side by side, a proposal's time spans the other sequences' drafting and catch-up
    passes (batched with its own): it must not become this drafter's cost per forward."""
    world = World(0.03, 0.001, 0.0, p_model=0.9, draft_s=0.5)
    drafter = AutoDrafter(None, FakeModel(world), clock=lambda: world.clock)
    drafter.draft_token_s = 0.01
    history = np.arange(10, dtype=np.int32)
    drafter.model.synced = len(history)  # in sync: its own pass is short
    drafter.batch_tokens = 5  # (others in the step)
    run_steps(drafter._model_draft_steps(history, 3, None, None, None))
    assert drafter.draft_token_s == 0.01
    drafter.batch_tokens = 0
    run_steps(drafter._model_draft_steps(history, 3, None, None, None))
    assert drafter.draft_token_s > 0.01


def test_a_failed_decode_goes_through_the_plan_that_asked_for_it():
    """run_steps raises a decode's failure inside the plan (its finally and with clauses
    run, as they would had it decoded itself) before the caller sees it."""
    cleaned = []

    class Refusing:
        n_cached = 0

        def decode(self, tokens, start, n_rows):
            raise RuntimeError("llama_decode failed with code 1")

    def plan():
        try:
            yield DecodeCall(Refusing(), np.zeros(1, np.int32), 1)
        finally:
            cleaned.append(True)

    with pytest.raises(RuntimeError, match="code 1") as raised:
        run_steps(plan())
    assert cleaned == [True] and raised.traceback  # (while the traceback still holds it)


def test_the_choice_maximises_the_decodes_weighed_tokens_per_second():
    """Reference: over every K it may draft, (others' weighed tokens + 1 + S(K)) / t(others +
    K + 1), on random curves, acceptance and neighbours; the drafter's choice is its argmax (a
    large yield of the others still drafts where blocks are nearly free)."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        drafter = AutoDrafter(FakeLookup(World(0, 0, p_lookup=0.5)), explore_every=10**9)
        steps = np.cumsum(rng.uniform(0.0, 0.02, 80))
        for n in range(1, 80):
            drafter.cost.observe(n, 0.03 + steps[n - 1])
        drafter.batch_tokens = int(rng.integers(0, 12))
        drafter.batch_yield = float(rng.uniform(0, 12))
        n_lookup, run = int(rng.integers(1, 32)), int(rng.integers(0, 64))
        choice = drafter._choose(np.zeros(50, np.int32), n_lookup, 32, run)
        expected = drafter.acceptance["lookup"].expected_accepted(run, n_lookup)
        t = drafter.cost.predict(np.arange(1, n_lookup + 2) + drafter.batch_tokens)
        rates = (drafter.batch_yield + 1 + expected) / t
        # (past AUTO_DENSE_BLOCKS, only blocks that make the decode one of AUTO_LONG_BLOCKS)
        ks = np.arange(n_lookup + 1)
        decode = ks + 1 + drafter.batch_tokens
        rates[(ks >= AUTO_DENSE_BLOCKS) & ~np.isin(decode, AUTO_LONG_BLOCKS)] = -np.inf
        best = int(np.argmax(rates))
        assert (choice.source, choice.k) == (("lookup", best) if best else ("none", 0))


def test_a_forced_head_alone_is_priced_as_free():
    """Alone under a grammar, the forced head is in the decode but its cost is not the
    block's: a block is priced by what it adds to the head (t(h + K + 1) - t(h))."""
    drafter = _knows_kinked(AutoDrafter(FakeLookup(World(0, 0, p_lookup=0.8))))
    drafter.batch_tokens = drafter.batch_free = 6
    sizes = np.arange(1, LOOKUP_CAP + 2)  # (blocks up to lookup's longest)
    added = np.array([kinked(6 + n) - kinked(6) for n in sizes])
    assert np.allclose(drafter._block_costs()[:len(sizes)], added)
    drafter.batch_free = 0  # (the same tokens, another request's: the whole step)
    assert np.allclose(drafter._block_costs()[:len(sizes)], [kinked(6 + n) for n in sizes])


def test_side_by_side_a_draft_model_that_cannot_beat_the_step_is_not_priced():
    """Alone on the CPU curve, a draft model at a sixth of a step per token pays at its best
    (a long block costs little more than a short one); beside a short request weighed 16
    tokens a step, no block it drafts makes up for lengthening that request's step."""
    world = World(0, 0, p_lookup=0.0, p_model=0.9)
    drafter = AutoDrafter(None, FakeModel(world))
    for n in range(1, 70):
        drafter.cost.observe(n, cpu_t(n))
    drafter.draft_token_s = 0.01
    assert drafter.model_can_pay(drafter._block_costs())
    drafter.batch_tokens, drafter.batch_yield = 2, 16.0
    assert not drafter.model_can_pay(drafter._block_costs())
