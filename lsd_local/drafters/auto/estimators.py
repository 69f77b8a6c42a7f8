"""What speculation costs and yields: the one home of t(n), the target's time to score n
tokens. `CostModel` learns it online (the auto drafter), `CostCurve` holds a measured one (the
replay, the bench's cost report), `measure_decode_times` is the one timing harness; with
`AcceptanceModel` and `best_k` they choose the K that maximises committed tokens per second.

A round that drafts k tokens commits 1 + S(k) tokens on average, where S(k) = sum over j <= k
of P(the first j draft tokens are accepted) = sum_j prod_{i <= j} p_i with p_i the acceptance
probability of position i given that positions before it were accepted. It costs
T(k + 1) + D(k): the target scoring k + 1 tokens and the drafter making k. K = 0 is a plain
decoding step (1 token in T(1)). Pure numpy/python: no llama.cpp here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter

import numpy as np

# Until two batch sizes have been seen, assume scoring n tokens costs t(1) * (1 + (n-1)/2):
# optimistic for a CPU (≈ 0.65 per extra token at n <= 9, 0.4 at 33 on a 2-core VM), so that
# speculation gets tried and measured; on a GPU the truth is cheaper still.
PRIOR_SLOPE = 0.5
COST_DECAY = 0.995  # weight of every older timing, per new observation of any size
STALE_WEIGHT = 0.05  # a size whose decayed weight fell below this counts as unmeasured
ACCEPT_DECAY = 0.98  # weight of older acceptance evidence, per update
# a size timed after a longer context is predicted after a shorter one at least this share of
# its timing; a saved context slope above this (seconds per scored token per cached one: 100x
# a 2-core CPU's) is damage, not a measurement
MIN_MOVED_SHARE = 0.5
MAX_CONTEXT_SLOPE_S = 3e-4
# Each position's estimate is shrunk toward the pooled acceptance of all positions with the
# weight of this many observations, so that untested (longer) positions inherit what the
# drafter shows elsewhere instead of a fixed prior; with no evidence at all p = the prior.
PRIOR_STRENGTH = 2.0
# time_blocks' progress: (pass index, 0 the untimed warm-up; that pass's seconds)
PassCallback = Callable[[int, float], None]


class CostModel:
    """t(n), the target's time to score n tokens, learned online per batch size.

    Each batch size keeps an exponentially weighted mean of its timings, so the curve follows
    the machine (another process taking the CPU, thermal limits); a size not seen for ~600
    rounds is forgotten and predicted afresh. Between measured sizes it
    is interpolated linearly. Beyond the largest measured size it is extrapolated with half
    the slope of the last measured segment: optimistic on purpose (per-token cost falls with
    batch size on CPUs and is nearly flat on GPUs), so that longer drafts get tried and their
    true cost measured instead of being ruled out by a guess. With one size measured, the slope
    is PRIOR_SLOPE * t(1) per token.

    Each timing is kept with its context length (the tokens cached before the block): every
    scored token attends to all of them, so t(n) grows by n * per_query_context_s per cached
    token (on 2 CPU cores 3 us: t(32) is 298 ms after 300 tokens, 406 ms after 1500, where
    t(1) grows from 32 to 35 ms). Given that slope (calibration measures it), a size measured
    at one context is predicted at another; without it (None) contexts are not told apart."""

    def __init__(self, max_n: int = 128, decay: float = COST_DECAY,
                 prior_slope: float = PRIOR_SLOPE) -> None:
        self.decay = decay
        self.prior_slope = prior_slope
        # float64[3, max_n + 1], index n: weight, weighted sums of timings and of their
        # context lengths (decayed together: one operation per round)
        self._sums = np.zeros((3, max_n + 1))
        # the same for a timing that paid a one-time cost (see observe), decayed alike; it
        # stands in for its size only while nothing else is known (weight 0 or a decayed 1)
        self._first = np.zeros((3, max_n + 1))
        self._any_first = False  # whether _first holds anything (saves work per round)
        self.per_query_context_s: float | None = None  # seconds per scored token per cached one

    _weight = property(lambda self: self._sums[0])  # float64[max_n + 1]

    @property
    def observed(self) -> bool:
        return bool(self._any_first or self._weight.any())

    def observe(self, n: int, seconds: float, first: bool = False, context: int = 0) -> None:
        """One timing of a batch of n after `context` cached tokens. `first`: a batch that
        paid a one-time cost (more logit rows than any before it: llama.cpp's logits buffer
        grew into new pages): it is ignored when n is known, and otherwise stands in for n
        until a later timing of n."""
        if not 1 <= n < len(self._weight) or not math.isfinite(seconds) or seconds <= 0:
            return
        self._sums *= self.decay
        if self._any_first:
            self._first *= self.decay
        if first:
            if not self.knows(n):
                self._first[:, n] = (1.0, seconds, max(context, 0))
                self._any_first = True
            return
        self._sums[:, n] += (1.0, seconds, max(context, 0))
        if self._any_first and self._first[0, n]:
            self._first[:, n] = 0.0
            self._any_first = bool(self._first[0].any())

    def restore(self, saved: object, max_weight: float) -> bool:
        """Start from counts an earlier process saved ({"weight", "seconds", "context"} as
        `counts` gave them, and "per_query_context_s"), scaled to at most max_weight timings
        in all: the means come back, and this process's own timings take over within rounds
        when the machine changed. Counts of another shape, damaged, or saved before contexts
        were kept are ignored (False)."""
        level = saved_counts(saved, self._weight.shape, ("weight", "seconds", "context"))
        if level is None:
            return False
        weight = level[0]
        scale = min(1.0, max_weight / max(weight.sum(), 1e-9))
        self._sums[:] = np.stack(level) * scale
        slope = saved.get("per_query_context_s")
        if isinstance(slope, (int, float)) and not isinstance(slope, bool) and \
                0 <= slope <= MAX_CONTEXT_SLOPE_S:
            self.per_query_context_s = float(slope)
        return True

    def knows(self, n: int) -> bool:
        """Whether batch size n has a current measured mean (not forgotten)."""
        return 1 <= n < len(self._weight) and bool(self._weight[n] > STALE_WEIGHT)

    def counts(self) -> np.ndarray:
        """float64[3, max_n + 1]: (weight, weighted seconds, weighted context) per size n,
        a first timing standing in where nothing else is (what is saved)."""
        if not self._any_first:
            return self._sums
        standing_in = (self._sums[0] <= STALE_WEIGHT) & (self._first[0] > STALE_WEIGHT)
        return np.where(standing_in, self._first, self._sums)

    def measured(self, context: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(sizes int[m], mean seconds float64[m]) of the batch sizes seen; after `context`
        cached tokens when given and the context slope is known, else as timed."""
        weight, seconds, contexts = self.counts()
        sizes = np.flatnonzero(weight > STALE_WEIGHT)
        times = seconds[sizes] / weight[sizes]
        if context is not None and self.per_query_context_s:
            moved = context - contexts[sizes] / weight[sizes]
            # (a slope measured too steep must not price blocks at nothing after a shorter
            # context: attention is a part of a step, never all of it)
            times = np.maximum(times + self.per_query_context_s * sizes * moved,
                               MIN_MOVED_SHARE * times)
        return sizes, times

    def predict(self, n: int | np.ndarray, context: int | None = None) -> np.ndarray:
        """Predicted seconds for batch size(s) n after `context` cached tokens (None: as
        timed; 0.0 before any observation)."""
        n = np.asarray(n, dtype=np.float64)
        sizes, times = self.measured(context)
        if len(sizes) == 0:
            return np.zeros_like(n)
        if len(sizes) == 1:
            slope = self.prior_slope * times[0] / sizes[0]
        else:
            slope = 0.5 * max(0.0, (times[-1] - times[-2]) / (sizes[-1] - sizes[-2]))
        # np.interp holds the end values outside the measured sizes: add the slope beyond
        # the largest, scale below the smallest (few numpy calls: this runs every round)
        predicted = np.interp(n, sizes, times) + slope * np.maximum(n - sizes[-1], 0.0)
        if (n < sizes[0]).any():
            predicted = np.where(n < sizes[0], times[0] * n / sizes[0], predicted)
        return predicted


