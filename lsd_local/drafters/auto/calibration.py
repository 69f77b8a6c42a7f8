"""What auto measures once per machine and model pair before it first tries a draft model:
the target's t(n) at the block sizes it may use, how t(n) grows with the cached context, and
the draft model's step (measure_missing; the engine keeps the result for the other
sequences' drafters and learned.json keeps it between processes).

- Sizes: a draft model whose best case (every token accepted) cannot beat plain decoding is
  never tried, not even to explore (on 2 CPU cores it costs 65 % of a target step and 8
  tokens cost 7 steps: its one trial, with the whole prompt to catch up, cost a short answer
  18 %), so t(n) up to MODEL_CAP + 1 is measured. The blocks of lookup's longest draft and
  of half of it are measured too (16 and 32: LOOKUP_CAP + 1 and half that), and auto's
  longer blocks (LONG_BLOCKS, 48 and 64): past 16 it drafts only these sizes
  (config.AUTO_DENSE_BLOCKS and AUTO_LONG_BLOCKS). t(n) on a CPU has steps (ggml's
  kernels tile the batch; 16 and 32 tokens here cost 8-15 % less than one more, which is
  why lookup drafts 31, not 32), and beyond its largest measured size the cost
  model extrapolates optimistically, so that with only 9 measured a prose answer's first long
  lookup draft (K = 30, priced at 9.5 steps instead of 10.4) was a bet lost in every summary.
- Context: every scored token attends to every cached one, so a block of n costs n times a
  step's growth more after a longer context (t(16) 173 ms after 300 tokens, 237 ms after
  1500, where t(1) grows from 32 to 35 ms). Timed after the first 64 tokens of a prompt
  only, blocks looked 25-35 % cheaper than they were after a 1500-token prompt.
  So t(16) is timed again after the prompt's whole prefix (a block of 16 shows the growth
  16 times as plainly as a step), which stays cached: its prefill then costs nothing more
  (the generation is told, for its statistics). A prompt too short for that leaves the
  slope unknown, to be timed at the first long prompt (`measure_slope`).
- Before any prompt (`lsd serve` at startup, `Engine.calibrate`): the same sizes and the slope
  are timed on filler tokens (a step costs the same whatever the tokens are), so that no
  request waits while they are measured: side by side, a first request's calibration held
  every other stream for seconds. It took 5.7-6.7 s on the Qwen pair on 2 cores (3.3 s of
  it the sizes and the draft model, the rest the slope's 320-token prefill), once per
  machine and model pair where auto remembers; timing the long blocks too (48 and 64,
  LONG_BLOCKS: auto drafts copies in them) took it from 7.4 to 11.1 s on a VM whose step
  is 87 ms.
"""

from __future__ import annotations

from time import perf_counter
from typing import NamedTuple

import numpy as np

from ...config import LONG_BLOCKS, LOOKUP_CAP, MODEL_CAP
from .estimators import CostModel, measure_decode_times, time_blocks

LONG_BLOCK = LOOKUP_CAP + 1  # lookup's longest block of any length (32)
CALIBRATION_SIZES = (1, 2, MODEL_CAP + 1, LONG_BLOCK // 2, LONG_BLOCK,  # (interpolated between)
                     *LONG_BLOCKS)
CALIBRATION_REPEATS = 2
CALIBRATION_CONTEXT = 64  # tokens of the prompt the sizes are timed after
SLOPE_SIZE = LONG_BLOCK // 2  # the block timed after both contexts
SLOPE_SPREAD = 256  # the prefix must be this much longer than that to time the slope
SLOPE_REPEATS = 3
# a slope above t(1) per this many cached tokens is taken for noise and capped (the truth
# here: 1 per ~10,000)
MIN_DOUBLING_CONTEXT = 2000


class Calibration(NamedTuple):
    """What `measure` found: (size, seconds, context) timings of the target, the draft
    model's seconds per step, the target's seconds per scored token per cached one (None:
    not measured yet), and (prompt tokens left cached, seconds their evaluation took)."""

    timings: tuple[tuple[int, float, int], ...]
    draft_token_s: float
    per_query_context_s: float | None
    evaluated: tuple[int, float] = (0, 0.0)


def measure(target, draft_model, context: np.ndarray, draft_context: np.ndarray,
            prefix: np.ndarray | None = None) -> Calibration:
    """Time the target (backend Model) at CALIBRATION_SIZES that fit its batch and context
    after the int32 `context`, and the slope with the context after `prefix` (a prompt's
    tokens but its last, beginning with `context`; left cached) when it is long enough, and
    the draft model's step after `draft_context` (its own vocabulary). The caches are left
    empty but for the prefix."""
    near_s = _evaluate(target, context, 0)
    fits = min(target.n_batch, target.n_ctx - len(context))  # (a small -c or --n-batch)
    sizes = [n for n in CALIBRATION_SIZES if n <= fits]
    curve = time_blocks(target, context, sizes, CALIBRATION_REPEATS)
    timings = tuple((n, s, len(context)) for n, s in zip(curve.sizes, curve.seconds,
                                                          strict=True))
    found = Calibration(timings, 0.0, None)
    if _slope_fits(target, context, prefix):
        found = _far(target, context, prefix, found, curve(SLOPE_SIZE), curve(1), near_s)
    else:
        target.truncate(0)
    step = measure_decode_times(draft_model, draft_context, (1,), CALIBRATION_REPEATS)
    return found._replace(draft_token_s=step.seconds[0])


