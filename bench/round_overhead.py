"""lsd's own time per round, outside llama.cpp: what is left of a generation's wall time after
every llama_decode call (for the target and a draft model), per round, in microseconds.

    .venv/bin/python bench/round_overhead.py [--model PATH] [--tokens 128] [--repeat 5]
                                             [--stand-in] [--profile MODE]

A fast small model on a CPU behaves like a big model on a GPU (a few ms per step): there,
every 100 us of Python per round is several percent. Modes: plain (no draft), lookup (K 8)
draft model (the model drafting for itself, K 4) and auto (the default: lookup or plain
steps per round, K chosen per round; no draft model). Medians over --repeat generations in
one process after a warm-up generation. --profile MODE prints cProfile's top functions
(--sort cumulative for the callers).

Two figures per mode. `outside llama_decode` on this CPU: every decode streams the model's
weights through the CPU's caches, so the Python after it runs on cold caches (on this 2-core
EPYC a round of a dozen numpy calls then costs ~100 us more than the same code warm). With
`--stand-in`, every Slot.decode returns fixed logits instead (the target's argmax is one
token, so every lookup draft is accepted): the loop alone on warm caches, what a host thread
adds per round while the model runs on a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import statistics
import time
from pathlib import Path

import llama_cpp

MODELS = Path(os.environ.get("LSD_MODELS_DIR", "~/.cache/lsd/models")).expanduser()
PROMPT = ("Copy this text exactly, word for word: Speculative decoding lets a small draft "
          "propose tokens that a large model checks in one pass, and a verifier keeps them.")
MODES = {"plain": dict(drafter="none"), "lookup": dict(drafter="lookup", k=8),
         "draft model": dict(drafter="model", k=4), "auto": dict(drafter="auto", k="auto")}


class DecodeClock:
    """Sums the seconds spent inside llama_decode (every model of the process)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._original = llama_cpp.llama_decode

    def __enter__(self) -> DecodeClock:
        def timed(ctx, batch):
            start = time.perf_counter()
            try:
                return self._original(ctx, batch)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
        llama_cpp.llama_decode = timed
        return self

    def __exit__(self, *exc) -> None:
        llama_cpp.llama_decode = self._original


def one_generation(engine, tokens: int) -> tuple[float, float, int, float]:
    """(microseconds per round outside llama_decode, decode ms per round, rounds, tok/s)."""
    with DecodeClock() as clock:
        start = time.perf_counter()
        gen = engine.generate(PROMPT, max_tokens=tokens)  # raw text: no early end of turn
        gen.run()
        wall = time.perf_counter() - start
    rounds = gen.stats.rounds
    outside = wall - clock.seconds  # (the prefill's own Python is a few us, counted in)
    return (outside / rounds * 1e6, clock.seconds / rounds * 1e3, rounds,
            gen.stats.generated_tokens / wall)


class StandInDecode:
    """Replaces Slot.decode with fixed logits float32[64, V] (more rows than any round
    verifies) whose argmax is one token (the engine's own cache bookkeeping is kept;
    llama.cpp is not called)."""

    def __init__(self, token: int) -> None:
        self.token = token
        self._original = None

    def __enter__(self) -> StandInDecode:
        import numpy as np

        from lsd_local.backend.slot import Slot

        self._original = Slot.decode
        token = self.token

        def decode(model, tokens, start_pos, n_logit_rows):
            rows = getattr(model, "_stand_in_rows", None)
            if rows is None:
                rows = np.random.default_rng(0).normal(size=(64, model.n_vocab))
                rows = rows.astype(np.float32)
                rows[:, token] = 100.0
                model._stand_in_rows = rows
            model._cached_tokens[start_pos:start_pos + len(tokens)] = tokens
            model.n_cached = start_pos + len(tokens)
            return rows[:n_logit_rows]

        Slot.decode = decode
        return self

    def __exit__(self, *exc) -> None:
        from lsd_local.backend.slot import Slot

        Slot.decode = self._original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=MODELS / "smollm2-135m-instruct-q4_1.gguf")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", choices=list(MODES), default=None)
    parser.add_argument("--sort", default="tottime", help="cProfile order (e.g. cumulative)")
    parser.add_argument("--stand-in", action="store_true",
                        help="fixed logits instead of llama_decode (warm caches)")
    args = parser.parse_args()
    from lsd_local import Engine
    from lsd_local.kernels.warmup import load_kernels_now

    load_kernels_now()
    for mode, settings in MODES.items():
        if args.profile and mode != args.profile:
            continue
        draft = args.model if settings["drafter"] == "model" else None
        with Engine.load(args.model, draft, n_ctx=2048, n_threads=args.threads,
                         **settings) as engine, contextlib.ExitStack() as stack:
            if args.stand_in:
                stack.enter_context(StandInDecode(engine.target.vocab.tokenize(" the", False)[0]))
            one_generation(engine, args.tokens)  # warm-up
            if args.profile:
                profiler = cProfile.Profile()
                profiler.enable()
                one_generation(engine, args.tokens)
                profiler.disable()
                pstats.Stats(profiler).sort_stats(args.sort).print_stats(25)
                return
            runs = [one_generation(engine, args.tokens) for _ in range(args.repeat)]
        outside = statistics.median(r[0] for r in runs)
        where = "stand-in decode, loop alone" if args.stand_in else "outside llama_decode"
        print(f"{mode:12s} {where} {outside:6.0f} us/round "
              f"(min {min(r[0] for r in runs):.0f}, max {max(r[0] for r in runs):.0f}); "
              f"llama_decode {statistics.median(r[1] for r in runs):6.2f} ms/round; "
              f"{runs[0][2]} rounds; {statistics.median(r[3] for r in runs):.1f} tok/s",
              flush=True)


if __name__ == "__main__":
    main()