class AcceptanceModel:
    """Per-position conditional acceptance p_i with exponential forgetting, shrunk toward
    the pooled acceptance of all positions."""

    def __init__(self, max_k: int, decay: float = ACCEPT_DECAY, prior: float = 0.5) -> None:
        self.decay = decay
        self.prior = prior  # acceptance believed before any evidence
        self.accepted = np.zeros(max_k)  # float64[max_k]: decayed count of accepts at i
        self.tried = np.zeros(max_k)  # float64[max_k]: decayed count of tries at i

    def restore(self, saved: object, max_tries: float) -> None:
        """Start from counts an earlier process saved ({"accepted": ..., "tried": ...}),
        scaled to at most max_tries tries in all; damaged or other-shaped counts are
        ignored."""
        level = saved_counts(saved, self.tried.shape)
        if level is not None:
            accepted, tried = level
            scale = min(1.0, max_tries / max(tried.sum(), 1e-9))
            self.accepted[:] = np.minimum(accepted, tried) * scale
            self.tried[:] = tried * scale

    def update(self, n_drafted: int, n_accept: int, offset: int = 0) -> None:
        """Of n_drafted tokens at positions offset+1.., the first n_accept were accepted and
        the next one (if drafted) rejected; later positions untested. offset > 0 continues a
        draft whose first `offset` positions were already scored as accepted."""
        end = min(offset + n_drafted, len(self.tried))
        if end <= offset:
            return
        self.accepted *= self.decay
        self.tried *= self.decay
        accepted_end = min(offset + n_accept, end)
        self.accepted[offset:accepted_end] += 1.0
        self.tried[offset:min(accepted_end + 1, end)] += 1.0

    def probabilities(self) -> np.ndarray:
        """float64[max_k]: p_i, position i + 1 accepted given the ones before it were."""
        tried = self.tried.sum()
        pooled = (self.accepted.sum() + 2.0 * self.prior) / (tried + 2.0)
        return (self.accepted + PRIOR_STRENGTH * pooled) / (self.tried + PRIOR_STRENGTH)

    def expected_accepted(self, k_max: int) -> np.ndarray:
        """float64[k_max + 1]: S(k) for k = 0..k_max."""
        reach = np.cumprod(self.probabilities()[:k_max])
        return np.concatenate(([0.0], np.cumsum(reach)))


