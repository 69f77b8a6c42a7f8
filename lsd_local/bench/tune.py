"""`lsd bench --tune`: sweep K and each loose rule's settings on the dev split and pick, per
rule, the fastest setting whose quality stays above a floor."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

FLY_THETAS = (0.3, 0.6)
FLY_WINDOWS = (2, 4, 6)
ASD_GATES = (0.5, 1.0, 2.0)
ASD_BUDGETS = (6.0, 24.0)


def tune_grid(drafter: str, ks: Sequence[int]) -> list[str]:
    """Candidate configurations: strict at each K; FLy over theta x window and ASD over gate x
    budget at the drafter's default K."""
    grid = [f"strict:{drafter}:{k}" for k in ks] or [f"strict:{drafter}"]
    grid += [f"fly:{drafter}:theta={t}:window={w}" for t in FLY_THETAS for w in FLY_WINDOWS]
    grid += [f"asd:{drafter}:gate={g}:budget={b}" for g in ASD_GATES for b in ASD_BUDGETS]
    return grid


def candidate_scores(summaries: Sequence[dict]) -> list[dict]:
    """Per configuration over all dev sets: mean of the per-set median speedups, and quality =
    the lowest per-set pass@1 retention (or identical share for sets without a checker)."""
    by_config: dict[str, list[dict]] = {}
    for s in summaries:
        if s["config"] != "plain" and s.get("speedup") is not None:
            by_config.setdefault(s["config"], []).append(s)
    out = []
    for config, group in by_config.items():
        qualities = [s["retention"] if s.get("retention") is not None else s.get("identical")
                     for s in group]
        qualities = [q for q in qualities if q is not None]
        out.append({"config": config, "rule": config.split(":")[0],
                    "speedup": statistics.mean(s["speedup"] for s in group),
                    "quality": min(qualities) if qualities else None,
                    "loose_per_100": statistics.mean(s.get("loose_per_100", 0.0)
                                                     for s in group)})
    return out


def choose(scores: Sequence[dict], floor: float) -> dict[str, dict]:
    """Per rule: the fastest candidate with quality >= floor (None when none qualifies)."""
    best: dict[str, dict] = {}
    for s in scores:
        if s["quality"] is None or s["quality"] < floor:
            continue
        if s["rule"] not in best or s["speedup"] > best[s["rule"]]["speedup"]:
            best[s["rule"]] = s
    return best


def format_tuning(scores: Sequence[dict], best: dict[str, dict], floor: float) -> str:
    lines = [f"{'candidate':<40} {'speedup':>7} {'quality':>7} {'loose/100':>9}"]
    for s in sorted(scores, key=lambda s: (s["rule"], -s["speedup"])):
        quality = "-" if s["quality"] is None else f"{s['quality']:.0%}"
        mark = " <- best" if best.get(s["rule"]) is s else ""
        lines.append(f"{s['config']:<40} {s['speedup']:6.2f}x {quality:>7} "
                     f"{s['loose_per_100']:9.2f}{mark}")
    lines.append(f"quality floor {floor:.0%}: " + (", ".join(
        f"{rule}: {s['config']}" for rule, s in best.items()) or "no candidate qualifies"))
    return "\n".join(lines)
