"""How close auto comes to the best any choice of K could make of lsd's lookup, timed on
this machine, beside llama.cpp's n-gram types.

    .venv/bin/python bench/lookup_bound.py MODEL --draft DRAFT --prompts humaneval --limit 8 \\
        [--max-tokens 192] [--threads 2] [--llama-cpp ~/llama.cpp/build/bin] [--json out.json]

Per prompt, interleaved (plain, auto, bound, then each llama.cpp type): lsd plain greedy;
`strict:auto` as users run it (the draft model loaded when given); "bound", the lookup
proposal of the engine's own lookup drafter (token n-grams, text lookup, stops), at most 63
tokens, cut exactly where plain's answer parts from it: no drafted token fails and no round
that could draft steps plainly (replay_auto.py's `cut:63`, timed in the real engine on this
hour's batch costs instead of replayed on a recorded curve); and, with --llama-cpp,
llama-speculative-simple with each n-gram type on the same prompt bytes (`lsd bench
--llama-cpp`'s commands). Prints each one's decode speed over plain per prompt ("*": its
answer differs from plain's, near ties scored in a batch) and the medians, the bound and
auto over the fastest type per prompt, and auto over the bound.

A goal above the bound over the best type is out of reach for lsd's lookup on this machine,
whatever policy chooses K (not for other sources of drafts: the draft model, past requests).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

from lsd_local import Engine
from lsd_local.bench.external import run_command
from lsd_local.bench.prompts import load_set
from lsd_local.bench.replay import CutLookup
from lsd_local.cli.bench import LLAMA_CPP_COMMANDS
from lsd_local.config import AUTO_LOOKUP_CAP

BOUND_K = AUTO_LOOKUP_CAP  # the longest lookup draft auto may choose (63)
TYPES = "ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod"
N_CTX = 4096


def bound_drafter(engine: Engine, answer: list[int], prompt_ids: list[int]) -> CutLookup:
    """Configure `engine` (one sequence) for lookup at K = BOUND_K with a fresh drafter and
    put in its place that drafter's proposals cut where `answer` (plain's tokens after
    `prompt_ids`) parts from them, for the next generation."""
    engine.configure(drafter="lookup", k=BOUND_K, rule="strict", fresh_drafter=True)
    cut = CutLookup(BOUND_K)
    cut.lookup = engine.drafter  # (built by the pool: text lookup and the vocabulary's stops)
    cut.know(np.asarray(list(prompt_ids) + list(answer), np.int32))
    # the generation asks the sequence's pool for its configuration's drafter: this one
    engine._pools[0]._built[engine.drafter_config] = cut  # (private: a bench's hook, tested)
    return cut


def run_lsd(engine: Engine, item, drafter: str, max_tokens: int,
            plain_answer: list[int] | None = None) -> dict:
    """One generation of `item` by lsd: drafter "none", "auto" or "bound" (which needs
    plain's answer); speed, answer and drafting counters."""
    engine.suffix_index = None  # (no other configuration's answer to draft from)
    if drafter == "bound":
        bound_drafter(engine, plain_answer or [], engine.prompt_tokens(list(item.messages)))
    else:
        engine.configure(drafter=drafter, rule="strict", fresh_drafter=True)
    engine.reset()  # every configuration pays the same prefill
    gen = engine.generate(list(item.messages), max_tokens=max_tokens).run()
    s = gen.stats
    return {"tps": s.decode_tokens_per_second, "tokens": list(gen.tokens), "text": gen.text,
            "drafted": s.drafted, "accepted": s.accepted,
            "draft_lengths": {str(k): v for k, v in sorted(s.draft_lengths.items())}}


def run_types(engine: Engine, item, commands: dict[str, str], values: dict,
              max_tokens: int) -> dict[str, dict]:
    """Each llama.cpp command on the prompt bytes lsd evaluates: speed and answer text."""
    prompt = engine.prompt_text(list(item.messages))
    out = {}
    for name, command in commands.items():
        row = run_command(name, command, prompt, values, max_tokens)
        out[name] = {"tps": row.get("tps") or 0.0, "text": row.get("text")}
    return out


def measure(engine: Engine, items, commands: dict[str, str], values: dict,
            max_tokens: int) -> list[dict]:
    """Per prompt, every column interleaved; printed as it goes."""
    rows = []
    for item in items:
        row = {"id": f"{item.set_name}/{item.id}", "plain": run_lsd(engine, item, "none",
                                                                     max_tokens)}
        row["auto"] = run_lsd(engine, item, "auto", max_tokens)
        row["bound"] = run_lsd(engine, item, "bound", max_tokens, row["plain"]["tokens"])
        row.update(run_types(engine, item, commands, values, max_tokens))
        rows.append(row)
        print(row_line(row, ["auto", "bound", *commands]), flush=True)
    return rows


def row_line(row: dict, names: list[str]) -> str:
    plain = row["plain"]
    cells = [f"{name} {row[name]['tps'] / plain['tps']:.3f}"
             + ("" if row[name]["text"] == plain["text"] else "*") for name in names]
    return f"{row['id']:28s} " + "  ".join(cells) + \
        f"  bound drafted {row['bound']['draft_lengths']}"


def summary(rows: list[dict], types: list[str]) -> list[str]:
    """Median speeds over plain; the bound and auto over the fastest type per prompt; auto
    over the bound."""
    def median(ratios):
        return statistics.median(ratios) if ratios else float("nan")

    lines = [f"{name:24s} {median([r[name]['tps'] / r['plain']['tps'] for r in rows]):.3f}x "
             "plain (median)" for name in ["auto", "bound", *types]]
    if types:
        for name in ("bound", "auto"):
            over = [r[name]["tps"] / max(r[t]["tps"] for t in types) for r in rows
                    if max(r[t]["tps"] for t in types) > 0]
            lines.append(f"{name} over the fastest type per prompt: {median(over):.3f}x")
    lines.append("auto over the bound per prompt: "
                 f"{median([r['auto']['tps'] / r['bound']['tps'] for r in rows]):.3f}x")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--draft", default=None, help="the draft model auto may use")
    parser.add_argument("--prompts", default="humaneval")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--llama-cpp", default=None, help="llama.cpp build/bin")
    parser.add_argument("--types", default=TYPES, help="llama.cpp n-gram types to time")
    parser.add_argument("--json", default=None, help="every run, written here")
    args = parser.parse_args(argv)
    types = args.types.split(",") if args.llama_cpp else []
    unknown = [t for t in types if f"llama.cpp:{t}" not in LLAMA_CPP_COMMANDS]
    if unknown:
        raise SystemExit(f"unknown --types {','.join(unknown)} (of {TYPES}, ngram-cache)")
    commands = {t: LLAMA_CPP_COMMANDS[f"llama.cpp:{t}"].format(bin=args.llama_cpp)
                for t in types}
    values = {"max_tokens": args.max_tokens, "n_predict": max(args.max_tokens - 1, 1),
              "target": args.model, "draft": args.draft or "",
              "threads": args.threads or os.cpu_count(), "ctx": N_CTX}
    items = [item for name in args.prompts.split(",")
             for item in load_set(name, args.split, args.limit)]
    with Engine.load(args.model, draft=args.draft, n_threads=args.threads,
                     n_ctx=N_CTX) as engine:
        rows = measure(engine, items, commands, values, args.max_tokens)
    print("\n".join(summary(rows, types)))
    if args.json:
        Path(args.json).write_text(json.dumps(rows))


if __name__ == "__main__":
    sys.exit(main())