def saved_counts(saved: object, shape: tuple[int, ...], names: tuple[str, ...] = (
        "accepted", "tried")) -> tuple[np.ndarray, ...] | None:
    """Float64 arrays of `shape` read from a saved JSON object's fields `names`, or None
    when the object or a field is missing, of another shape, not numbers, negative or not
    finite: a damaged or hand-edited learned.json must never stop a start."""
    if not isinstance(saved, dict):
        return None
    try:
        arrays = tuple(np.asarray(saved.get(name, ()), np.float64) for name in names)
    except (TypeError, ValueError, OverflowError):  # strings, ragged lists, 10**400
        return None
    if any(a.shape != shape or not np.isfinite(a).all() or (a < 0).any() for a in arrays):
        return None
    return arrays


def best_k(expected: np.ndarray, round_seconds: np.ndarray) -> tuple[int, float]:
    """expected float64[K+1] = S(k), round_seconds float64[K+1] = T(k+1) + D(k) for k = 0..K.
    Returns (k, committed tokens per second) maximising (1 + S(k)) / cost(k)."""
    rates = (1.0 + expected) / np.maximum(round_seconds, 1e-9)
    k = int(np.argmax(rates))
    return k, float(rates[k])


def allowed_blocks(k_max: int, dense: int, long_blocks: np.ndarray, others: int = 0
                   ) -> np.ndarray:
    """bool[k_max + 1], index K: whether a draft of K tokens may be chosen: blocks (K + 1) of
    any size up to `dense`, past it only those whose decode, with `others` tokens of other
    requests or a grammar's in it, is one of `long_blocks` (int64[m]). A CPU's t(n) has steps
    (at multiples of 16 on the VMs measured), and a size between the measured ones is dearer
    than a line through them prices it: auto drafts past `dense` only in measured sizes."""
    ks = np.arange(k_max + 1)
    return (ks < dense) | np.isin(ks + 1 + others, long_blocks)


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a round drafting k commits when each draft token is accepted with probability
    `acceptance`, left to right: 1 + S(k) = (1 - a^(k+1)) / (1 - a)."""
    if acceptance >= 1.0:
        return k + 1.0
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


@dataclass
class CostCurve:
    """t(n) measured at some sizes, interpolated linearly, extrapolated with the last slope."""

    sizes: list[int]
    seconds: list[float]

    def __call__(self, n: int) -> float:
        sizes, seconds = self.sizes, self.seconds
        if n <= sizes[-1] or len(sizes) == 1:
            return float(np.interp(n, sizes, seconds))
        slope = (seconds[-1] - seconds[-2]) / (sizes[-1] - sizes[-2])
        return seconds[-1] + slope * (n - sizes[-1])


def perfect_draft_speedup(t_one, t_block, k, draft_s=0.0):
    """The speedup over plain decoding of a round whose k drafted tokens are all accepted:
    (k + 1) t(1) / (t(k + 1) + (k + 1) d), a draft model forwarding k + 1 times (its
    catch-up pass included), as auto prices it. Scalars or numpy arrays alike."""
    return (k + 1) * t_one / (t_block + (k + 1) * draft_s)


def measure_decode_times(model, context: np.ndarray, sizes: Sequence[int],
                         repeats: int = 5, on_pass: PassCallback | None = None) -> CostCurve:
    """Median seconds for `model` (a backend Model) to score n tokens with n logit rows, as a
    verification does, after the int32 `context` is cached (time_blocks, which calls
    on_pass). The model's cache is left empty."""
    context = np.asarray(context, np.int32)
    model.truncate(0)
    model.decode(context, 0, 0)
    curve = time_blocks(model, context, sizes, repeats, on_pass)
    model.truncate(0)
    return curve


def time_blocks(model, context: np.ndarray, sizes: Sequence[int], repeats: int,
                on_pass: PassCallback | None = None) -> CostCurve:
    """Median seconds to score n tokens with n logit rows after the int32 `context`, which
    `model` holds cached (and still holds after). One untimed pass first (caches and
    buffers warm up), then the sizes interleaved `repeats` times, so that drift on a shared
    machine hits every size alike. on_pass(i, seconds) hears each pass end (i = 0: the
    untimed one), so that a slow measurement can say how long it will take."""
    batch = np.resize(context, max(sizes)) if len(context) else np.ones(max(sizes), np.int32)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for rep in range(repeats + 1):
        pass_start = perf_counter()
        for n in sizes:
            start = perf_counter()
            model.decode(batch[:n], len(context), n)
            if rep:
                times[n].append(perf_counter() - start)
            model.truncate(len(context))
        if on_pass is not None:
            on_pass(rep, perf_counter() - pass_start)
    return CostCurve(list(sizes), [float(statistics.median(times[n])) for n in sizes])
