"""How likely a prompt-lookup draft is to be accepted, position by position: by how long the
copy behind it has run, by the kind of request, and from what the current generation has
shown so far. Used by the auto drafter (lsd_local.drafters.auto.policy) to choose K; pure numpy.

- The run: a copy that has gone on for a while (a lookup Draft's run) is likely to go on;
  one that just started often breaks (measured on recorded answers: docs/auto.md). A draft
  made after a run of r tokens predicts, at position j, the token after a run of r + j - 1,
  so acceptance is learned per run bucket, not per draft position: a per-position model
  averages fresh and long-running copies and underrates the latter, which then take more
  rounds than a fixed long K. Where acceptance does not depend on the run, every bucket
  learns the same rate and the choice equals a per-position model's.
- The kind of request: code re-emitted whole breaks almost never, a summary quoting phrases
  after a few tokens, at the same runs; a process (or learned.json) serving both
  carries the last one's habits into the next. So rates are also learned per request family
  (the engine names it by its instruction: learned.request_family), shrunk toward
  the rates of all requests; a family not seen before starts from those.
- The generation: its own evidence, shrunk toward its family's rates with the weight of a
  few tries, so that a request unlike its family shows within a few proposals.
The all-requests and family levels forget by LONG_TERM_DECAY per update (about the last 200
scored proposals weigh) and come back from the learned file with up to 500 tries each
(lsd_local.drafters.auto.policy): a copy breaks about once in a hundred tokens, which takes many
tries to tell.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from .estimators import saved_counts

LONG_TERM_DECAY = 0.995  # weight of older long-term evidence, per update
BUCKET_PRIOR_TRIES = 2.0  # an untested bucket takes its group's pooled rate with this weight
FAMILY_PRIOR_TRIES = 4.0  # a family's evidence shrinks toward all requests' with this
REQUEST_PRIOR_TRIES = 8.0  # the generation's evidence shrinks toward its family's with this
MAX_FAMILIES = 32  # request families remembered (the least recently used go first)
RUN_TABLE = 512  # runs below this find their bucket in a table (runs are <= RUN_CAP + 64)
REQUEST_DECAY = 0.995  # weight of a generation's older evidence, per update (long ones)


class RunAcceptanceModel:
    """Lookup acceptance per run bucket (edges int[b]: bucket i holds edges[i] <= run <
    edges[i+1], the last all longer runs). Buckets below `long_from` (a short n-gram match)
    and the others form two groups that start from their own beliefs (priors) and within
    which an untested bucket takes the group's pooled rate."""

    def __init__(self, edges: Sequence[int], long_from: int, prior_short: float,
                 prior_long: float) -> None:
        self.edges = np.asarray(edges, np.int64)  # int64[b]: ascending from 0
        if len(self.edges) == 0 or self.edges[0] != 0 or (np.diff(self.edges) <= 0).any():
            raise ValueError(f"run bucket edges must ascend from 0, not {list(edges)}")
        size = len(self.edges)
        self.n_short = int(np.searchsorted(self.edges, long_from))  # buckets [0, n_short)
        self._group_priors = np.array([prior_short, prior_long])  # float64[2]
        self._upper = np.append(self.edges[1:], np.iinfo(np.int64).max)  # int64[b]
        self._bucket_of = self.buckets_slow(0, RUN_TABLE)  # int64[RUN_TABLE]: run -> bucket
        # float64[RUN_TABLE + 1, b]: row r counts the runs 0..r-1 per bucket, so the runs
        # first..first+n-1 of an update count row first+n minus row first
        self._below = np.vstack([np.zeros(size), np.cumsum(
            np.eye(size)[self._bucket_of], axis=0)])
        # evidence in one array so that an update is two operations: [level, (accepts,
        # tries), b] for all requests (long-term), the current family, this generation
        self._levels = np.zeros((3, 2, size))
        self._decay = np.array([LONG_TERM_DECAY, LONG_TERM_DECAY, REQUEST_DECAY])[:, None]
        # family -> (accepts, tries) float64[b] each, decayed long-term; the current one
        # (last) is a view of its level
        self.families: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.family: str | None = None  # the current generation's family (None: unnamed)
        self._rates: np.ndarray | None = None  # float64[b], cached until the evidence changes

    accepted = property(lambda self: self._levels[0, 0])  # float64[b]: all requests
    tried = property(lambda self: self._levels[0, 1])
    request_accepted = property(lambda self: self._levels[2, 0])  # this generation
    request_tried = property(lambda self: self._levels[2, 1])

    def buckets(self, run: int, n: int) -> np.ndarray:
        """int64[n]: the buckets of runs run, run + 1, .., run + n - 1 (a run is >= 0)."""
        run = max(run, 0)
        if run + n <= RUN_TABLE:
            return self._bucket_of[run:run + n]
        return self.buckets_slow(run, n)

    def buckets_slow(self, run: int, n: int) -> np.ndarray:
        """buckets() by search (the definition; runs beyond the table)."""
        return np.searchsorted(self.edges, np.arange(run, run + n), side="right") - 1

    def update(self, run: int, n_drafted: int, n_accept: int, offset: int = 0) -> None:
        """Of n_drafted tokens at positions offset+1.. of a draft made after a run of `run`,
        the first n_accept were accepted and the next one (if drafted) rejected. offset > 0
        continues a draft whose first `offset` positions were already scored as accepted."""
        if n_drafted <= 0:
            return
        n_accept = min(n_accept, n_drafted)
        first = max(run + offset, 0)  # the run before the first scored position
        self._levels *= self._decay[:, :, None]
        self._levels[:, 0] += self._counts(first, n_accept)
        self._levels[:, 1] += self._counts(first, min(n_accept + 1, n_drafted))
        self._rates = None

    def _counts(self, first: int, n: int) -> np.ndarray:
        """float64[b]: how many of the runs first..first+n-1 fall in each bucket."""
        if first + n <= RUN_TABLE:
            return self._below[first + n] - self._below[first]
        # the overlap of that interval with each bucket's
        return np.maximum(np.minimum(first + n, self._upper) -
                          np.maximum(first, self.edges), 0).astype(np.float64)

    def rates(self) -> np.ndarray:
        """float64[b]: acceptance of the token after a run in each bucket, for this
        generation (cached until the evidence changes)."""
        if self._rates is None:
            accepted, tried = self._levels[0]
            sums = np.add.reduceat(self._levels[0], [0, self.n_short], axis=1) \
                if 0 < self.n_short < len(self.edges) else None
            if sums is None:  # one group only (every bucket short, or every one long)
                prior = self._group_priors[int(self.n_short == 0)]
                pooled = (accepted.sum() + 2.0 * prior) / (tried.sum() + 2.0)
            else:  # an untested bucket takes its group's pooled rate
                group = (sums[0] + 2.0 * self._group_priors) / (sums[1] + 2.0)
                pooled = np.repeat(group, [self.n_short, len(self.edges) - self.n_short])
            rates = (accepted + BUCKET_PRIOR_TRIES * pooled) / (tried + BUCKET_PRIOR_TRIES)
            if self.family is not None:
                family_accepted, family_tried = self._levels[1]
                rates = (family_accepted + FAMILY_PRIOR_TRIES * rates) / \
                    (family_tried + FAMILY_PRIOR_TRIES)
            request_accepted, request_tried = self._levels[2]
            self._rates = (request_accepted + REQUEST_PRIOR_TRIES * rates) / \
                (request_tried + REQUEST_PRIOR_TRIES)
        return self._rates

    def probabilities(self, run: int, k: int) -> np.ndarray:
        """float64[k]: p_j, position j of a draft made after a run of `run` accepted given
        the ones before it were."""
        return self.rates()[self.buckets(run, k)]

    def expected_accepted(self, run: int, k_max: int) -> np.ndarray:
        """float64[k_max + 1]: S(k) for k = 0..k_max of a draft made after a run of `run`."""
        reach = np.cumprod(self.probabilities(run, k_max))
        return np.concatenate(([0.0], np.cumsum(reach)))

    def begin(self, family: str | None = None) -> None:
        """A new generation of request family `family` (None: unnamed): its own evidence
        starts empty; the long-term evidence (all requests', each family's) stays."""
        if self.family is not None:  # keep the family's level, not views of it
            self.families[self.family] = (self._levels[1, 0].copy(), self._levels[1, 1].copy())
        self.family = family
        self._levels[1:] = 0.0
        if family is not None:
            saved = self.families.get(family)
            if saved is not None:
                self._levels[1, 0], self._levels[1, 1] = saved
            self.families[family] = (self._levels[1, 0], self._levels[1, 1])
            self.families.move_to_end(family)
            while len(self.families) > MAX_FAMILIES:
                self.families.popitem(last=False)
        self._rates = None

    def counts(self) -> dict:
        """The long-term evidence (JSON-able): all requests', and each family's (least
        recently used first)."""
        return {"accepted": self.accepted.tolist(), "tried": self.tried.tolist(),
                "families": {name: {"accepted": accepted.tolist(), "tried": tried.tolist()}
                             for name, (accepted, tried) in self.families.items()}}

    def restore(self, saved: object, max_tries: float) -> None:
        """Start from `counts()` of an earlier process, each level scaled down to at most
        max_tries tries in all; a level that is not valid (saved_counts) is ignored."""
        if not isinstance(saved, dict):
            return
        level = self._checked(saved, max_tries)
        if level is not None:
            self._levels[0, 0], self._levels[0, 1] = level
        families = saved.get("families")
        for name, entry in (families.items() if isinstance(families, dict) else ()):
            level = self._checked(entry, max_tries)
            if level is None or not isinstance(name, str):
                continue
            if name == self.family:  # the current family's level is live
                self._levels[1, 0], self._levels[1, 1] = level
                level = (self._levels[1, 0], self._levels[1, 1])
            self.families[name] = level
            self.families.move_to_end(name)
        if self.family is not None:  # the current one stays
            self.families.move_to_end(self.family)
        while len(self.families) > MAX_FAMILIES:
            self.families.popitem(last=False)
        self._rates = None

    def _checked(self, saved: object, max_tries: float) -> tuple[np.ndarray, np.ndarray] | None:
        """(accepts, tries) float64[b] from a saved level, scaled to at most max_tries tries,
        or None when it is not a valid level of this model."""
        level = saved_counts(saved, self.accepted.shape)
        if level is None:
            return None
        accepted, tried = level
        scale = min(1.0, max_tries / max(float(tried.sum()), 1e-9))
        return np.minimum(accepted, tried) * scale, tried * scale


def score_shadow(model: RunAcceptanceModel, shadow: list, history: np.ndarray) -> bool:
    """Score a pending lookup proposal (the auto drafter's shadow: [start, tokens int32[m],
    positions scored, run, the int32 context it was made after]) against the tokens
    `history` (int32[n]) committed since it was made: positions up to the first mismatch were
    right, that one wrong. Scores the newly committed positions each round, so that plain
    steps through a copied passage still score deep positions; returns whether it is done (a
    mismatch, its whole length committed, or made after tokens that were not committed)."""
    start, tokens, scored, run, before = shadow
    seen = history[start - len(before):start]
    if not np.array_equal(seen, before[:len(seen)]):
        # it was made after tokens that were not committed (a grammar's forced head,
        # then rejected): it continued another context, nothing to learn from it
        return True
    available = history[start + scored:start + len(tokens)]
    fresh = tokens[scored:scored + len(available)]
    mismatch = np.flatnonzero(available != fresh)
    if len(mismatch):
        model.update(run, len(tokens) - scored, int(mismatch[0]), scored)
        return True
    model.update(run, len(available), len(available), scored)
    shadow[2] = scored + len(available)
    return shadow[2] >= len(tokens)
