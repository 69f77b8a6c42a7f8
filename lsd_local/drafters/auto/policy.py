"""The auto drafter: each round, prompt lookup, the draft model or no draft at all, and how
many tokens, whichever maximises expected committed tokens per second under the online cost
and acceptance models of lsd_local.drafters.auto.estimators."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from time import perf_counter

import numpy as np

from ...config import (
    AUTO_DENSE_BLOCKS,
    AUTO_LONG_BLOCKS,
    COPY_RUN,
    MODEL_CAP,
    SamplerSettings,
)
from ..base import EMPTY_DRAFT, Draft, Drafter, DraftSteps, run_steps
from ..lookup import LookupDrafter
from . import calibration
from .context import AnswerContext, context_models
from .estimators import AcceptanceModel, CostModel, allowed_blocks, best_k
from .lookup_acceptance import RunAcceptanceModel, score_shadow

# Prompt lookup proposes after a 6..12-gram match. A match of the longest n-gram means a
# passage is being copied, and such proposals are mostly right where shorter matches depend on
# the workload (measured shares: docs/auto.md); the longer a copy has run, the likelier it
# goes on. So lookup acceptance is learned per run length (the proposal's Draft.run), in these
# buckets, from these beliefs: a copy is drafted whole from the first round (copying a
# function signature pays at once), a short match only once it has shown to be right. Chosen by
# replaying recorded answers (bench/replay_auto.py) on the dev and test splits; their scoring
# is free, so a wrong belief is corrected within a few proposals.
LOOKUP_PRIOR = 0.5
LONG_LOOKUP_PRIOR = 0.99
LONG_MATCH = COPY_RUN  # run length from which a match counts as a copy (with any max_ngram)
# run buckets (lower edges): one for every run from 48 on, where copies of code break about
# as rarely at any run (where an edit is), so that a few breaks at the long runs a copy has
# reached do not make the next runs look unsafe (docs/auto.md, "Where a match comes from")
RUN_EDGES = (0, 4, 8, 12, 16, 24, 32, 48)
# A match in past requests (the suffix index) is priced apart: a long one is often an answer
# asked for again, but near-duplicate requests share long runs and then part ways (measured:
# docs/drafting.md), so a long suffix match starts less trusted than a copy within the context.
SUFFIX_PRIOR = 0.5
# A pending proposal keeps the context's last tokens it was made after: the loop may ask a
# proposal after a grammar's forced tokens (at most forced.MAX_CAP) that are then rejected.
SHADOW_CONTEXT = 64
LONG_SUFFIX_PRIOR = 0.85
# A block past the dense sizes (AUTO_LONG_BLOCKS) is drafted only when its rate beats the best
# dense block's by this share. Acceptance is priced per token, as if a copy broke anywhere
# alike, where copies of an edited file break at the edits, and a long block that meets one
# costs ~35 steps on a steep CPU. Replayed, a margin helped six edits on the steepest curve
# only and cost HumanEval and code edits (docs/auto.md, "Long blocks only past a margin"):
# none by default; replays set it (auto:long_margin=X).
LONG_MARGIN = 0.0
MODEL_PRIOR = 0.7  # a draft model stops under p_min, so what it drafts is mostly right
EXPLORE_EVERY = 128  # rounds between forced small trials of an unused option
# rounds after which a draft model that cannot pay is priced again (costs move slowly, and
MODEL_RECHECK = 16  # pricing takes ~0.1 ms a round; most rounds of a chat draft nothing)
EXPLORE_K = 2
DRAFT_COST_DECAY = 0.9
PRIOR_DRAFT_SHARE = 0.25  # assumed draft-model cost per token vs a target step until measured
# A draft model that has not followed the conversation must first evaluate what it missed (the
# whole prompt, the first time). Batched, a token costs about this share of a drafting step;
# the bill is spread over this many rounds of expected further use.
CATCH_UP_SHARE = 0.25
CATCH_UP_ROUNDS = 64
# What an earlier process learned comes back with the weight of this many timings and
# acceptance tries in all (learned.py): enough to start right, little enough that
# this process's own evidence takes over within rounds if the machine or workload changed.
RESTORED_COST_WEIGHT = 16.0
RESTORED_TRIES = 50.0
# Lookup acceptance comes back with this many tries per level (all requests', each family's):
# copies break about once in a hundred tokens, which a few tries cannot tell (and this
# generation's own evidence still takes over within a few proposals: lookup_acceptance).
RESTORED_LOOKUP_TRIES = 500.0


@dataclass
class _Choice:
    source: str  # "lookup", "model" or "none"
    k: int
    rate: float


class AutoDrafter(Drafter):
    """Chooses drafter and K per round. `lookup` is a LookupDrafter or None, `model` a
    ModelDrafter (or MultiLevelDrafter) or None. With fixed_k, K is not adapted (only the
    drafter is chosen); lookup drafts are still cut to what is available."""

    name = "auto"

    def __init__(self, lookup: LookupDrafter | None,
                 model: Drafter | None = None,  # Model-, MultiLevel- or CrossVocabDrafter
                 fixed_k: int | None = None, explore_every: int = EXPLORE_EVERY, clock=perf_counter,
                 lookup_prior: float = LOOKUP_PRIOR,
                 long_lookup_prior: float = LONG_LOOKUP_PRIOR,
                 long_blocks: tuple[int, ...] = AUTO_LONG_BLOCKS,
                 dense_blocks: int = AUTO_DENSE_BLOCKS, token_bytes=None,
                 long_margin: float = LONG_MARGIN) -> None:
        self.clock = clock  # times the draft model (injectable for simulations)
        # the lookup draft lengths auto may choose (estimators.allowed_blocks)
        self.lookup_cap = max((dense_blocks, *long_blocks)) - 1
        self._blocks = (dense_blocks, np.asarray(long_blocks, np.int64))
        self.long_margin = long_margin
        self.lookup = lookup
        self.model = model
        self.fixed_k = fixed_k
        self.explore_every = explore_every
        self.cost = CostModel()
        # the answer where each proposal is made: which of the run models prices it
        # (token_bytes: the target vocabulary's token id -> text, None: not known)
        self.context = AnswerContext(token_bytes, LONG_MATCH)
        self.runs = {"lookup": RunAcceptanceModel(RUN_EDGES, LONG_MATCH, lookup_prior,
                                                  long_lookup_prior),
                     "suffix": RunAcceptanceModel(RUN_EDGES, LONG_MATCH, SUFFIX_PRIOR,
                                                  LONG_SUFFIX_PRIOR),
                     **context_models(RUN_EDGES, LONG_MATCH, lookup_prior,
                                     (lookup_prior, long_lookup_prior))}
        self.acceptance = {**self.runs, "model": AcceptanceModel(MODEL_CAP, prior=MODEL_PRIOR)}
        self.draft_token_s: float | None = None  # measured draft-model seconds per forward
        self._used_source = "none"  # drafter whose tokens the loop is verifying
        # "short"/"copy"/"suffix" -> [start, proposal int32[m], positions scored, run,
        # context]: one pending lookup proposal per kind, so that a copy met while a chance
        # match is scored is learned too; and the run model each is learned by
        self._shadows: dict[str, list] = {}
        self._shadow_models: dict[str, str] = {}
        self._last_tried, self.rounds = {"lookup": 0, "model": 0}, 0
        self._context: int | None = None  # tokens cached before this round's block
        self._model_paid, self._model_priced = True, 0  # model_can_pay last, in which round

    def propose(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                rng: np.random.Generator | None = None, grammar=None) -> Draft:
        """history: int32[n] committed tokens; k: the most tokens the loop allows."""
        return run_steps(self.propose_steps(history, k, sampler, rng, grammar))

    def propose_steps(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                      rng: np.random.Generator | None = None, grammar=None) -> DraftSteps:
        self.rounds += 1
        self._context = len(history) - 1  # (cached before this round's block)
        for key in list(self._shadows):
            self._resolve_shadow(key, history)
        if k <= 0:
            self._used_source = "none"
            return EMPTY_DRAFT
        proposal = (EMPTY_DRAFT if self.lookup is None
                    else self.lookup.propose(history, min(k, self.lookup_cap), grammar=grammar))
        run = proposal.run
        self.context.observe(history)
        priced_by = self.context.model_for(proposal.source, proposal.origin)
        self.context.follow(proposal.origin, run)
        kind = "suffix" if priced_by == "suffix" else "copy" if run >= LONG_MATCH else "short"
        choice = self._choose(history, len(proposal), k, run, priced_by)
        scored = proposal.tokens if proposal.renamed_at < 0 else \
            proposal.tokens[:proposal.renamed_at]
        if len(scored) and kind not in self._shadows:
            # Lookup acceptance is learned from whole proposals against what gets committed
            # (verified or not, cut or not): every position is scored at no target cost.
            # A short match still pending when a copy is found is that copy's beginning:
            # scoring both would count the same tokens twice. A rename spelled in is scored
            # up to where it starts: a rename the answer did not keep is dropped at once, so
            # its miss says nothing of the copies to come.
            if kind == "copy":
                self._shadows.pop("short", None)
            self._shadows[kind] = [len(history), scored.copy(), 0, run,
                                   history[-SHADOW_CONTEXT:].copy()]
            self._shadow_models[kind] = priced_by
        if choice.source == "lookup":
            draft = replace(proposal, tokens=proposal.tokens[:choice.k],
                            source=proposal.source or "lookup")  # ("suffix": past requests)
        else:
            draft = (yield from self._model_draft_steps(history, choice.k, sampler, rng,
                                                        grammar)) if choice.k else EMPTY_DRAFT
        self._used_source = choice.source if len(draft) else "none"
        if len(draft):
            self._last_tried[choice.source] = self.rounds
        return draft

    def learned_costs(self) -> dict:
        """What the cost models hold (JSON-able): t(n) per batch size, draft seconds per
        forward. Saved between processes by lsd_local.drafters.auto.learned."""
        weight, seconds, context = self.cost.counts()
        return {"weight": weight.tolist(), "seconds": seconds.tolist(),
                "context": context.tolist(),
                "per_query_context_s": self.cost.per_query_context_s,
                "draft_token_s": self.draft_token_s}

    def learned_acceptance(self) -> dict:
        """What the acceptance models hold (JSON-able), per kind of proposal."""
        model = self.acceptance["model"]
        return {**{name: runs.counts() for name, runs in self.runs.items()},
                "model": {"accepted": model.accepted.tolist(), "tried": model.tried.tolist()}}

    def restore(self, costs: object, acceptance: object) -> None:
        """Start from what an earlier process learned (as learned_costs/learned_acceptance
        gave it); parts that are not valid (another shape, damaged: saved_counts) are
        ignored."""
        if isinstance(costs, dict):
            self._restore_costs(costs)
        if not isinstance(acceptance, dict):
            return
        for name, runs in self.runs.items():
            runs.restore(acceptance.get(name), RESTORED_LOOKUP_TRIES)
        self.acceptance["model"].restore(acceptance.get("model"), RESTORED_TRIES)

    def _restore_costs(self, costs: dict) -> None:
        self.cost.restore(costs, RESTORED_COST_WEIGHT)
        draft_s = costs.get("draft_token_s")
        if isinstance(draft_s, (int, float)) and not isinstance(draft_s, bool) and \
                math.isfinite(draft_s) and draft_s > 0:
            self.draft_token_s = float(draft_s)

    def accept(self, n_drafted: int, n_accept: int, verify_seconds: float,
               grew_logits: bool = False) -> None:
        """Learn t(n) from every round and the draft model's acceptance from its rounds. A
        batch that grew the target's logits buffer pays a one-time cost (llama.cpp grows and
        clears it, faulting new pages; docs/auto.md): CostModel takes such a timing only as
        a stand-in for a size it has not measured. Tokens of others in the same decode (a
        grammar's forced tokens, other requests': batch_tokens) count in its size, not in
        an acceptance."""
        # (the decode scored this block and batch_tokens others: that size took that time;
        # after which context is known only when this round asked for a draft)
        if self._context is not None:
            self.cost.observe(n_drafted + 1 + self.batch_tokens, verify_seconds,
                              first=grew_logits, context=self._context)
            self._context = None
        if n_drafted <= 0:
            return
        if self._used_source == "model":  # lookup learns from its shadow (see propose)
            self.acceptance["model"].update(n_drafted, n_accept)
        used = {"lookup": self.lookup, "model": self.model}.get(self._used_source)
        if used is not None:  # the drafter whose tokens were verified hears the verdict
            used.accept(n_drafted, n_accept, verify_seconds, grew_logits)

    def _choose(self, history: np.ndarray, n_lookup: int, k: int, run: int,
                lookup_model: str = "lookup") -> _Choice:
        """The best option this round; run: the lookup proposal's copy run, priced by the
        run model `lookup_model` (context.AnswerContext.model_for)."""
        # nothing to draft with (a draft model that cannot pay is neither chosen nor explored)
        no_model = self.model is None or (
            not self._model_paid and self.rounds < self._model_priced + MODEL_RECHECK)
        if not n_lookup and no_model:
            return _Choice("none", 0, 0.0)
        t = self._block_costs()
        plain = _Choice("none", 0, (1.0 + self.batch_yield) / max(t[0], 1e-9))
        if not self.cost.observed:  # the first round: a plain step measures t(1)
            return plain
        options = [plain]
        catch_up_s = 0.0
        if n_lookup:
            k_max = min(n_lookup, k, self.lookup_cap)
            expected = self.acceptance[lookup_model].expected_accepted(run, k_max)
            options.append(self._option("lookup", expected, t, 0.0,
                                        allowed=allowed_blocks(k_max, *self._blocks,
                                                               self.batch_tokens)))
        model_ok = self._model_paid = self.model_can_pay(t)
        self._model_priced = self.rounds
        if model_ok:
            d = self.draft_token_s if self.draft_token_s is not None else \
                PRIOR_DRAFT_SHARE * t[0]
            catch_up_s = self.model.pending(history) * d * CATCH_UP_SHARE
            expected = self.acceptance["model"].expected_accepted(min(k, MODEL_CAP))
            options.append(self._option("model", expected, t, d, catch_up_s / CATCH_UP_ROUNDS))
        if self.fixed_k is not None:
            options = [o for o in options if o.k > 0] or [plain]
        best = max(options, key=lambda o: o.rate)
        return self._explore(best, n_lookup, k, catch_up_s if model_ok else math.inf,
                             float(t[0]))

    def _block_costs(self) -> np.ndarray:
        """float64[cap + 1]: predicted seconds of the decode with a block of 1, 2, ... tokens
        beside batch_tokens others, less what its free ones cost alone (a forced head's). Other
        requests' tokens are priced with what they commit (batch_yield): on a CPU where t(n)
        is not affine, a block that lifts the batch past a kernel switch can be nearly free,
        while one that doubles the step of a request with much to commit halves its speed."""
        t = self.cost.predict(np.arange(1, max(self.lookup_cap, MODEL_CAP) + 2) + self.batch_tokens,
                              self._context)
        return t if not self.batch_free else \
            np.maximum(t - self.cost.predict(self.batch_free, self._context), 1e-9)

    def model_can_pay(self, t: np.ndarray) -> bool:
        """Whether the draft model's best case, every drafted token accepted, beats plain
        decoding at some K under the predicted decode times t (float64: t[i] scores i + 1
        tokens) and its measured cost per token, what the others commit (batch_yield)
        counted on both sides; True while that cost is unknown."""
        if self.model is None:
            return False
        if self.draft_token_s is None:
            return True
        ks = np.arange(1, MODEL_CAP + 1)
        others = self.batch_yield
        best = (others + 1 + ks) / (t[ks] + (ks + 1) * self.draft_token_s)
        return bool(np.max(best) > (others + 1) / max(t[0], 1e-9))

    @property
    def needs_calibration(self) -> bool:
        """A draft model whose cost nothing has measured yet (calibration.measure_missing)."""
        return self.model is not None and self.draft_token_s is None

    @property
    def needs_slope(self) -> bool:
        """Calibrated, but not how t(n) grows with the context (the prompts were short)."""
        return self.model is not None and self.cost.per_query_context_s is None

    def use_calibration(self, measured: calibration.Calibration, timings: bool = True) -> None:
        """Take what calibration.measure_missing measured (on these models, maybe for
        another drafter: side by side, each sequence has its own, and the machine is the
        same); `timings=False`: its context slope only (this drafter has the rest)."""
        calibration.apply(self.cost, measured if timings else measured._replace(timings=()))
        if timings:
            self.draft_token_s = measured.draft_token_s

    def _option(self, source: str, expected: np.ndarray, t: np.ndarray, draft_s: float,
                catch_up: float = 0.0, allowed: np.ndarray | None = None) -> _Choice:
        """Best K for one drafter: expected float64[k_max + 1] = S(k) under its acceptance
        model, t float64[>= k_max + 1] predicted decode times; drafting costs draft_s per
        forward (k + 1 with the catch-up pass) plus catch_up per round; allowed: bool[k_max +
        1], the K it may choose (None: any). The rate counts what the others in the decode
        commit (batch_yield) beside this request's 1 + S(k)."""
        k_max = len(expected) - 1
        expected = expected + self.batch_yield
        if self.fixed_k is not None:  # (the longest allowed K up to it)
            k = min(k_max, self.fixed_k)
            k = k if allowed is None else int(np.flatnonzero(allowed[:k + 1])[-1])
            cost = t[k] + draft_s * (k + 1) + catch_up
            return _Choice(source, k, (1 + expected[k]) / max(cost, 1e-9))
        cost = t[:k_max + 1]
        if draft_s or catch_up:  # a lookup draft costs nothing to make: t(k + 1) alone
            ks = np.arange(k_max + 1)
            cost = cost + np.where(ks > 0, draft_s * (ks + 1) + catch_up, 0.0)
        if allowed is not None:  # (K = 0 always is)
            cost = np.where(allowed, cost, np.inf)
        k, rate = best_k(expected, cost)
        if k >= self._blocks[0] and self.long_margin:  # (a long block: beat the dense by it)
            dense_k, dense_rate = best_k(expected[:self._blocks[0]], cost[:self._blocks[0]])
            if rate < dense_rate * (1.0 + self.long_margin):
                k, rate = dense_k, dense_rate
        return _Choice(source if k else "none", k, rate)

    def _explore(self, best: _Choice, n_lookup: int, k: int, catch_up_s: float,
                 t1: float) -> _Choice:
        """Every explore_every rounds, give an unused option a short trial, so that the
        models notice when costs or acceptance change (another machine, another workload).
        The draft model only while its catch-up costs under 2 % of the time since its last
        trial: on a CPU, re-reading hundreds of tokens to try it costs more than it can win."""
        for source in ("model", "lookup"):
            since = self.rounds - self._last_tried[source]
            available = (self.model is not None and catch_up_s <= 0.02 * since * t1
                         if source == "model" else n_lookup > 0)
            if available and best.source != source and since >= self.explore_every:
                return _Choice(source, min(EXPLORE_K, k, n_lookup if source == "lookup"
                                           else MODEL_CAP), 0.0)
        return best

    def _model_draft_steps(self, history: np.ndarray, k: int, sampler, rng, grammar
                           ) -> DraftSteps:
        """Draft with the model; learn its time per forward when it was nearly in sync (a
        long catch-up pass would inflate it) and alone in the step (side by side, batched
        with others' decodes, the time spans their drafting and catch-up: batch_tokens)."""
        learn = self.model.pending(history) <= 4 and not self.batch_tokens
        forwards = self.model.n_forward
        start = self.clock()
        draft = yield from self.model.propose_steps(history, k, sampler, rng, grammar)
        per_forward = (self.clock() - start) / max(1, self.model.n_forward - forwards)
        if learn or self.draft_token_s is None:
            self.draft_token_s = per_forward if self.draft_token_s is None else (
                DRAFT_COST_DECAY * self.draft_token_s + (1 - DRAFT_COST_DECAY) * per_forward)
        return replace(draft, source=draft.source or "model")

    def _resolve_shadow(self, kind: str, history: np.ndarray) -> None:
        """Score the pending lookup proposal of kind `kind` (lookup_acceptance.score_shadow)
        into the run model that priced it; it stays pending until a mismatch or its whole
        length has been committed."""
        if score_shadow(self.runs[self._shadow_models[kind]], self._shadows[kind], history):
            del self._shadows[kind]

    def begin(self, family: str | None = None, n_prompt: int | None = None) -> None:
        """A new generation starts: a pending lookup proposal belongs to the old one.
        family: what kind of request it is (learned.request_family), so that lookup
        acceptance is also learned per kind; n_prompt: where its answer starts."""
        self._shadows.clear()
        self.context.begin(n_prompt)
        for runs in self.runs.values():
            runs.begin(family)
        for drafter in (self.lookup, self.model):
            if drafter is not None:
                drafter.begin(None, n_prompt)

    def end(self, history: np.ndarray, n_prompt: int | None = None) -> None:
        """The request ended: the drafters it delegates to hear it too."""
        for drafter in (self.lookup, self.model):
            if drafter is not None:
                drafter.end(history, n_prompt)

    def use_suffix_index(self, index) -> None:
        if self.lookup is not None:
            self.lookup.use_suffix_index(index)

    def reset(self) -> None:
        """A new conversation: keep what was learned about costs and acceptance."""
        self._shadows.clear()
        if self.model is not None:
            self.model.reset()

