"""Tune and check the auto controller's lookup settings without timing noise.

    # once per model and machine: plain greedy answers + the measured cost curve (minutes)
    python bench/replay_auto.py record MODEL --split dev --limit 12 --threads 2 -o dev.json
    # then, in seconds, any number of settings side by side
    python bench/replay_auto.py run dev.json --configs plain,lookup:16,lookup:32,auto,\\
        auto:lookup_prior=0.6:long_lookup_prior=0.95

Each configuration is replayed on every recorded answer (a fresh drafter per answer, as in
`lsd run`); the table shows the median and mean speedup over plain per prompt set. `remember`
(e.g. `remember:auto`) replays as `lsd run` does with its learned state: each answer's fresh
auto drafter starts from what the previous answers taught (restored as from the state file,
lsd_local/learned.py), the first answer of a set from nothing. See
lsd_local/bench/replay.py for what a replay models and what it leaves out.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from lsd_local.bench import replay as rp
from lsd_local.drafters.auto import AutoDrafter
from lsd_local.drafters.lookup import LookupDrafter

SETS = "humaneval,code-edit,chat,summarize"
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 33]
CONTEXTS = [300, 1500]


class Remembering:
    """Makes auto drafters that start from what the previous one learned, the way a new
    `lsd run` process restores the learned-state file (the same scaled-down weights)."""

    def __init__(self, make) -> None:
        self.make = make
        self.last = None

    def __call__(self):
        drafter = self.make()
        if self.last is not None:
            drafter.restore(self.last.learned_costs(), self.last.learned_acceptance())
        self.last = drafter
        return drafter


def make_factory(config: str):
    """'plain', 'lookup:K', 'auto[:name=value...]' or 'remember:auto[:...]' -> a function
    making a fresh drafter (per answer; a new one per prompt set)."""
    if config.startswith("remember:"):
        return lambda: Remembering(make_factory(config[len("remember:"):]))
    name, *params = config.split(":")
    if name == "plain":
        return lambda: None
    if name == "lookup":
        k = int(params[0]) if params else 10
        return lambda: rp.FixedLookup(k)
    if name == "auto":
        kwargs = {key: float(value) for key, value in (p.split("=", 1) for p in params)}
        return lambda: AutoDrafter(LookupDrafter(), **kwargs)
    raise SystemExit(f"unknown configuration {config!r} (plain, lookup:K, auto[:key=value])")


def record(args) -> None:
    from lsd_local import Engine
    from lsd_local.bench.prompts import load_set
    from lsd_local.warmup import load_kernels_now

    engine = Engine.load(args.model, drafter="none", n_threads=args.threads, n_ctx=4096)
    load_kernels_now()  # nothing loads beside the cost-curve timings below
    records = []
    for set_name in args.sets.split(","):
        for item in load_set(set_name, args.split, args.limit):
            engine.reset()
            gen = engine.generate(list(item.messages), max_tokens=args.max_tokens).run()
            records.append(rp.Recorded(f"{set_name}/{item.id}",
                                       engine.prompt_tokens(list(item.messages)), gen.tokens))
            print(f"{records[-1].key}: {len(gen.tokens)} tokens", file=sys.stderr)
    engine.reset()
    curves = {c: rp.measure_cost_curve(engine.target, c, SIZES) for c in CONTEXTS}
    for c, curve in curves.items():
        ratios = " ".join(f"{n}:{s / curve.seconds[0]:.2f}" for n, s in
                          zip(curve.sizes, curve.seconds, strict=True))
        print(f"t(n)/t(1) at {c} cached: {ratios}", file=sys.stderr)
    rp.save(args.output, records, curves)


def run(args) -> None:
    records, curves = rp.load(args.recording)
    sets = sorted({r.key.split("/")[0] for r in records}, key=SETS.split(",").index)
    configs = args.configs.split(",")
    print(f"{'config':44s} " + "".join(f"{s:>20s}" for s in sets))
    for config in configs:
        cells = []
        for set_name in sets:
            factory = make_factory(config)
            if config.startswith("remember:"):
                factory = factory()  # one memory per set, starting empty
            chosen = [r for r in records if r.key.split("/")[0] == set_name]
            speedups = rp.replay_set(chosen, factory,
                                     lambda r: rp.nearest_curve(curves, len(r.prompt)))
            cells.append(f"{np.median(speedups):.3f}x ({np.mean(speedups):.3f})")
        print(f"{config:44s} " + "".join(f"{c:>20s}" for c in cells))
    print("median (mean) speedup over plain per prompt set; replayed, not timed")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="plain answers and the cost curve of MODEL")
    rec.add_argument("model")
    rec.add_argument("--sets", default=SETS)
    rec.add_argument("--split", default="dev")
    rec.add_argument("--limit", type=int, default=12)
    rec.add_argument("--max-tokens", type=int, default=192)
    rec.add_argument("--threads", type=int, default=None)
    rec.add_argument("-o", "--output", required=True)
    rep = sub.add_parser("run", help="replay configurations on a recording")
    rep.add_argument("recording")
    rep.add_argument("--configs", default="plain,lookup:16,lookup:32,auto,remember:auto")
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
