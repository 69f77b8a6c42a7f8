"""What auto measures once per machine and model pair before it first tries a draft model:
the target's t(n) at the block sizes it may use, how t(n) grows with the cached context, and
the draft model's step (AutoDrafter.calibrate; the engine keeps the result for the other
sequences' drafters and learned.json keeps it between processes).

- Sizes: a draft model whose best case (every token accepted) cannot beat plain decoding is
  never tried, not even to explore (on 2 CPU cores it costs 65 % of a target step and 8
  tokens cost 7 steps: its one trial, with the whole prompt to catch up, cost a short answer
  18 %), so t(n) up to MODEL_CAP + 1 is measured. The blocks of half and all of LOOKUP_CAP
  are measured too: t(n) on a CPU has steps (ggml's kernels tile the batch; 16 and 32 tokens
  here cost 8-15 % less than one more), and beyond its largest measured size the cost model
  extrapolates optimistically, so that with only 9 measured a prose answer's first long
  lookup draft (K = 30, priced at 9.5 steps instead of 10.4) was a bet lost in every summary.
- Context: every scored token attends to every cached one, so a block of n costs n times a
  step's growth more after a longer context (t(16) 173 ms after 300 tokens, 237 ms after
  1500, where t(1) grows from 32 to 35 ms). Measured at the first 64 tokens of a prompt
  only, blocks looked 25-35 % cheaper than they were after a summary's 1500-token prompt.
  So t(1) is also timed after the prompt's whole prefix (which stays cached: its prefill
  then costs nothing more), and the slope between the two is the cost model's
  per_query_context_s.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...config import LOOKUP_CAP, MODEL_CAP
from .estimators import CostModel, measure_decode_times

CALIBRATION_SIZES = (1, 2, MODEL_CAP + 1, LOOKUP_CAP // 2, LOOKUP_CAP)  # (interpolated between)
CALIBRATION_REPEATS = 2
CALIBRATION_CONTEXT = 64  # tokens of the prompt the sizes are timed after
SLOPE_SPREAD = 256  # the prefix must be this much longer than that to time the slope
SLOPE_REPEATS = 6  # (a step's growth over 256 tokens is ~1 ms here: timed more often)
# a slope above t(1) per this many cached tokens is taken for noise and capped (the truth
# here: 1 per ~10,000)
MIN_DOUBLING_CONTEXT = 1000


class Calibration(NamedTuple):
    """What `measure` found: (size, seconds, context) timings of the target, the draft
    model's seconds per step, and the target's seconds per scored token per cached one."""

    timings: tuple[tuple[int, float, int], ...]
    draft_token_s: float
    per_query_context_s: float


def measure(target, draft_model, context: np.ndarray, draft_context: np.ndarray,
            prefix: np.ndarray | None = None) -> Calibration:
    """Time the target (backend Model) at CALIBRATION_SIZES that fit its batch and context
    after the int32 `context`, its step after `prefix` (a prompt's tokens but its last,
    beginning with `context`; left cached), and the draft model's step after
    `draft_context` (its own vocabulary). The caches are left empty but for the prefix."""
    fits = min(target.n_batch, target.n_ctx - len(context))  # (a small -c or --n-batch)
    sizes = [n for n in CALIBRATION_SIZES if n <= fits]
    curve = measure_decode_times(target, context, sizes, CALIBRATION_REPEATS)
    timings = [(n, s, len(context)) for n, s in zip(curve.sizes, curve.seconds, strict=True)]
    slope = 0.0
    if prefix is not None and len(prefix) - len(context) >= SLOPE_SPREAD:
        near = measure_decode_times(target, context, (1,), SLOPE_REPEATS).seconds[0]
        far = measure_decode_times(target, prefix, (1,), SLOPE_REPEATS,
                                   keep_context=True).seconds[0]
        timings.append((1, far, len(prefix)))
        slope = min(max(0.0, (far - near) / (len(prefix) - len(context))),
                    near / MIN_DOUBLING_CONTEXT)
    step = measure_decode_times(draft_model, draft_context, (1,), CALIBRATION_REPEATS)
    return Calibration(tuple(timings), step.seconds[0], slope)


def apply(cost: CostModel, calibration: Calibration) -> None:
    """Teach a cost model what `measure` timed."""
    cost.per_query_context_s = calibration.per_query_context_s
    for n, seconds, context in calibration.timings:
        cost.observe(n, seconds, context=context)
