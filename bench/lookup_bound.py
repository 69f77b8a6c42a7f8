"""How close auto comes to what lsd's lookup could make of an answer if it knew it, timed
on this machine, beside llama.cpp's n-gram types.

    .venv/bin/python bench/lookup_bound.py MODEL --draft DRAFT --prompts humaneval --limit 8 \\
        [--max-tokens 192] [--threads 2] [--llama-cpp ~/llama.cpp/build/bin] [--json out.json]

Per prompt, interleaved (plain, auto, bound, then each llama.cpp type): lsd plain greedy;
`strict:auto` as users run it (the draft model loaded when given); "bound", the proposal of
the engine's own lookup drafter (token n-grams, text lookup, stops), at most 63 tokens, cut
exactly where plain's answer parts from it: no drafted token fails and no round that could
draft steps plainly (replay_auto.py's `cut:63`, timed in the real engine on this hour's
batch costs instead of replayed on a recorded curve); and, with --llama-cpp,
llama-speculative-simple with each n-gram type on the same prompt bytes (`lsd bench
--llama-cpp`'s commands, -nr included where lsd loads so). Prints each one's decode speed
over plain per prompt ("*": its answer differs from plain's, near ties scored in a batch)
and the medians, the bound and auto over the fastest type per prompt, and auto over the
bound; each also over the prompts whose answers equal plain's (like with like: where the
bound's own answer parts from plain's, every proposal after that point is cut, so there it
is no bound).

The bound always drafts the whole proposal that holds (stopping short of a dearer block size
could gain a little more), and a run of 8 prompts moves by several percent: read it as where
lsd's lookup tops out on this machine, not to the percent. Other sources of drafts (the
draft model, past requests) are not in it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from lsd_local import Engine
from lsd_local.backend.cpu_probe import repack_off
from lsd_local.bench.external import run_command
from lsd_local.bench.prompts import PromptItem, load_set
from lsd_local.bench.report import same_answer
from lsd_local.cli.bench import llama_cpp_externals
from lsd_local.config import AUTO_LOOKUP_CAP
from lsd_local.drafters.base import Draft, Drafter
from lsd_local.errors import LsdError

BOUND_K = AUTO_LOOKUP_CAP  # the longest lookup draft auto may choose (63)
TYPES = "ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod"
N_CTX = 4096


class AnswerCut(Drafter):
    """A lookup drafter's proposal cut where it parts from a known answer (int32[m], the
    tokens after the prompt). Every call the generation makes reaches the lookup too."""

    name = "lookup"

    def __init__(self, lookup: Drafter, answer: Sequence[int]) -> None:
        self.lookup, self.answer = lookup, np.asarray(answer, np.int32)
        self.n_prompt = 0

    def begin(self, family: str | None = None, n_prompt: int | None = None) -> None:
        if n_prompt is None:
            raise ValueError("the bound needs the prompt's length to align the answer")
        self.n_prompt = n_prompt
        self.lookup.begin(family, n_prompt)

    def propose(self, history: np.ndarray, k: int, sampler=None, rng=None,
                grammar=None) -> Draft:
        """history: int32[n], the prompt and the answer so far; at most k tokens."""
        proposal = self.lookup.propose(history, k, sampler, rng, grammar)
        done = len(history) - self.n_prompt
        ahead = self.answer[done:done + len(proposal)]
        parted = np.flatnonzero(ahead != proposal.tokens[:len(ahead)])
        kept = int(parted[0]) if len(parted) else len(ahead)
        return replace(proposal, tokens=proposal.tokens[:kept])

    def accept(self, n_drafted: int, n_accept: int, verify_seconds: float,
               grew_logits: bool = False) -> None:
        self.lookup.accept(n_drafted, n_accept, verify_seconds, grew_logits)

    def end(self, history: np.ndarray, n_prompt: int | None = None) -> None:
        self.lookup.end(history, n_prompt)

    def use_suffix_index(self, index) -> None:
        self.lookup.use_suffix_index(index)

    def reset(self) -> None:
        self.lookup.reset()


def bound_drafter(engine: Engine, answer: Sequence[int]) -> AnswerCut:
    """Configure `engine` (one sequence) with a fresh lookup drafter, cut where `answer`
    (plain's tokens) parts from it, at K = BOUND_K, for the next generation."""
    engine.configure(drafter="lookup", k=BOUND_K, rule="strict", fresh_drafter=True)
    cut = AnswerCut(engine.drafter, answer)  # (the engine's lookup: text lookup, stops)
    engine.configure(drafter=cut, k=BOUND_K)  # (a Drafter of one's own)
    return cut


def run_lsd(engine: Engine, item: PromptItem, drafter: str, max_tokens: int,
            plain_answer: Sequence[int] | None = None) -> dict:
    """One generation of `item` by lsd: drafter "none", "auto" or "bound" (which needs
    plain's answer); speed, answer and drafting counters."""
    engine.suffix_index = None  # (no other configuration's answer to draft from)
    if drafter == "bound":
        bound_drafter(engine, plain_answer or [])
    else:
        engine.configure(drafter=drafter, rule="strict", fresh_drafter=True)
    engine.reset()  # every configuration pays the same prefill
    gen = engine.generate(list(item.messages), max_tokens=max_tokens).run()
    s = gen.stats
    return {"tps": s.decode_tokens_per_second, "tokens": list(gen.tokens), "text": gen.text,
            "finish_reason": gen.finish_reason, "drafted": s.drafted, "accepted": s.accepted,
            "draft_lengths": {str(k): v for k, v in sorted(s.draft_lengths.items())}}


def run_types(engine: Engine, item: PromptItem, commands: dict[str, str], values: dict,
              max_tokens: int) -> dict[str, dict]:
    """Each llama.cpp command on the prompt bytes lsd evaluates: speed and answer text (a
    command that fails is a column without speed or answer, not the end of the run)."""
    prompt = engine.prompt_text(list(item.messages))
    out = {}
    for name, command in commands.items():
        try:
            row = run_command(name, command, prompt, values, max_tokens)
        except LsdError as error:
            row = {"error": str(error)}
        out[name] = {"tps": row.get("tps") or 0.0, "text": row.get("text"),
                     "may_run_past": bool(row.get("may_run_past")), "error": row.get("error")}
    return out


def measure(engine: Engine, items: Sequence[PromptItem], commands: dict[str, str],
            values: dict, max_tokens: int, json_path: str | None = None) -> list[dict]:
    """Per prompt, every column interleaved; printed, and written to `json_path`, as it goes."""
    rows = []
    for item in items:
        row = {"id": f"{item.set_name}/{item.id}", "plain": run_lsd(engine, item, "none",
                                                                     max_tokens)}
        row["auto"] = run_lsd(engine, item, "auto", max_tokens)
        row["bound"] = run_lsd(engine, item, "bound", max_tokens, row["plain"]["tokens"])
        row.update(run_types(engine, item, commands, values, max_tokens))
        rows.append(row)
        print(row_line(row, ["auto", "bound", *commands]), flush=True)
        if json_path:
            Path(json_path).write_text(json.dumps(rows))
    return rows


def ratio(a: float, b: float) -> float | None:
    """a / b, or None where either measured nothing (a command that failed)."""
    return a / b if a > 0 and b > 0 else None


def equal(row: dict, name: str) -> bool:
    """Whether column `name` wrote plain's answer (report.same_answer: a llama.cpp command
    may write past a limit that cut plain's)."""
    return row[name].get("text") is not None and same_answer(row[name], row["plain"])


def row_line(row: dict, names: list[str]) -> str:
    """A prompt's speeds over plain, "*" where the answer differs from plain's."""
    cells = []
    for name in names:
        speed = ratio(row[name]["tps"], row["plain"]["tps"])
        shown = "failed" if speed is None else f"{speed:.3f}"
        cells.append(f"{name} {shown}" + ("" if equal(row, name) else "*"))
    return f"{row['id']:28s} " + "  ".join(cells) + \
        f"  bound drafted {row['bound']['draft_lengths']}"


def median_line(label: str, pairs: list[tuple[float | None, bool]]) -> str:
    """`label`: the median of the ratios, then over those whose answers are equal."""
    every = [r for r, _ in pairs if r is not None]
    same = [r for r, eq in pairs if r is not None and eq]
    text = f"{label}: {statistics.median(every):.3f}x" if every else f"{label}: -"
    return text + (f" ({statistics.median(same):.3f}x over the {len(same)} with equal "
                   "answers)" if same else " (no equal answers)")


def summary(rows: list[dict], types: list[str]) -> list[str]:
    """Median speeds over plain; the bound and auto over the fastest type per prompt; auto
    over the bound; each also over the prompts where both answers equal plain's."""
    lines = [median_line(f"{name} over plain", [(ratio(r[name]["tps"], r["plain"]["tps"]),
                                                 equal(r, name)) for r in rows])
             for name in ["auto", "bound", *types]]
    for name in ("bound", "auto") if types else ():
        pairs = []
        for r in rows:
            fastest = max(types, key=lambda t, r=r: r[t]["tps"])
            pairs.append((ratio(r[name]["tps"], r[fastest]["tps"]),
                          equal(r, name) and equal(r, fastest)))
        lines.append(median_line(f"{name} over the fastest type per prompt", pairs))
    lines.append(median_line("auto over the bound per prompt", [
        (ratio(r["auto"]["tps"], r["bound"]["tps"]), equal(r, "auto") and equal(r, "bound"))
        for r in rows]))
    return lines


def type_commands(folder: str | None, types: list[str], no_repack: bool) -> dict[str, str]:
    """`lsd bench --llama-cpp`'s command for each n-gram type asked."""
    known = dict(entry.split("=", 1) for entry in llama_cpp_externals(folder, None, no_repack))
    unknown = [t for t in types if not t.startswith("ngram-") or f"llama.cpp:{t}" not in known]
    if unknown:
        raise SystemExit(f"unknown --types {','.join(unknown)} (of {TYPES}, ngram-cache)")
    return {t: known[f"llama.cpp:{t}"] for t in types}


def main(argv: list[str] | None = None) -> None:
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
    parser.add_argument("--json", default=None, help="every run, written as it goes")
    args = parser.parse_args(argv)
    types = args.types.split(",") if args.llama_cpp else []
    commands = type_commands(args.llama_cpp, types, bool(types) and repack_off())
    values = {"max_tokens": args.max_tokens, "n_predict": max(args.max_tokens - 1, 1),
              "target": args.model, "draft": args.draft or "",
              "threads": args.threads or os.cpu_count(), "ctx": N_CTX}
    items = [item for name in args.prompts.split(",")
             for item in load_set(name, args.split, args.limit)]
    with Engine.load(args.model, draft=args.draft, n_threads=args.threads,
                     n_ctx=N_CTX) as engine:
        rows = measure(engine, items, commands, values, args.max_tokens, args.json)
    print("\n".join(summary(rows, types)))


if __name__ == "__main__":
    sys.exit(main())
