"""Cost report: what scoring n tokens costs on this machine and what speedup that allows.

With per-token acceptance a (drafts accepted left to right, independently), a round that
drafts K tokens commits E(K) = (1 - a^(K+1)) / (1 - a) tokens and costs t(K+1) + K*d, where t(n)
is the target's time to score n tokens and d the drafter's time per drafted token. The best
achievable speedup is max over K of E(K) * t(1) / (t(K+1) + K*d).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..drafters.auto.estimators import PassCallback, best_k, expected_tokens, measure_decode_times

BATCH_SIZES = (1, 2, 4, 8, 16)


def measure_costs(target, draft, context: Sequence[int],
                  sizes: Sequence[int] = BATCH_SIZES, repeats: int = 5) -> dict:
    """{"target_s": {n: seconds}, "draft_token_s": seconds or None}, after `context`."""
    draft_s = measure_draft_token_s(draft, len(context), repeats)
    return {"target_s": measure_target_s(target, context, sizes, repeats),
            "draft_token_s": draft_s}


def measure_draft_token_s(draft, n_context: int, repeats: int = 5) -> float | None:
    """The draft model's median seconds per step after n_context tokens (None: no draft)."""
    if draft is None:
        return None
    vocab = draft.vocab  # (its own tokens: the draft may have another vocabulary)
    filler = vocab.bos_token if vocab.bos_token >= 0 else vocab.eos_token
    return measure_decode_times(draft, np.full(n_context, filler, np.int32), [1], repeats)(1)


def measure_target_s(target, context: Sequence[int], sizes: Sequence[int], repeats: int,
                     on_pass: PassCallback | None = None) -> dict[int, float]:
    """{n: median seconds} for the target to score n tokens after `context`."""
    curve = measure_decode_times(target, np.asarray(context, np.int32), sizes, repeats,
                                 on_pass)
    return dict(zip(curve.sizes, curve.seconds, strict=True))


def best_speedup(target_s: dict[int, float], draft_token_s: float, acceptance: float
                 ) -> tuple[int, float]:
    """(K, speedup) maximising E(K) t(1) / (t(K+1) + K d) over the measured batch sizes
    (K = 0, plain decoding, included): estimators.best_k on a geometric acceptance."""
    ks = [0] + [n - 1 for n in sorted(target_s) if n > 1]
    accepted = np.array([expected_tokens(acceptance, k) - 1.0 for k in ks])
    seconds = np.array([target_s[k + 1] + k * draft_token_s for k in ks])
    i, _ = best_k(accepted, seconds)
    return ks[i], float((1.0 + accepted[i]) * target_s[1] / seconds[i])


def cost_report(costs: dict, summaries: Sequence[dict], rows: Sequence[dict]) -> list[dict]:
    """Per lsd configuration: measured acceptance, drafting cost per token, and the best K and
    speedup the measured costs allow, beside the speedup it reached."""
    out = []
    for s in summaries:
        runs = [r for r in rows if r["config"] == s["config"] and r["set"] == s["set"]]
        drafted = sum(r.get("drafted", 0) for r in runs)
        if not drafted:
            continue
        per_token = sum(r["draft_s"] for r in runs) / drafted
        k, speedup = best_speedup(costs["target_s"], per_token, s["acceptance"])
        out.append({"set": s["set"], "config": s["config"], "acceptance": s["acceptance"],
                    "draft_s_per_token": per_token, "best_k": k, "best_speedup": speedup,
                    "measured_speedup": s.get("speedup")})
    return out


def format_costs(costs: dict, report: Sequence[dict]) -> str:
    t = costs["target_s"]
    lines = ["target: " + "  ".join(f"t({n})={1000 * s:.0f} ms" for n, s in t.items())
             + "  (" + "  ".join(f"{n}: {s / (n * t[1]):.2f}" for n, s in t.items() if n > 1)
             + " of n separate steps)"]
    if costs.get("draft_token_s") is not None:
        lines.append(f"draft model: {1000 * costs['draft_token_s']:.1f} ms per token "
                     f"({costs['draft_token_s'] / t[1]:.0%} of a target step)")
    lines.append(f"{'set':<12} {'config':<26} {'accept':>6} {'draft/tok':>9} "
                 f"{'best K':>6} {'best':>6} {'measured':>8}")
    for r in report:
        measured = "-" if r["measured_speedup"] is None else f"{r['measured_speedup']:.2f}x"
        lines.append(f"{r['set']:<12} {r['config']:<26} {r['acceptance']:6.0%} "
                     f"{1000 * r['draft_s_per_token']:7.2f}ms {r['best_k']:6d} "
                     f"{r['best_speedup']:5.2f}x {measured:>8}")
    return "\n".join(lines)
