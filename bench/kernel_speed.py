"""What each numba kernel buys over its numpy reference, per call and per round, on real
logit rows of a model (Qwen2.5-Coder's 151,936-token vocabulary by default).

    .venv/bin/python bench/kernel_speed.py [--model PATH] [--repeat 200]

It scores one HumanEval-style prompt plus 8 greedy tokens in one block (9 real rows), then
times every kernel on the request path and its reference on those rows (the median of
`--repeat` calls each, interleaved kernel/reference): FLy and ASD on a K = 8 block whose
draft mismatches at position 3 (a row whose entropy FLy must read), the draft model's
stopping test (top-10 share), the grammar's best-first candidates (top 16), the sampler's
top-k (40) and the entropy FLy reads when sampling, and prompt lookup over a 2,000-token
history. Both sides must give the same answer (checked).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from lsd_local.backend import LoadOptions, Model
from lsd_local.config import RUN_CAP
from lsd_local.kernels.asd import asd_kernel, asd_reference
from lsd_local.kernels.fly import fly_kernel, fly_reference
from lsd_local.kernels.lookup import lookup_match, lookup_reference
from lsd_local.kernels.rows import (
    row_entropy,
    row_entropy_reference,
    row_top,
    row_top_reference,
    row_top_share,
    row_top_share_reference,
)
from lsd_local.kernels.warmup import load_kernels_now

DEFAULT_MODEL = Path("~/.cache/lsd/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
PROMPT = ("<|im_start|>user\nComplete this function.\n\ndef has_close_elements(numbers, "
          "threshold):\n    \"\"\"Check if any two numbers are closer than threshold.\"\"\"\n"
          "<|im_end|>\n<|im_start|>assistant\n")


def real_block(model: Model, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(logits float32[k+1, V] copied, the greedy draft int32[k] they score)."""
    tokens = model.vocab.tokenize(PROMPT, add_special=False)
    row = model.decode(np.asarray(tokens, np.int32), 0, 1)
    greedy = []
    for _ in range(k):
        greedy.append(int(np.argmax(row[-1])))
        row = model.decode(np.array([greedy[-1]], np.int32), model.n_cached, 1)
    model.truncate(len(tokens))
    block = np.asarray([tokens[-1]] + greedy, np.int32)
    model.truncate(len(tokens) - 1)
    logits = model.decode(block, model.n_cached, k + 1).copy()
    return logits, np.asarray(greedy, np.int32)


def timed(call, repeat: int) -> tuple[float, object]:
    """Median seconds of `call()` and its last answer."""
    times, answer = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), answer


def same(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, float) and isinstance(b, float):
        return bool(np.isclose(a, b, rtol=1e-6, atol=1e-9, equal_nan=True))
    return a == b


def cases(logits: np.ndarray, draft: np.ndarray, history: np.ndarray) -> list[tuple]:
    """(name, per round, kernel call, reference call) for every kernel on the request path."""
    wrong = draft.copy()
    wrong[2] = (wrong[2] + 1) % logits.shape[1]  # a mismatch FLy and ASD must judge
    loose = np.zeros(len(draft), np.uint8)
    row = logits[0]
    out = np.zeros(32, np.int32)
    return [
        # the kernels take every row's argmax from the caller (numpy's SIMD argmax): counted
        ("FLy, K 8 block", "per round", lambda: fly_kernel(logits, logits.argmax(axis=1),
                                                           wrong, 0.0, 4, 3, False, loose),
         lambda: fly_reference(logits, wrong, 0.0, 4, 3, False)[:2]),
        ("ASD, K 8 block", "per round", lambda: asd_kernel(logits, logits.argmax(axis=1),
                                                           wrong, 0.0, 1e9, 2, 1e9, loose)[:2],
         lambda: asd_reference(logits, wrong, 0.0, 1e9, 2, 1e9)[:2]),
        ("draft model p_min test (top-10 share)", "per drafted token",
         lambda: row_top_share(row, 10), lambda: row_top_share_reference(row, 10)),
        ("grammar candidates (top 16)", "per constrained row", lambda: row_top(row, 16),
         lambda: row_top_reference(row, 16)),
        ("sampler top-k 40", "per sampled row", lambda: row_top(row, 40),
         lambda: row_top_reference(row, 40)),
        ("FLy entropy (top 3), sampling", "per deferred mismatch",
         lambda: row_entropy(row, row[int(np.argmax(row))], 3, False),
         lambda: row_entropy_reference(row, 3, False)),
        ("prompt lookup, 2,000 tokens", "per round",
         lambda: lookup_match(history, 12, 6, 32, RUN_CAP, out)[1:],
         lambda: lookup_reference(history, 12, 6, 32)[1:]),
    ]


def request_costs(logits: np.ndarray, draft: np.ndarray, repeat: int) -> None:
    """What a request's own options cost when asked (no kernel, no reference): logprobs per
    committed token, penalties and a logit bias per K 8 block."""
    from lsd_local.config import PenaltySettings
    from lsd_local.verify.logprobs import token_logprobs
    from lsd_local.verify.penalties import penalize_block

    history = np.random.default_rng(1).integers(0, logits.shape[1], 600).astype(np.int32)
    penalties = PenaltySettings(1.1, 64, 0.5, 0.5, ((13, -2.0), (271, 1.0)))
    work = logits.copy()
    for name, call in (
            ("logprobs, one token, 5 alternatives", lambda: token_logprobs(
                logits[:1], [int(draft[0])], 5)),
            ("logprobs, one token, no alternatives", lambda: token_logprobs(
                logits[:1], [int(draft[0])], 0)),
            ("penalties + 2 biases, a K 8 block", lambda: penalize_block(
                work, history, draft, penalties))):
        seconds, _ = timed(call, repeat)
        print(f"{name:40} {'when asked':22} {seconds * 1e6:7.1f}us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if not load_kernels_now():
        sys.exit("the numba kernels did not load")
    model = Model.load(args.model.expanduser(), LoadOptions(n_ctx=1024, n_threads=args.threads))
    logits, draft = real_block(model, 8)
    model.close()
    rng = np.random.default_rng(0)
    history = rng.integers(0, 2000, 2000).astype(np.int32)  # no long match: a full scan
    print(f"{args.model.name}: V = {logits.shape[1]}, median of {args.repeat} calls")
    request_costs(logits, draft, args.repeat)
    print(f"{'kernel':40} {'when':22} {'numba':>9} {'numpy':>9} {'saves':>9}")
    for name, when, kernel, reference in cases(logits, draft, history):
        fast, got = timed(kernel, args.repeat)
        slow, want = timed(reference, args.repeat)
        if not same(got, want):
            sys.exit(f"{name}: the kernel answered {got}, the reference {want}")
        print(f"{name:40} {when:22} {fast * 1e6:7.1f}us {slow * 1e6:7.1f}us "
              f"{(slow - fast) * 1e6:7.1f}us")


if __name__ == "__main__":
    main()
