"""lsd serve against `lsd run` and llama.cpp's llama-server, through the same OpenAI client on
the same prompts, interleaved (every prompt goes to every column before the next prompt).

    .venv/bin/python bench/serve_compare.py --llama-cpp ~/.cache/lsd-peers/build/bin \
        [--prompts 6] [--repeat 2] [--max-tokens 128] [--turns 5]

Columns: lsd serve (auto, with the draft), lsd serve plain, `lsd run --json` (auto and plain:
a process per prompt), llama-server plain, --spec-type ngram-simple and -md draft (K 4).
Streamed requests, greedy: time to first token (client side) and decode tokens/s (client
side: tokens after the first over the time after the first chunk; for lsd run, what it
reports). Then two conversations alternate for --turns turns each: at the last turn, prompt
tokens, tokens evaluated and prefill time, for lsd serve with and without its conversation
cache and for llama-server (its prompt cache in RAM). Needs the Qwen pair
(bench/fetch-models.sh) in $LSD_MODELS_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import openai

REPO = Path(__file__).resolve().parents[1]
MODELS = Path(os.environ.get("LSD_MODELS_DIR", "~/.cache/lsd/models")).expanduser()
TARGET = MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
CTX = "4096"
THREADS = "2"
FOLLOW_UPS = ["Make it shorter.", "Now add type hints.", "Explain it in two sentences.",
              "Write one test for it.", "Rename the function to solve."]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def lsd_serve(*args: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lsd_local", "serve", str(TARGET),
                             "--draft", str(DRAFT), "--ctx", CTX, "--threads", THREADS,
                             "--port", str(port), *args],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "ready at" in line:
            return proc, port
    raise SystemExit(f"lsd serve {args} did not start")


def repack_args() -> list[str]:
    """llama.cpp's -nr where lsd loads without extra buffer types (a CPU that traps AMX):
    both sides load the weights alike, and llama-server does not die on its first batch."""
    from lsd_local.backend.cpu_probe import repack_off

    return ["-nr"] if repack_off() else []


def llama_server(bin_dir: Path, *args: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([str(bin_dir / "llama-server"), "-m", str(TARGET), "-c", CTX,
                             "-t", THREADS, "-tb", THREADS, "--port", str(port), "-np", "1",
                             "--no-webui", *repack_args(), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    for _ in range(600):
        try:
            client.models.list()
            return proc, port
        except openai.APIError:
            time.sleep(0.2)  # (a benchmark script: llama-server has no ready line to wait for)
    raise SystemExit(f"llama-server {args} did not start")


def stream_once(port: int, messages: list[dict], max_tokens: int) -> dict:
    """One streamed greedy chat request: ttft and client-side decode tokens/s."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                           max_retries=0, timeout=600)
    start = time.perf_counter()
    first = end = None
    text, usage, lsd = [], None, None
    for chunk in client.chat.completions.create(
            model="m", messages=messages, max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True}):
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
            text.append(chunk.choices[0].delta.content)
        if chunk.choices and chunk.choices[0].finish_reason:
            end = time.perf_counter()
            lsd = (chunk.model_extra or {}).get("lsd")
        if chunk.usage:
            usage = chunk.usage
    tokens = usage.completion_tokens
    return {"ttft": first - start, "tok_s": (tokens - 1) / (end - first), "tokens": tokens,
            "text": "".join(text), "server_tok_s": lsd["decode_tokens_per_second"] if lsd
            else None}


def lsd_run_once(messages: list[dict], max_tokens: int, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "lsd_local", "run", "--json", "-m", str(TARGET), "--draft",
         str(DRAFT), "--ctx", CTX, "--threads", THREADS, "--max-tokens", str(max_tokens),
         *args, messages[-1]["content"]], capture_output=True, text=True, check=True)
    stats = json.loads(proc.stdout)["stats"]
    return {"tok_s": stats["decode_tokens_per_second"], "ttft": None,
            "tokens": stats["generated_tokens"], "text": json.loads(proc.stdout)["text"]}


def load_prompts(count: int) -> list[list[dict]]:
    rows = [json.loads(line) for line in (REPO / "bench/humaneval.jsonl").open()]
    return [row["messages"] for row in rows if row["split"] == "test"][:count]


def compare_speed(columns: dict, prompts: list, repeat: int, max_tokens: int) -> dict:
    results = {name: [] for name in columns}
    for r in range(repeat):
        for i, messages in enumerate(prompts):
            for name, call in columns.items():
                got = call(messages, max_tokens)
                got["first_repeat"] = r == 0
                results[name].append(got)
                print(f"repeat {r} prompt {i} {name:26s} ttft "
                      f"{got['ttft'] if got['ttft'] is not None else float('nan'):6.3f} s  "
                      f"{got['tok_s']:6.1f} tok/s  ({got['tokens']} tokens)", flush=True)
    return results


