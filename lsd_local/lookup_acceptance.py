"""How likely a prompt-lookup draft is to be accepted, position by position: by how long the
copy behind it has run, by the kind of request, and from what the current generation has
shown so far. Used by the auto drafter (lsd_local.drafters.auto) to choose K; pure numpy.

- The run: a copy that has gone on for a while (LookupDrafter.last_run) is likely to go on;
  one that just started often breaks (measured on recorded answers: docs/auto.md). A draft
  made after a run of r tokens predicts, at position j, the token after a run of r + j - 1,
  so acceptance is learned per run bucket, not per draft position: a per-position model
  averages fresh and long-running copies and underrates the latter, which then take more
  rounds than a fixed long K. Where acceptance does not depend on the run, every bucket
  learns the same rate and the choice equals a per-position model's.
- The kind of request: code re-emitted whole breaks almost never, a summary quoting phrases
  after a few tokens, at the same runs; a process (or learned-state file) serving both
  carries the last one's habits into the next. So rates are also learned per request family
  (the engine names it by its instruction: lsd_local.learned.request_family), shrunk toward
  the rates of all requests; a family not seen before starts from those.
- The generation: its own evidence, shrunk toward its family's rates with the weight of a
  few tries, so that a request unlike its family shows within a few proposals. The long-term
  rates keep a long memory so that they are estimated well (a copy breaks about once in a
  hundred tokens).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

LONG_TERM_DECAY = 0.995  # weight of older long-term evidence, per update
BUCKET_PRIOR_TRIES = 2.0  # an untested bucket takes its group's pooled rate with this weight
FAMILY_PRIOR_TRIES = 4.0  # a family's evidence shrinks toward all requests' with this
REQUEST_PRIOR_TRIES = 8.0  # the generation's evidence shrinks toward its family's with this
MAX_FAMILIES = 32  # request families remembered (the least recently used go first)
REQUEST_DECAY = 0.995  # weight of a generation's older evidence, per update (long ones)


class RunAcceptanceModel:
    """Lookup acceptance per run bucket (edges int[b]: bucket i holds edges[i] <= run <
    edges[i+1], the last all longer runs). Buckets below `long_from` (a short n-gram match)
    and the others form two groups that start from their own beliefs (priors) and within
    which an untested bucket takes the group's pooled rate."""

    def __init__(self, edges: Sequence[int], long_from: int, prior_short: float,
                 prior_long: float) -> None:
        self.edges = np.asarray(edges, np.int64)
        self.long = self.edges >= long_from  # bool[b]: the bucket's group
        self.prior = np.where(self.long, prior_long, prior_short)  # float64[b]
        size = len(self.edges)
        self.accepted = np.zeros(size)  # float64[b]: decayed long-term accepts, all requests
        self.tried = np.zeros(size)  # float64[b]: decayed long-term tries, all requests
        # family -> (accepts, tries) float64[b] each, decayed long-term; the current one last
        self.families: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.family: str | None = None  # the current generation's family (None: unnamed)
        self.request_accepted = np.zeros(size)  # float64[b]: this generation's evidence
        self.request_tried = np.zeros(size)
        self._rates: np.ndarray | None = None  # float64[b], cached until the evidence changes

    def buckets(self, run: int, n: int) -> np.ndarray:
        """int64[n]: the buckets of runs run, run + 1, .., run + n - 1."""
        return np.searchsorted(self.edges, np.arange(run, run + n), side="right") - 1

    def update(self, run: int, n_drafted: int, n_accept: int, offset: int = 0) -> None:
        """Of n_drafted tokens at positions offset+1.. of a draft made after a run of `run`,
        the first n_accept were accepted and the next one (if drafted) rejected. offset > 0
        continues a draft whose first `offset` positions were already scored as accepted."""
        if n_drafted <= 0:
            return
        n_accept = min(n_accept, n_drafted)
        buckets = self.buckets(run + offset, min(n_accept + 1, n_drafted))
        tried = np.bincount(buckets, minlength=len(self.edges))
        accepted = np.bincount(buckets[:n_accept], minlength=len(self.edges))
        levels = [(self.accepted, self.tried, LONG_TERM_DECAY),
                  (self.request_accepted, self.request_tried, REQUEST_DECAY)]
        if self.family is not None:
            levels.append((*self.families[self.family], LONG_TERM_DECAY))
        for level_accepted, level_tried, decay in levels:
            level_accepted *= decay
            level_accepted += accepted
            level_tried *= decay
            level_tried += tried
        self._rates = None

    def rates(self) -> np.ndarray:
        """float64[b]: acceptance of the token after a run in each bucket, for this
        generation (cached until the evidence changes)."""
        if self._rates is None:
            pooled = np.empty_like(self.tried)
            for group in (self.long, ~self.long):
                if group.any():
                    prior = self.prior[group][0]
                    pooled[group] = (self.accepted[group].sum() + 2.0 * prior) / \
                        (self.tried[group].sum() + 2.0)
            rates = (self.accepted + BUCKET_PRIOR_TRIES * pooled) / \
                (self.tried + BUCKET_PRIOR_TRIES)
            if self.family is not None:
                family_accepted, family_tried = self.families[self.family]
                rates = (family_accepted + FAMILY_PRIOR_TRIES * rates) / \
                    (family_tried + FAMILY_PRIOR_TRIES)
            self._rates = (self.request_accepted + REQUEST_PRIOR_TRIES * rates) / \
                (self.request_tried + REQUEST_PRIOR_TRIES)
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
        self.family = family
        if family is not None:
            if family not in self.families:
                size = len(self.edges)
                self.families[family] = (np.zeros(size), np.zeros(size))
            self.families.move_to_end(family)
            while len(self.families) > MAX_FAMILIES:
                self.families.popitem(last=False)
        self.request_accepted[:] = 0.0
        self.request_tried[:] = 0.0
        self._rates = None

    def state(self) -> dict:
        """The long-term evidence (JSON-able): all requests', and each family's (least
        recently used first)."""
        return {"accepted": self.accepted.tolist(), "tried": self.tried.tolist(),
                "families": {name: {"accepted": accepted.tolist(), "tried": tried.tolist()}
                             for name, (accepted, tried) in self.families.items()}}

    def restore(self, saved: dict, max_tries: float) -> None:
        """Start from `state()` of an earlier process, each level scaled down to at most
        max_tries tries in all; a level of another shape, or with negative or non-finite
        counts, is ignored."""
        level = self._checked(saved, max_tries)
        if level is not None:
            self.accepted, self.tried = level
        families = saved.get("families")
        for name, entry in (families.items() if isinstance(families, dict) else ()):
            level = self._checked(entry, max_tries)
            if level is not None and isinstance(name, str):
                self.families[name] = level
                self.families.move_to_end(name)
        while len(self.families) > MAX_FAMILIES:
            self.families.popitem(last=False)
        if self.family is not None and self.family not in self.families:
            self.family = None
        self._rates = None

    def _checked(self, saved, max_tries: float) -> tuple[np.ndarray, np.ndarray] | None:
        """(accepts, tries) float64[b] from a saved level, scaled to at most max_tries tries,
        or None when it is not a valid level of this model."""
        if not isinstance(saved, dict):
            return None
        try:
            accepted = np.asarray(saved.get("accepted", ()), np.float64)
            tried = np.asarray(saved.get("tried", ()), np.float64)
        except (TypeError, ValueError):
            return None
        if accepted.shape != self.accepted.shape or tried.shape != self.tried.shape or \
                not (np.isfinite(accepted).all() and np.isfinite(tried).all()) or \
                (accepted < 0).any() or (tried < 0).any():
            return None
        scale = min(1.0, max_tries / max(float(tried.sum()), 1e-9))
        return np.minimum(accepted, tried) * scale, tried * scale
