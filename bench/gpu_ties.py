"""Where a strict speculative answer parts from plain greedy decoding, how close plain's top
two logits were there: on a GPU llama.cpp scores a token in a block with other kernels than
alone (quantized weights: other activation quantization and accumulation order), so the two
can differ where the top two nearly tie, and only there.

    python bench/gpu_ties.py MODEL PROMPT plain.json other.json [other.json ...]

The JSON files are `lsd run --json` answers to PROMPT (bench/gpu_check.sh writes them).
For each other answer: the first index where it differs, plain's logit margin between its
token and the other's there (scored one token at a time after the common prefix), and the
largest margin over plain's tokens before it, for scale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def margins(model_path: str, prompt: str, tokens: list[int]) -> np.ndarray:
    """float32[len(tokens)]: at each answer position, the top logit minus the second one,
    every position scored alone (one token per decode), as plain decoding scores it."""
    from lsd_local import Engine

    with Engine.load(model_path, drafter="none") as eng:
        context = eng.prompt_tokens(prompt)
        slot = eng.target.slots[0]
        slot.truncate(0)
        slot.decode(np.asarray(context[:-1], np.int32), 0, 0)
        out, sequence = [], list(context) + list(tokens)
        for i in range(len(context) - 1, len(sequence) - 1):
            row = slot.decode(np.asarray(sequence[i:i + 1], np.int32), i, 1)[0]
            top = np.sort(row)[-2:]
            out.append(float(top[1] - top[0]))
        return np.asarray(out, np.float32)


def first_difference(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def main() -> None:
    model_path, prompt, plain_path, *others = sys.argv[1:]
    plain = json.loads(Path(plain_path).read_text())["tokens"]
    gaps = margins(model_path, prompt, plain)
    for path in others:
        tokens = json.loads(Path(path).read_text())["tokens"]
        at = first_difference(tokens, plain)
        if at >= min(len(tokens), len(plain)):
            print(f"{Path(path).name}: equal to plain over {at} tokens")
            continue
        print(f"{Path(path).name}: parts from plain at token {at}; plain's top-2 margin there "
              f"{gaps[at]:.4f} (median over the tokens before it {np.median(gaps[:at]):.3f}, "
              f"smallest {gaps[:at].min():.4f})")


if __name__ == "__main__":
    main()
