"""`lsd bench --profile`: the ceiling speculation has on this machine for one model file.

Speculation pays only where scoring n tokens in one batch costs less than n single steps.
The profile measures t(n), the target's time to score n tokens after a ~300-token context
(the drafters' own cost left out: the best case), and derives the best possible speedup with
perfect drafts (every drafted token accepted): max over K of (K + 1) t(1) / t(K + 1), and
with the draft model's cost per token added. Every scored token attends to every cached one,
so a block's cost grows with the context faster than a step's (docs/auto.md): the ceiling is
measured again after a long context (LONG_CONTEXT tokens, where the context allows), the
one that holds for long prompts, long files copied and long conversations. A real copy
falls short of that ceiling by its first tokens (nothing matches yet) and its last block
(partly filled): the profile also prints what perfect drafts make of a copied answer of
COPY_TOKENS tokens (copy_speedup), the figure a copy task can be held to. It also reads the
file's tensor types: on x86 CPUs only some weight types have a batched matrix kernel in
llama.cpp (repacked Q4_0, Q4_K, IQ4_NL; llamafile's sgemm for Q8_0, Q4_0, Q5_0, IQ4_NL, F16,
BF16, F32); the others are multiplied one row of the batch at a time, which is why a batch of
8 can cost 8 steps.
"""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from time import perf_counter

import numpy as np

from ..config import AUTO_DENSE_BLOCKS, AUTO_LONG_BLOCKS, LONG_BLOCKS, MIN_NGRAM, MODEL_CAP
from ..drafters.auto.estimators import allowed_blocks, perfect_draft_speedup