def conversation_turns(port: int, turns: int, max_tokens: int, prompts: list) -> list[dict]:
    """Two conversations, alternating; per turn: prompt tokens, evaluated, prefill ms."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                           max_retries=0, timeout=600)
    talks = [list(prompts[0]), list(prompts[1])]
    out = []
    for turn in range(turns):
        for talk in talks:
            if turn:
                talk.append({"role": "user", "content": FOLLOW_UPS[turn % len(FOLLOW_UPS)]})
            answer = client.chat.completions.create(model="m", messages=talk,
                                                    max_tokens=max_tokens, temperature=0)
            talk.append({"role": "assistant", "content": answer.choices[0].message.content})
            extra = answer.model_extra or {}
            if "lsd" in extra:
                cached = answer.usage.prompt_tokens_details.cached_tokens
                evaluated = answer.usage.prompt_tokens - cached
                prefill_ms = extra["lsd"]["prefill_seconds"] * 1000
            else:  # llama-server's own timings
                evaluated = extra["timings"]["prompt_n"]
                prefill_ms = extra["timings"]["prompt_ms"]
            out.append({"turn": turn + 1, "prompt_tokens": answer.usage.prompt_tokens,
                        "evaluated": evaluated, "prefill_ms": prefill_ms})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp build/bin")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    servers = {
        "lsd serve auto": lsd_serve(),
        "lsd serve plain": lsd_serve("--drafter", "none"),
        "llama-server plain": llama_server(args.llama_cpp),
        "llama-server ngram-simple": llama_server(args.llama_cpp, "--spec-type", "ngram-simple",
                                                  "--spec-draft-n-max", "16"),
        "llama-server draft K4": llama_server(args.llama_cpp, "-md", str(DRAFT),
                                              "--spec-draft-n-max", "4"),
    }
    try:
        columns = {name: (lambda m, n, port=port: stream_once(port, m, n))
                   for name, (_, port) in servers.items()}
        columns["lsd run auto"] = lambda m, n: lsd_run_once(m, n)
        columns["lsd run plain"] = lambda m, n: lsd_run_once(m, n, "--drafter", "none")
        prompts = load_prompts(args.prompts)
        results = compare_speed(columns, prompts, args.repeat, args.max_tokens)
        report(results)
        conversations(servers, args, load_prompts(2))
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()


def report(results: dict) -> None:
    print("\nmedians over prompts and repeats (ttft: first repeat only)")
    for name, rows in results.items():
        ttfts = [r["ttft"] for r in rows if r["first_repeat"] and r["ttft"] is not None]
        speeds = [r["tok_s"] for r in rows]
        served = [r["server_tok_s"] for r in rows if r.get("server_tok_s")]
        print(f"  {name:26s} decode {statistics.median(speeds):6.1f} tok/s "
              f"(min {min(speeds):.1f}, max {max(speeds):.1f})"
              + (f"  ttft {statistics.median(ttfts):.3f} s" if ttfts else "")
              + (f"  server-side {statistics.median(served):.1f} tok/s" if served else ""))
    texts = {name: [r["text"] for r in rows] for name, rows in results.items()}
    for a, b in (("lsd serve plain", "llama-server plain"), ("lsd serve auto", "lsd run auto")):
        same = sum(x == y for x, y in zip(texts[a], texts[b], strict=True))
        print(f"  {a} answers == {b} answers: {same} of {len(texts[a])} "
              "(greedy speculation differs from plain only at near-ties of batched logits)")


def conversations(servers: dict, args, prompts: list) -> None:
    print(f"\ntwo alternating conversations, {args.turns} turns each, 64 tokens per answer")
    extra = {"lsd serve, no state cache": lsd_serve("--state-cache", "0")}
    try:
        for name, port in [("lsd serve auto", servers["lsd serve auto"][1]),
                           ("lsd serve, no state cache", extra["lsd serve, no state cache"][1]),
                           ("llama-server plain", servers["llama-server plain"][1])]:
            rows = conversation_turns(port, args.turns, 64, prompts)
            for row in rows[-2:]:
                print(f"  {name:26s} turn {row['turn']}: {row['prompt_tokens']} prompt tokens, "
                      f"{row['evaluated']} evaluated, prefill {row['prefill_ms']:.0f} ms")
    finally:
        for proc, _ in extra.values():
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    if not TARGET.exists():
        raise SystemExit(f"{TARGET} missing: run bench/fetch-models.sh")
    main()
