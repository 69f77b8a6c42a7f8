"""Read the `lsd run --json` answers bench/gpu_check.sh writes (one file per drafter, named
run-DRAFTER.json) and say whether every strict answer equals plain decoding's (run-none), with
each one's speed, rounds and which drafters auto used.

    python bench/gpu_check_runs.py DIR/run-*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def summary(paths: list[Path]) -> list[str]:
    """One line per answer, plain decoding's first; a last line with the verdict."""
    runs = {}
    for path in paths:
        try:
            runs[path.stem.removeprefix("run-")] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            runs[path.stem.removeprefix("run-")] = {"error": str(exc)}
    plain = runs.get("none", {}).get("tokens")
    lines, equal = [], True
    for name in sorted(runs, key=lambda n: (n != "none", n)):
        run = runs[name]
        if "error" in run:
            lines.append(f"{name:8s} no answer ({run['error'][:80]})")
            equal = False
            continue
        stats, same = run["stats"], run["tokens"] == plain
        equal &= same
        differ = "" if same or plain is None else \
            f" (from token {first_difference(run['tokens'], plain)})"
        lines.append(f"{name:8s} {stats['decode_tokens_per_second']:8.1f} tok/s  "
                     f"rounds {stats['rounds']:4d}  tau {stats['tau']:5.2f}  "
                     f"sources {stats['draft_sources']}  placement {run.get('placement')}  "
                     f"same tokens as plain: {same}{differ}")
    lines.append("every answer equals plain decoding's" if equal and plain is not None
                 else "SOME ANSWER DIFFERS FROM PLAIN DECODING (or is missing)")
    return lines


def first_difference(a: list[int], b: list[int]) -> int:
    """The first index where two token lists differ (the shorter one's length if none)."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


if __name__ == "__main__":
    print("\n".join(summary([Path(p) for p in sys.argv[1:]])))
