"""The bench's PNG: speedup vs quality retention, and accepted tokens per round."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import LsdError


def quality_of(summary: dict) -> float | None:
    """pass@1 retention where the prompt set has a checker, else the identical-output share."""
    if summary.get("retention") is not None:
        return summary["retention"]
    return summary.get("identical")


def write_plot(path: Path, summaries: Sequence[dict], rows: Sequence[dict]) -> None:
    """Left: each (set, configuration) at (quality retention, speedup). Right: histogram of
    tokens accepted per round for each lsd configuration, all sets together."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LsdError('--plot needs matplotlib: pip install "lsd-local[bench]"') from None
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5))
    sets = list(dict.fromkeys(s["set"] for s in summaries))
    markers = "osD^v<>ph*"
    for s in summaries:
        quality = quality_of(s)
        if s.get("speedup") is None or quality is None:
            continue
        marker = markers[sets.index(s["set"]) % len(markers)]
        left.scatter(quality, s["speedup"], marker=marker)
        left.annotate(f"{s['config']}", (quality, s["speedup"]), fontsize=6,
                      xytext=(3, 2), textcoords="offset points")
    left.axhline(1.0, color="grey", lw=0.8, ls="--")
    left.set_xlabel("quality retention (pass@1 ratio; identical share without a checker)")
    left.set_ylabel("decode speedup vs plain (median)")
    left.set_title("markers: " + ", ".join(
        f"{markers[i % len(markers)]}={name}" for i, name in enumerate(sets)), fontsize=8)
    accepted = accepted_by_config(rows)
    top = max((max(v) for v in accepted.values() if v), default=1)
    bins = range(0, min(top, 64) + 2)
    for config, values in accepted.items():
        right.hist(values, bins=bins, histtype="step", label=config, density=True)
    right.set_xlabel("draft tokens accepted per round")
    right.set_ylabel("share of rounds")
    if accepted:
        right.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def accepted_by_config(rows: Sequence[dict]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for row in rows:
        if row.get("accepted_per_round") and row.get("drafted"):
            out.setdefault(row["config"], []).extend(row["accepted_per_round"])
    return out
