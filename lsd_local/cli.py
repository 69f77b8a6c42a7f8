"""The `lsd` command line: parses options, calls the library, prints."""

from __future__ import annotations

import json
import os
import sys

import click

from . import __version__
from .engine import DRAFTERS
from .errors import LsdError, ParameterError
from .rules import ASD_BUDGET, ASD_GATE, ASD_MAX_EXCEPTIONS, RULES


def engine_options(func):
    """Options shared by every command that loads models."""
    options = [
        click.option("--draft", "draft", default=None, metavar="GGUF|none",
                     help="Draft model with the target's vocabulary (or 'none'). It proposes "
                          "tokens the target then checks in one batched pass."),
        click.option("--drafter", type=click.Choice(DRAFTERS), default=None,
                     help="Who proposes tokens: draft model, prompt lookup (copies n-grams "
                          "from the context), multilevel (both), none (plain decoding). "
                          "Default: model with --draft, else lookup."),
        click.option("--rule", type=click.Choice(RULES), default="strict", show_default=True,
                     help="How drafts are checked: strict keeps exact matches only "
                          "(lossless); fly and asd also keep harmless mismatches."),
        click.option("-k", "--k", "k", type=click.IntRange(min=1), default=None,
                     help="Most tokens drafted per round. Default depends on the drafter."),
        click.option("--theta", type=click.FloatRange(min=0), default=0.3, show_default=True,
                     help="FLy: keep a mismatch only where the target's top-k entropy is at "
                          "least this (the target itself was unsure)."),
        click.option("--window", type=click.IntRange(min=1), default=None,
                     help="FLy: ... and only if the next W draft tokens match. "
                          "Default min(6, K-1)."),
        click.option("--entropy-top-k", type=click.IntRange(min=1), default=3,
                     show_default=True, help="FLy: entropy over this many top probabilities."),
        click.option("--gate", type=click.FloatRange(min=0), default=ASD_GATE,
                     show_default=True,
                     help="ASD: largest logit regret per remaining block token for a kept "
                          "mismatch."),
        click.option("--max-exceptions", type=click.IntRange(min=0),
                     default=ASD_MAX_EXCEPTIONS, show_default=True,
                     help="ASD: most kept mismatches per round."),
        click.option("--budget", type=click.FloatRange(min=0), default=ASD_BUDGET,
                     show_default=True,
                     help="ASD: total logit regret a whole answer may spend on mismatches."),
        click.option("--ctx", type=click.IntRange(min=8), default=4096, show_default=True,
                     help="Context size in tokens (prompt + answer)."),
        click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="CPU threads. Default: physical cores."),
        click.option("--n-gpu-layers", type=int, default=0, show_default=True,
                     help="Target layers to offload to the GPU (-1 = all)."),
        click.option("--draft-n-gpu-layers", type=int, default=None,
                     help="Draft layers to offload (default: as --n-gpu-layers)."),
        click.option("--verbose", is_flag=True, help="Show llama.cpp's log."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def load_engine(model: str, opts: dict):
    """Build an Engine from parsed options; LsdErrors propagate to `main`."""
    from .engine import Engine

    draft = opts["draft"]
    draft = None if draft in (None, "none") else draft
    rule_params = {"theta": opts["theta"], "window": opts["window"],
                   "entropy_top_k": opts["entropy_top_k"], "gate": opts["gate"],
                   "max_exceptions": opts["max_exceptions"], "budget": opts["budget"]}
    return Engine.load(model, draft, drafter=opts["drafter"], rule=opts["rule"], k=opts["k"],
                       n_ctx=opts["ctx"], n_threads=opts["threads"],
                       n_gpu_layers=opts["n_gpu_layers"],
                       draft_n_gpu_layers=opts["draft_n_gpu_layers"], verbose=opts["verbose"],
                       **rule_params)


class LsdGroup(click.Group):
    """Turns user errors from the library into click's one-line errors (no traceback)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ParameterError as exc:
            raise click.UsageError(str(exc), ctx) from None
        except LsdError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            click.echo("\nInterrupted.", err=True)
            ctx.exit(130)


@click.group(cls=LsdGroup)
@click.version_option(__version__, prog_name="lsd")
def cli() -> None:
    """lsd: faster local generation with loose speculative decoding (llama.cpp, GGUF)."""


@cli.command()
@click.argument("model")
@click.argument("prompt", required=False)
@engine_options
@click.option("--system", default=None, help="System message (chat template only).")
@click.option("--raw", is_flag=True, help="Send PROMPT as is, without the chat template.")
@click.option("--max-tokens", type=click.IntRange(min=0), default=256, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="0 = greedy. Above 0, speculative sampling keeps the target's distribution.")
@click.option("--top-k", type=click.IntRange(min=0), default=40, show_default=True)
@click.option("--top-p", type=click.FloatRange(min=0, max=1, min_open=True), default=0.95,
              show_default=True)
@click.option("--min-p", type=click.FloatRange(min=0, max=1), default=0.05, show_default=True)
@click.option("--seed", type=int, default=None, help="Seed for sampling (reproducible).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with stats.")
def run(model: str, prompt: str | None, **opts) -> None:
    """Generate once for PROMPT (or standard input) with MODEL (a .gguf path)."""
    if prompt is None or prompt == "-":
        prompt = sys.stdin.read()
    messages = [] if opts["system"] is None else [{"role": "system", "content": opts["system"]}]
    request = prompt if opts["raw"] else messages + [{"role": "user", "content": prompt}]
    with load_engine(model, opts) as engine:
        gen = engine.generate(request, max_tokens=opts["max_tokens"],
                              temperature=opts["temperature"], top_k=opts["top_k"],
                              top_p=opts["top_p"], min_p=opts["min_p"], seed=opts["seed"])
        for event in gen:
            if not opts["as_json"]:
                click.echo(event.text, nl=False)
    if opts["as_json"]:
        click.echo(json.dumps({"text": gen.text, "finish_reason": gen.finish_reason,
                               "stats": gen.stats.as_dict()}))
    else:
        click.echo()
        s = gen.stats
        click.echo(f"[{s.generated_tokens} tokens, {s.decode_tokens_per_second:.1f} tok/s, "
                   f"tau {s.tau:.2f}, acceptance {s.acceptance_rate:.0%}, "
                   f"loose {s.accepted_loose}]", err=True)


def main() -> None:
    """Console entry point."""
    try:
        cli()
    except BrokenPipeError:  # `lsd run ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
