"""A newcomer's first run against a warm one: the README's demo command in fresh clones.

    .venv/bin/python bench/first_run.py [--rev OLD] [--rev NEW] [--repeat 3]

For each repeat and each revision (interleaved: A, B, A, B), clone the repository at that
revision into a temporary folder (an empty numba cache), run the demo command there once
(cold), wait until no background compile of that clone is left, then run it twice more
(warm). Prints wall seconds and the decode speed lsd printed, per run and as medians.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROMPT = ("Copy this text exactly, word for word: Speculative decoding lets a small draft "
          "propose tokens that a large model checks in one pass.")
SUMMARY = re.compile(r"\[(\d+) tokens, ([0-9.]+) tok/s")


def run_demo(clone: Path) -> tuple[float, float]:
    """(wall seconds, decode tok/s printed) of one `lsd run --show-drafts PROMPT`."""
    env = {**os.environ, "PYTHONPATH": str(clone)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "lsd_local", "run", "--show-drafts", PROMPT],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    found = SUMMARY.search(proc.stderr)
    if proc.returncode or not found:
        raise SystemExit(f"demo failed in {clone}:\n{proc.stderr[-2000:]}")
    return wall, float(found.group(2))


def wait_for_background_compiles(limit: float = 600.0) -> None:
    """A cold run leaves its kernel compile running (`python -m lsd_local.kernels.warmup`, of any
    clone: run nothing else meanwhile): the warm runs start after it."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        if "lsd_local.kernels.warmup" not in ps:
            return
        time.sleep(0.2)
    raise SystemExit(f"a kernel compile still runs after {limit:.0f} s")


def measure(rev: str, workdir: Path) -> dict[str, list[tuple[float, float]]]:
    clone = workdir / f"clone-{rev}-{time.monotonic_ns()}"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", rev], check=True)
    cold = [run_demo(clone)]
    wait_for_background_compiles()
    return {"cold": cold, "warm": [run_demo(clone), run_demo(clone)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", action="append", help="git revision (repeatable; HEAD)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    revs = args.rev or ["HEAD"]
    results: dict[str, dict[str, list]] = {rev: {"cold": [], "warm": []} for rev in revs}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for rev in revs:
                got = measure(rev, Path(tmp))
                for kind in ("cold", "warm"):
                    results[rev][kind] += got[kind]
                print(f"repeat {i + 1} {rev}: " + "  ".join(
                    f"{kind} " + ", ".join(f"{w:.2f} s {s:.1f} tok/s" for w, s in got[kind])
                    for kind in ("cold", "warm")), flush=True)
    for rev in revs:
        cold, warm = results[rev]["cold"], results[rev]["warm"]
        wall = [statistics.median(w for w, _ in runs) for runs in (cold, warm)]
        speed = [statistics.median(s for _, s in runs) for runs in (cold, warm)]
        print(f"{rev}: median cold {wall[0]:.2f} s {speed[0]:.1f} tok/s, warm {wall[1]:.2f} s "
              f"{speed[1]:.1f} tok/s: wall x{wall[0] / wall[1]:.2f}, decode speed "
              f"{speed[0] / speed[1]:.0%} of warm")


if __name__ == "__main__":
    main()
