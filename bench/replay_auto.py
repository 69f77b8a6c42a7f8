"""Tune and check the auto controller's lookup settings without timing noise.

    # once per model and machine: plain greedy answers + the measured cost curve (minutes)
    python bench/replay_auto.py record MODEL --split dev --limit 12 --threads 2 -o dev.json
    # then, in seconds, any number of settings side by side
    python bench/replay_auto.py run dev.json --configs plain,lookup:16,lookup:32,auto,\\
        auto:lookup_prior=0.6:long_lookup_prior=0.95,calibrated:auto,cut:31,cut:63

Each configuration is replayed on every recorded answer (a fresh drafter per answer, as in
`lsd run`); the table shows the median and mean speedup over plain per prompt set. `remember`
(e.g. `remember:auto`) replays as `lsd run` does with what it learned: each answer's fresh
auto drafter starts from what the previous answers taught (restored as from the learned file,
drafters/auto/learned.py), the first answer of a set from nothing. With --mixed, one memory
serves all sets, their answers interleaved (a process or learned file serving several kinds
of request). Each answer begins as a request of its family (lsd_local.drafters.auto.learned.
request_family; recordings made before families existed get them from the shipped prompt
sets). `calibrated:auto` starts each auto drafter from the costs the engine's calibration
times when a draft model is loaded (the pair as `lsd pull` gives it; `auto` alone starts
knowing nothing, as with `--draft none`). `cut:K` is a bound, not a policy: lookup's
proposal (at most K) cut exactly where the recorded answer parts from it, so no token is
drafted in vain and no round that could draft steps plainly: about the most any choice of
K per round could make of lsd's lookup proposals (not the suffix index; text lookup only
with --text-lookup MODEL, the recording's target, whose vocabulary spells its tokens). See
lsd_local/bench/replay.py for what a replay models and what it leaves out.

    # the same answers priced on a curve without steps, a GPU's shape (t(n) = t(1) (1 + s (n-1)))
    python bench/replay_auto.py run dev.json --smooth 0.01 --configs calibrated:auto,cut:63

    # what a per-key memory (llama.cpp's ngram-map-k, -k4v) could act on in the answers
    python bench/replay_auto.py keys dev.json
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import numpy as np

from lsd_local.bench import lookup_keys as lk
from lsd_local.bench import replay as rp
from lsd_local.config import MIN_NGRAM
from lsd_local.drafters.auto import calibration
from lsd_local.drafters.auto.learned import request_family
from lsd_local.drafters.auto.policy import AutoDrafter
from lsd_local.drafters.lookup import LookupDrafter

SETS = "humaneval,code-edit,chat,summarize"
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15, 16, 17, 20, 24, 28, 31, 32, 33, 40, 47, 48, 49,
         56, 63, 64, 65]
CONTEXTS = [300, 1500]


class Remembering:
    """Makes auto drafters that start from what the previous one learned, the way a new
    `lsd run` process restores learned.json (the same scaled-down weights)."""

    def __init__(self, make) -> None:
        self.make = make
        self.last = None

    def __call__(self):
        drafter = self.make()
        if self.last is not None:
            drafter.restore(self.last.learned_costs(), self.last.learned_acceptance())
        self.last = drafter
        return drafter


def make_factory(config: str, curves: dict | None = None):
    """'plain', 'lookup:K', 'cut:K', 'auto[:name=value...]', 'calibrated:auto[:...]' (the
    recording's curves as the calibration would time them) or 'remember:...' -> a function
    making a fresh drafter (per answer; a new one per prompt set)."""
    if config.startswith("remember:"):
        return lambda: Remembering(make_factory(config[len("remember:"):], curves))
    if config.startswith("calibrated:"):
        measured = rp.calibration_from_curves(curves or {})
        make = make_factory(config[len("calibrated:"):])
        return lambda: calibrated(make(), measured)
    name, *params = config.split(":")
    if name == "plain":
        return lambda: None
    if name == "lookup":
        k = int(params[0]) if params else 10
        return lambda: rp.FixedLookup(k)
    if name == "cut":  # lookup K cut where the answer parts: a bound, not a policy
        k = int(params[0]) if params else 31
        return lambda: rp.CutLookup(k)
    if name == "auto":
        kwargs = {key: _setting(key, value) for key, value in (p.split("=", 1) for p in params)}
        return lambda: AutoDrafter(LookupDrafter(), **kwargs)
    raise SystemExit(f"unknown configuration {config!r} "
                     "(plain, lookup:K, cut:K, auto[:key=value])")


def _setting(key: str, value: str):
    """An auto setting from the command line: long_blocks as sizes joined by '+' ('' for
    none: no block past 32), the others numbers."""
    if key == "long_blocks":
        return tuple(int(n) for n in value.split("+") if n)
    return int(value) if key == "dense_blocks" else float(value)


def calibrated(drafter, measured):
    """An auto drafter told what the engine's calibration would have measured."""
    if not isinstance(drafter, AutoDrafter):
        raise SystemExit("calibrated: applies to auto configurations only "
                         "(remember:calibrated:auto, not calibrated:remember:auto)")
    calibration.apply(drafter.cost, measured)
    return drafter


def record(args) -> None:
    from lsd_local import Engine
    from lsd_local.bench.prompts import load_set
    from lsd_local.kernels.warmup import load_kernels_now

    engine = Engine.load(args.model, drafter="none", n_threads=args.threads, n_ctx=4096)
    load_kernels_now()  # nothing loads beside the cost-curve timings below
    records = []
    for set_name in args.sets.split(","):
        for item in load_set(set_name, args.split, args.limit):
            engine.reset()
            gen = engine.generate(list(item.messages), max_tokens=args.max_tokens).run()
            records.append(rp.Recorded(f"{set_name}/{item.id}",
                                       engine.prompt_tokens(list(item.messages)), gen.tokens,
                                       request_family(list(item.messages))))
            print(f"{records[-1].key}: {len(gen.tokens)} tokens", file=sys.stderr)
    engine.reset()
    stops = [r.answer[-1] for r in records if r.answer and engine.target.vocab.is_eog(r.answer[-1])]
    end = rp.AnswerEnd(max(set(stops), key=stops.count), args.max_tokens) if stops else None
    curves = {c: rp.measure_cost_curve(engine.target, c, SIZES) for c in CONTEXTS}
    for c, curve in curves.items():
        ratios = " ".join(f"{n}:{s / curve.seconds[0]:.2f}" for n, s in
                          zip(curve.sizes, curve.seconds, strict=True))
        print(f"t(n)/t(1) at {c} cached: {ratios}", file=sys.stderr)
    rp.save(args.output, records, curves, end)


def add_families(records: list[rp.Recorded]) -> None:
    """Give records made before families were recorded the family of their prompt, looked
    up by key in the shipped prompt sets."""
    from lsd_local.bench.prompts import load_set

    messages = {}
    for set_name in {r.key.split("/")[0] for r in records if r.family is None}:
        for item in load_set(set_name, "all"):
            messages[f"{set_name}/{item.id}"] = list(item.messages)
    for rec in records:
        if rec.family is None and rec.key in messages:
            rec.family = request_family(messages[rec.key])


def interleaved(records: list[rp.Recorded], sets: list[str]) -> list[rp.Recorded]:
    """The records taken from each set in turn (the first of every set, then the second...)."""
    by_set = [[r for r in records if r.key.split("/")[0] == s] for s in sets]
    return [group[i] for i in range(max(map(len, by_set))) for group in by_set
            if i < len(group)]


def speedups_per_set(records, curves, config: str, sets: list[str], mixed: bool,
                     growth_s: float = 0.0, end: rp.AnswerEnd | None = None, vocab=None
                     ) -> dict[str, list[float]]:
    """Per set, each answer's replayed speedup over plain under `config`; a `remember`
    config keeps one memory per set, or one for all (mixed); `end`, `vocab`: rp.replay's."""
    cost = lambda r: rp.nearest_curve(curves, len(r.prompt))  # noqa: E731
    if mixed and config.startswith("remember:"):
        order = interleaved(records, sets)
        speedups = rp.replay_set(order, make_factory(config, curves)(), cost,
                                 growth_s_per_row=growth_s, end=end, vocab=vocab)
        out: dict[str, list[float]] = {s: [] for s in sets}
        for rec, speedup in zip(order, speedups, strict=True):
            out[rec.key.split("/")[0]].append(speedup)
        return out
    out = {}
    for set_name in sets:
        factory = make_factory(config, curves)
        if config.startswith("remember:"):
            factory = factory()  # one memory per set, starting empty
        chosen = [r for r in records if r.key.split("/")[0] == set_name]
        out[set_name] = rp.replay_set(chosen, factory, cost, growth_s_per_row=growth_s,
                                      end=end, vocab=vocab)
    return out


def run(args) -> None:
    records, curves = rp.load(args.recording)
    if args.smooth is not None:
        try:
            curves = rp.smooth_curves(curves, args.smooth)
        except ValueError as error:
            raise SystemExit(f"--smooth: {error}") from None
    end = rp.load_end(args.recording)
    if args.eog_token is not None:
        end = rp.AnswerEnd(args.eog_token, args.max_tokens or 192)
    elif end is not None and args.max_tokens:
        end = rp.AnswerEnd(end.eog_token, args.max_tokens)
    add_families(records)
    sets = list(dict.fromkeys(r.key.split("/")[0] for r in records))  # (recorded order)
    target = load_target(args.text_lookup, records) if args.text_lookup else None
    vocab = target.vocab if target is not None else None
    print(f"{'config':44s} " + "".join(f"{s:>20s}" for s in sets))
    for config in args.configs.split(","):
        results = speedups_per_set(records, curves, config, sets, args.mixed,
                                   args.growth_ms_per_row / 1000, end, vocab)
        cells = [f"{np.median(v):.3f}x ({np.mean(v):.3f})" for v in results.values()]
        print(f"{config:44s} " + "".join(f"{c:>20s}" for c in cells))
    print("median (mean) speedup over plain per prompt set; replayed, not timed"
          + ("; remember: one memory for all sets, interleaved" if args.mixed else ""))


def keys(args) -> None:
    """Per prompt set: lookup's proposal positions, how many of them propose from a key the
    answer proposed from before, and on ambiguous keys which choice of continuation is right
    (lsd_local/bench/lookup_keys.py)."""
    records, _ = rp.load(args.recording)
    key_lens = args.key_lens
    totals: dict[str, Counter] = {}
    for rec in records:
        sequence = np.array(rec.prompt + rec.answer, np.int32)
        proposed = lk.proposal_positions(sequence, len(rec.prompt))
        counts = totals.setdefault(rec.key.split("/")[0], Counter())
        counts["proposals"] += len(proposed)
        for n in key_lens:
            counts[f"key {n} recurs"] += lk.key_recurrence(sequence, proposed, n)[1]
        counts.update(lk.continuation_choices(sequence, len(rec.prompt), proposed))
    for set_name, c in totals.items():
        recur = ", ".join(f"{n} tokens {c[f'key {n} recurs']}" for n in key_lens)
        print(f"{set_name}: {c['proposals']} answer positions where lookup proposes; the key "
              f"proposed from before in the answer: {recur}; ambiguous ({MIN_NGRAM}-token key "
              f"continued differently before) {c['ambiguous']}: lookup's choice right "
              f"{c['lookup']}, the most frequent {c['frequent']}, the latest {c['latest']}; "
              f"k4v's gate passes {c['k4v drafts']}, what it drafts right {c['k4v right']}")


def _key_lens(value: str) -> list[int]:
    """--key-lens: positive integers joined by commas."""
    try:
        lens = [int(n) for n in value.split(",")]
    except ValueError:
        lens = []
    if not lens or min(lens) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: key lengths like 4,6,12")
    return lens


def load_target(path: str, records: list[rp.Recorded]):
    """The recording's target, for its vocabulary (a Vocab lives no longer than its Model;
    on the CPU, not repacked: its weights are mapped, not read). A model whose vocabulary
    lacks the recording's ids is refused: spelling them would abort llama.cpp."""
    from lsd_local.backend import LoadOptions, Model

    target = Model.load(path, LoadOptions(n_ctx=256, n_gpu_layers=0, no_repack=True))
    highest = max((max(r.prompt + r.answer) for r in records if r.prompt or r.answer),
                  default=-1)
    if highest >= target.vocab.n_tokens:
        target.close()
        raise SystemExit(f"--text-lookup {path}: its vocabulary has {target.vocab.n_tokens} "
                         f"tokens, the recording uses id {highest}: not its target")
    return target


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
    rep.add_argument("--mixed", action="store_true",
                     help="remember across all sets, answers interleaved")
    rep.add_argument("--eog-token", type=int, default=None,
                     help="the end-of-generation id that ended the recorded answers (saved "
                          "by `record` since it was kept; 151645 for Qwen2.5): drafts may "
                          "then run past an answer's end, as in the engine")
    rep.add_argument("--max-tokens", type=int, default=None,
                     help="the recording's max_tokens (with --eog-token; default 192)")
    rep.add_argument("--text-lookup", metavar="MODEL", default=None,
                     help="model text lookup (as the engine's lookup does where no token "
                          "n-gram matches) with the vocabulary of MODEL, the recording's target")
    rep.add_argument("--growth-ms-per-row", type=float, default=0.0,
                     help="one-time cost per logit row a batch adds beyond any before it in "
                          "the process (llama.cpp's growing logits buffer; 2.7 measured for "
                          "Qwen2.5 1.5B on the 2-core VM)")
    rep.add_argument("--smooth", type=float, default=None, metavar="SLOPE",
                     help="re-price the recording's curves without steps: t(n) = t(1) (1 + "
                          "SLOPE (n - 1)), a GPU's shape (0.005-0.02), each context keeping "
                          "its t(1)")
    key = sub.add_parser("keys", help="what a per-key n-gram memory could act on")
    key.add_argument("recording")
    key.add_argument("--key-lens", default="4,6,12", type=_key_lens,
                     help="key lengths whose recurrence within an answer is counted")
    args = parser.parse_args(argv)
    {"record": record, "run": run, "keys": keys}[args.command](args)


if __name__ == "__main__":
    main()