def measure_slope(target, context: np.ndarray, prefix: np.ndarray,
                  known: Calibration) -> Calibration:
    """`known` with the slope timed (after `context`, then after `prefix`, which stays
    cached), when the prefix is long enough; else `known` with nothing evaluated now (the
    cache untouched)."""
    if not _slope_fits(target, context, prefix):
        return known._replace(evaluated=(0, 0.0))
    near_s = _evaluate(target, context, 0)
    near = time_blocks(target, context, (1, SLOPE_SIZE), SLOPE_REPEATS)
    return _far(target, context, prefix, known, near(SLOPE_SIZE), near(1), near_s)


def needs_measuring(drafter) -> bool:
    """Whether a drafter is auto with a draft model that has not measured its costs yet."""
    return getattr(drafter, "needs_calibration", False) or \
        getattr(drafter, "needs_slope", False)


def measure_missing(drafter, target, draft, context: np.ndarray, draft_context: np.ndarray,
                    prefix: np.ndarray, known: Calibration | None) -> Calibration:
    """What the AutoDrafter `drafter` still needs measured (everything: the draft model's
    best case is then known before it is ever tried, and its drafter is told its cache was
    emptied; or the context slope alone after `known`), taught to it; the arrays are
    `measure`'s, `target` and `draft` backend Models. Returns what was measured, for
    `use_calibration` of other drafters of the same models."""
    if drafter.needs_calibration:
        measured = measure(target, draft, context, draft_context, prefix)
        drafter.model.reset()
        drafter.use_calibration(measured)
        return measured
    known = known or Calibration((), drafter.draft_token_s, None)
    measured = measure_slope(target, context, prefix, known)
    apply(drafter.cost, measured._replace(timings=measured.timings[
        len(known.timings):]))  # (the rest this drafter has)
    return measured


def before_first_try(drafter, target, draft, prompt_ids: list[int],
                     known: Calibration | None) -> Calibration | None:
    """Before auto first tries the draft model (nothing learned yet, no Engine.calibrate),
    measure what it and the target cost here after the first prompt tokens, and at the first
    prompt long enough how t(n) grows with the context, so that a draft model that cannot
    pay is never tried. `target`, `draft`: the generation's slots; `known`: what another
    sequence's drafter measured (it is taught to this one first). Returns what is known
    now (its `evaluated`: the prompt tokens left cached and the seconds they took), or
    `known` when nothing was measured: never at the cost of a conversation's cache."""
    if known is not None:  # (measured for another sequence's drafter)
        drafter.use_calibration(known, timings=drafter.needs_calibration)
    if target.n_cached or not needs_measuring(drafter):
        return known
    n = min(len(prompt_ids), CALIBRATION_CONTEXT, target.n_ctx // 2, draft.n_ctx - 2)
    if n < 1:  # (a context too small to measure in: auto tries the model to learn)
        return known
    prompt = np.asarray(prompt_ids, np.int32)
    prefix = prompt[:min(len(prompt) - 1, target.n_ctx - 1)]  # (the prefill reuses it)
    # (the draft model's own token ids: it may have another vocabulary)
    return measure_missing(drafter, target, draft, prompt[:n], filler(draft.vocab, n), prefix,
                           known)


def filler_arrays(target, draft) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(context, draft_context, prefix) for `measure` before any prompt: filler tokens
    (int32, each model's own BOS, else EOS) as many as a prompt would give, the prefix as
    long as the slope needs where the context allows; None when no context fits."""
    n = min(CALIBRATION_CONTEXT, target.n_ctx // 2, draft.n_ctx - 2)
    if n < 1:
        return None
    prefix = min(n + SLOPE_SPREAD, target.n_ctx - SLOPE_SIZE)  # (each filler costs time)
    return filler(target.vocab, n), filler(draft.vocab, n), filler(target.vocab, prefix)


def filler(vocab, n: int) -> np.ndarray:
    """int32[n] of one token every vocabulary has (what is timed does not depend on it)."""
    return np.full(n, vocab.bos_token if vocab.bos_token >= 0 else vocab.eos_token, np.int32)


def _slope_fits(target, context: np.ndarray, prefix: np.ndarray | None) -> bool:
    return (prefix is not None and len(prefix) - len(context) >= SLOPE_SPREAD and
            min(target.n_batch, target.n_ctx - len(prefix)) >= SLOPE_SIZE)


def _evaluate(target, tokens: np.ndarray, at: int) -> float:
    """Seconds to evaluate `tokens[at:]` into the cache, cut to `at` first."""
    target.truncate(at)
    start = perf_counter()
    target.decode(tokens[at:], at, 0)
    return perf_counter() - start


def _far(target, context, prefix, known: Calibration, near: float, step: float,
         near_s: float) -> Calibration:
    """`known` with the slope between `near` (t(SLOPE_SIZE) after `context`; `step`: t(1)
    there) and the same block timed after `prefix`, evaluated here and left cached."""
    far_s = _evaluate(target, prefix, len(context))
    far = time_blocks(target, prefix, (SLOPE_SIZE,), SLOPE_REPEATS).seconds[0]
    slope = min(max(0.0, (far - near) / (SLOPE_SIZE * (len(prefix) - len(context)))),
                step / MIN_DOUBLING_CONTEXT)
    return known._replace(timings=known.timings + ((SLOPE_SIZE, far, len(prefix)),),
                          per_query_context_s=slope, evaluated=(len(prefix), near_s + far_s))


def apply(cost: CostModel, calibration: Calibration) -> None:
    """Teach a cost model what `measure` timed (a slope not measured leaves its own)."""
    if calibration.per_query_context_s is not None:
        cost.per_query_context_s = calibration.per_query_context_s
    for n, seconds, context in calibration.timings:
        cost.observe(n, seconds, context=context)