# (the draft model's longest block, MODEL_CAP + 1; auto's longest lookup blocks)
PROFILE_SIZES = tuple(sorted({1, 2, 4, 8, MODEL_CAP + 1, 12, 16, 24, 32, *LONG_BLOCKS}))
LONG_CONTEXT = 1500  # tokens cached before the second measurement (a long prompt or file)
# An answer that copies its context cannot draft its first tokens (lookup matches the last
# MIN_NGRAM, and before them come the template's markup) and ends in a block only partly
# filled: the ceiling is also given for a copy of this many tokens (lsd bench's answers)
COPY_TOKENS = 256
# A pass after a longer context costs more, and so does each token of that context (every
# token attends to every cached one): by this share per 1000 more cached tokens (on the slow
# EPYC, docs/devices.md: 1.38x from 167 to 1500 tokens, 1.10x from 167 to 703); for the
# time estimate only
GROWTH_PER_1000 = 0.28
# weight types with a batched kernel on x86 CPUs (llama.cpp's CPU_REPACK and llamafile sgemm)
X86_BATCHED = frozenset({"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "IQ4_NL", "Q4_K"})


def tensor_types(path: Path) -> dict[str, dict[str, int]]:
    """{type name: {"tensors": n, "bytes": b}} of a GGUF file's 2-D weights (norms and
    biases, which no matrix kernel touches, left out); {} without the gguf package."""
    try:
        from gguf import GGUFReader
    except ImportError:
        return {}
    found: dict[str, Counter] = {}
    for tensor in GGUFReader(str(path)).tensors:
        if len([d for d in tensor.shape if d > 1]) < 2:
            continue
        entry = found.setdefault(tensor.tensor_type.name, Counter())
        entry["tensors"] += 1
        entry["bytes"] += int(tensor.n_bytes)
    return {name: dict(counts) for name, counts in sorted(found.items())}


def perfect_speedups(target_s: dict[int, float], draft_token_s: float = 0.0
                     ) -> dict[int, float]:
    """K -> the speedup over plain decoding if every one of K drafted tokens is accepted,
    drafting costing `draft_token_s` per forward (estimators.perfect_draft_speedup)."""
    return {n - 1: perfect_draft_speedup(target_s[1], target_s[n], n - 1, draft_token_s)
            for n in sorted(target_s) if n > 1}


def best(speedups: dict[int, float]) -> tuple[int, float]:
    """(K, speedup) of the best K (K = 0, plain decoding, when no K beats it)."""
    k = max(speedups, key=speedups.get, default=0)
    return (k, speedups[k]) if speedups and speedups[k] > 1.0 else (0, 1.0)


def is_auto_block(n: int) -> bool:
    """Whether auto may verify a lookup block of n tokens (estimators.allowed_blocks, auto's
    own rule, with config's AUTO_DENSE_BLOCKS and AUTO_LONG_BLOCKS; 1 is plain decoding)."""
    return n >= 1 and bool(allowed_blocks(n - 1, AUTO_DENSE_BLOCKS,
                                          np.asarray(AUTO_LONG_BLOCKS))[n - 1])


def copy_speedup(target_s: dict[int, float], n_tokens: int = COPY_TOKENS,
                 lead: int = MIN_NGRAM) -> float:
    """The speedup over plain decoding of an answer of n_tokens that copies its context
    with perfect drafts from its lead-th token on: lead plain steps, then the rest in the
    cheapest blocks of the measured sizes (target_s: block size -> seconds, 1 included; a
    round commits its block whole, the last one what is left, as a draft may run past a
    copy's end; a dynamic programme over the tokens left). Only the measured sizes auto
    may draft are combined: up to AUTO_DENSE_BLOCKS, then AUTO_LONG_BLOCKS (24 is measured
    to show the curve's steps, not drafted). Auto may also draft sizes between the measured
    ones up to 16: on a CPU's stepped curve those cost about as much as the next measured
    one (docs/devices.md)."""
    sizes = sorted(n for n in target_s if is_auto_block(n))
    rest = max(n_tokens - lead, 0)
    best_s = np.full(rest + 1, np.inf)  # float64[rest + 1]: least seconds to commit m tokens
    best_s[0] = 0.0
    for m in range(1, rest + 1):
        best_s[m] = min(target_s[b] + best_s[max(m - b, 0)] for b in sizes)
    return n_tokens * target_s[1] / (min(lead, n_tokens) * target_s[1] + best_s[rest])


def profile(target, draft, context, repeats: int = 5,
            notify: Callable[[str], None] | None = None) -> dict:
    """Measure and derive (target, draft: backend Models; context: int32 tokens), and the
    ceiling again after a long context (LONG_CONTEXT tokens of `context` repeated: what
    they say does not change what scoring costs) when the target's context holds one.
    notify (a line for the user) hears how long it will take once the first pass is timed."""
    from .cost import measure_draft_token_s, measure_target_s

    n_long = min(LONG_CONTEXT, target.n_ctx - max(PROFILE_SIZES) - 1)
    n_long = n_long if n_long >= 2 * len(context) else 0  # (a context too small: not measured)
    progress = ProfileProgress(notify, repeats, len(context), n_long)
    target_s = measure_target_s(target, context, PROFILE_SIZES, repeats, progress)
    draft_s = measure_draft_token_s(draft, len(context), repeats)
    free = perfect_speedups(target_s)
    out = {"target_s": target_s, "draft_token_s": draft_s,
           "context": len(context), "free_drafts": free, "best_free": best(free),
           "copy": copy_speedup(target_s),
           "types": tensor_types(target.path), "machine": platform.machine(),
           "placement": target.placement}
    if draft_s is not None:  # (auto drafts at most MODEL_CAP with it)
        with_model = {k: gain for k, gain in perfect_speedups(target_s, draft_s).items()
                      if k <= MODEL_CAP}
        out["draft_model"], out["best_draft_model"] = with_model, best(with_model)
    if n_long:
        progress.start_long()
        long_s = measure_target_s(target, np.resize(np.asarray(context, np.int32), n_long),
                                  PROFILE_SIZES, repeats, progress)
        out["long"] = {"context": n_long, "target_s": long_s,
                       "best_free": best(perfect_speedups(long_s)),
                       "copy": copy_speedup(long_s)}
    return out


class ProfileProgress:
    """How long the profile will take, told once its first timing pass is done (a pass:
    every size of PROFILE_SIZES scored once). It takes 40 s where a step costs 30 ms and
    5 minutes where one costs 96 ms and the prompt 40-65 ms a token (2-core VMs, the 1.5B
    target), so the user is told rather than left to wonder. Called as
    estimators.time_blocks' on_pass."""

    def __init__(self, notify: Callable[[str], None] | None, repeats: int, n_context: int,
                 n_long: int, clock: Callable[[], float] = perf_counter) -> None:
        self.notify, self.repeats, self.clock = notify, repeats, clock
        self.n_context, self.n_long = n_context, n_long  # n_long 0: no long measurement
        self.long = False  # measuring after the long context
        self.started = clock()  # (the phase's start: its context's processing, then passes)

    def start_long(self) -> None:
        self.long, self.started = True, self.clock()

    def __call__(self, rep: int, seconds: float) -> None:
        if rep or self.notify is None:  # (the first, untimed pass tells the pace)
            return
        plan = f"{self.repeats} more"
        if self.long:
            plan += f" after {self.n_long} tokens"
        elif self.n_long:
            plan += f", then {self.repeats + 1} after {self.n_long} tokens of context"
        self.notify(f"  a pass over {len(PROFILE_SIZES)} block sizes took {seconds:.1f} s; "
                    f"{plan}: about {duration(self.seconds_left(seconds))} to go")

    def seconds_left(self, pass_s: float) -> float:
        """After the phase's first pass took pass_s: its other passes, and from the short
        phase the long one too (its context processed at the short one's pace per token,
        which the clock measured before that pass, and it and its passes dearer by
        long_growth). The draft model's few steps between the phases are left out."""
        left = self.repeats * pass_s
        if not self.long and self.n_long:
            prefill_s = max(self.clock() - self.started - pass_s, 0.0)
            left += self.long_growth * (prefill_s * self.n_long / max(self.n_context, 1)
                                        + (self.repeats + 1) * pass_s)
        return left

    @property
    def long_growth(self) -> float:
        """How much dearer the long context's passes and tokens are than the short one's."""
        return 1.0 + GROWTH_PER_1000 * max(self.n_long - self.n_context, 0) / 1000


def duration(seconds: float) -> str:
    """A rough duration for a progress line: "40 s", "4 min"."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def unbatched(types: dict[str, dict[str, int]], machine: str) -> list[str]:
    """The weight types without a batched kernel on this backend (known for x86 CPUs)."""
    if machine not in ("x86_64", "AMD64", "i686"):
        return []
    return [name for name in types if name not in X86_BATCHED]


def format_profile(result: dict) -> str:
    t = result["target_s"]
    lines = [f"target: {'n':>4} {'t(n) ms':>8} {'/ t(1)':>7} {'perfect drafts':>15}"]
    for n, seconds in t.items():
        gain = result["free_drafts"].get(n - 1)
        lines.append(f"        {n:>4} {1000 * seconds:8.1f} {seconds / t[1]:7.2f} "
                     + (f"{gain:14.2f}x" if gain is not None else f"{'-':>15}"))
    lines.append(f"best case, drafts free and all accepted (prompt lookup on a copy), after "
                 f"{result['context']} tokens: {_gain_text(result['best_free'])}"
                 + _copy_text(result))
    long = result.get("long")
    if long is not None:
        lines.append(f"  after {long['context']} tokens (a long prompt, file or conversation): "
                     f"{_gain_text(long['best_free'])}{_copy_text(long)}; t(n) / t(1) there: "
                     + " ".join(f"{n}:{s / long['target_s'][1]:.2f}"
                                for n, s in long["target_s"].items() if n > 1))
    if "best_draft_model" in result:
        k, gain = result["best_draft_model"]
        lines.append(f"draft model: {1000 * result['draft_token_s']:.1f} ms per token "
                     f"({result['draft_token_s'] / t[1]:.0%} of a target step); best case "
                     + (f"{gain:.2f}x at K = {k}" if k else "never beats plain decoding here"))
    placement = result.get("placement", "CPU")
    on_cpu = placement == "CPU" or "on the CPU" in placement  # (Model.placement's words)
    lines += _types_lines(result["types"], result["machine"] if on_cpu else placement)
    return "\n".join(lines)


def _copy_text(result: dict) -> str:
    if "copy" not in result:
        return ""
    return (f" (an answer of {COPY_TOKENS} tokens copied, its first {MIN_NGRAM} "
            f"undrafted: {result['copy']:.2f}x)")


def _gain_text(best_case: tuple[int, float]) -> str:
    k, gain = best_case
    return f"{gain:.2f}x at K = {k}" if k else "none beats plain decoding"


def _types_lines(types: dict[str, dict[str, int]], machine: str) -> list[str]:
    """The file's weight types, and for an x86 CPU the ones without a batched kernel there;
    `machine`: the CPU's architecture, or where every layer went when none is on the CPU
    (the CPU's kernels then do not apply)."""
    if not types:
        return ["tensor types: unknown (the gguf package is not installed)"]
    total = sum(entry["bytes"] for entry in types.values())
    shares = ", ".join(f"{name} {entry['tensors']} ({entry['bytes'] / total:.0%})"
                       for name, entry in types.items())
    lines = [f"weight tensors by type: {shares}"]
    slow = unbatched(types, machine)
    if slow:
        lines.append(f"no batched kernel on this x86 CPU for: {', '.join(slow)} (one batch "
                     "row at a time); files whose weights are all Q4_0, Q8_0 or Q4_K batch "
                     "cheaper (docs/devices.md)")
    elif machine in ("x86_64", "AMD64", "i686"):
        lines.append("every weight type here has a batched kernel on this x86 CPU")
    elif " layers on " in machine:
        lines.append(f"{machine}: the CPU's batched kernels do not apply")
    return lines
