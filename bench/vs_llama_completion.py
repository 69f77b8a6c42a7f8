"""`lsd run` plain decoding against llama.cpp's `llama-completion` on the same prompt, as a
user would run each: one process per run, interleaved (lsd, llama.cpp, lsd, ...).

    .venv/bin/python bench/vs_llama_completion.py --llama-cpp DIR [--model PATH ...]
                                                  [--repeat 5] [--tokens 128] [--threads 2]

lsd runs `lsd run --raw --drafter none --json --fresh` and its decode speed is what it
reports (every round: decode, choosing the token, text); llama-completion runs greedy with
the same thread count, `--ignore-eos` and as many tokens as lsd generated, and its speed is
its `eval time` line, which leaves its sampling time out (the stricter comparison), or with
its `sampling time` added (like for like). Both exclude the prompt. Prints each pair and, per
model, the medians of lsd / llama-completion.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_compare import repack_args  # noqa: E402

MODELS = Path(os.environ.get("LSD_MODELS_DIR", "~/.cache/lsd/models")).expanduser()
DEFAULT_MODELS = ("smollm2-135m-instruct-q4_1.gguf", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
PROMPT = ("Copy this text exactly, word for word: Speculative decoding lets a small draft "
          "propose tokens that a large model checks in one pass, and a verifier keeps them.")
EVAL_LINE = re.compile(r"\seval time =\s*([0-9.]+) ms /\s*(\d+) runs")
SAMPLING_LINE = re.compile(r"\ssampling time =\s*([0-9.]+) ms")


def run_lsd(model: Path, prompt: str, tokens: int, threads: int) -> tuple[float, int]:
    """(decode tok/s lsd reported, tokens generated)."""
    cmd = [sys.executable, "-m", "lsd_local", "run", str(model), "--raw", "--drafter", "none",
           "--json", "--fresh", "-n", str(tokens), "-t", str(threads), "-"]
    proc = subprocess.run(cmd, input=prompt, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise SystemExit(f"lsd run failed:\n{proc.stderr[-2000:]}")
    stats = json.loads(proc.stdout)["stats"]
    return stats["decode_tokens_per_second"], stats["generated_tokens"]


def run_llama(binary: Path, model: Path, prompt_file: Path, tokens: int,
              threads: int) -> tuple[float, float]:
    """(decode tok/s from the eval time line, the same with the sampling time added)."""
    cmd = [str(binary), "-m", str(model), "-f", str(prompt_file), "-n", str(tokens),
           "-t", str(threads), "--temp", "0", "--ignore-eos", "-no-cnv", "--no-escape",
           *repack_args()]  # (--no-escape: the prompt's bytes as lsd reads them)
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=900)
    found = EVAL_LINE.search(proc.stdout + proc.stderr)
    if proc.returncode or not found:
        raise SystemExit(f"llama-completion failed:\n{(proc.stderr or proc.stdout)[-2000:]}")
    sampling = SAMPLING_LINE.search(proc.stdout + proc.stderr)
    runs, eval_ms = int(found.group(2)), float(found.group(1))
    sampling_ms = float(sampling.group(1)) if sampling else 0.0
    return runs / eval_ms * 1e3, runs / (eval_ms + sampling_ms) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, required=True,
                        help="folder holding llama-completion")
    parser.add_argument("--model", type=Path, action="append")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", default=PROMPT)
    args = parser.parse_args()
    binary = args.llama_cpp.expanduser() / "llama-completion"
    models = args.model or [MODELS / name for name in DEFAULT_MODELS]
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = Path(tmp) / "prompt.txt"
        prompt_file.write_text(args.prompt)
        for model in models:
            ratios, ratios_sampling = [], []
            for i in range(args.repeat):
                lsd, n = run_lsd(model, args.prompt, args.tokens, args.threads)
                llama, llama_sampling = run_llama(binary, model, prompt_file, n, args.threads)
                ratios.append(lsd / llama)
                ratios_sampling.append(lsd / llama_sampling)
                print(f"{model.name} {i + 1}: lsd {lsd:.1f} tok/s, llama-completion "
                      f"{llama:.1f} tok/s ({llama_sampling:.1f} with sampling; {n} tokens): "
                      f"{lsd / llama:.3f}", flush=True)
            print(f"{model.name}: median lsd / llama-completion {statistics.median(ratios):.3f} "
                  f"(min {min(ratios):.3f}, max {max(ratios):.3f}); with its sampling time "
                  f"{statistics.median(ratios_sampling):.3f}", flush=True)


if __name__ == "__main__":
    main()
