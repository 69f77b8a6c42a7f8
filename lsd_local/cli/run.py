"""`lsd run`: one answer, then exit."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import click

from . import options as shared
from .chat import render_call, render_spans, start_chat
from .generation import generation_kwargs  # the options and helpers run shares with chat


@click.command()
@click.argument("args", nargs=-1, metavar="[MODEL] [PROMPT]",
                shell_complete=lambda ctx, param, incomplete: [] if ctx.params.get("args")
                else shared.complete_model(ctx, param, incomplete))
@shared.generation_options
@click.option("--raw", is_flag=True, help="Send PROMPT as is, without the chat template.")
@click.option("--json", "as_json", is_flag=True, envvar="LSD_RUN_JSON",
              help="Print one JSON object with stats.")
def run(args: tuple[str, ...], model_option: str | None, **opts) -> None:
    """Answer PROMPT (or standard input) once and exit.

    A single argument is the MODEL when it holds no space and is a .gguf path, an existing
    file, a name from `lsd models` or a Hub name (hf.co/owner/repo, owner/repo:QUANT or a
    repo named *GGUF*); anything else is the PROMPT, answered by the default model (-m names
    the model explicitly). Without a PROMPT, standard input is the prompt; on a terminal,
    `lsd run MODEL` starts `lsd chat MODEL`.
    """
    model, prompt = split_run_args(args, model_option)
    if prompt is None and stdin_is_terminal() and sys.stdout.isatty() and not opts["as_json"]:
        start_chat(model, opts)  # `ollama run MODEL`; a redirected answer still reads stdin
        return
    if prompt is None or prompt == "-":
        prompt = read_stdin()
    messages = [] if opts["system"] is None else [{"role": "system", "content": opts["system"]}]
    request = prompt if opts["raw"] else messages + [{"role": "user", "content": prompt}]
    colour = opts["show_drafts"] and shared.use_colour()
    shared.check_grammar_source(opts)
    kwargs = generation_kwargs(opts)
    if opts["raw"]:  # (a raw prompt has no template to show tools or open a reasoning block)
        kwargs = {k: v for k, v in kwargs.items() if k not in ("tools", "tool_choice")}
    with shared.load_engine(model, opts) as engine:
        gen = engine.generate(request, **kwargs)
        for event in gen:
            if not opts["as_json"]:
                show_round(event, colour)
    if opts["as_json"]:
        click.echo(json.dumps({"text": gen.text, "reasoning": gen.reasoning,
                               "tool_calls": [asdict(call) for call in gen.tool_calls],
                               "tokens": gen.tokens, "finish_reason": gen.finish_reason,
                               "stats": gen.stats.as_dict(), "placement": engine.placement}))
    else:
        for call in gen.tool_calls:
            click.echo(f"\n{render_call(call)}", nl=False)
        click.echo()
        click.echo(f"[{gen.stats.summary()}]", err=True)


def show_round(event, colour: bool) -> None:
    """A round's reasoning (dimmed, on stderr: stdout carries only the answer) and text."""
    if event.reasoning:
        click.echo(click.style(event.reasoning, dim=True) if sys.stderr.isatty()
                   else event.reasoning, nl=False, err=True)
    click.echo(render_spans(event.spans, colour), nl=False)


def stdin_is_terminal() -> bool:
    """Whether standard input is an interactive terminal (then nothing is piped in)."""
    return sys.stdin.isatty()


def read_stdin() -> str:
    """The piped prompt. Bytes that are not UTF-8 become U+FFFD (never a traceback)."""
    from ..utf8 import utf8_bytes

    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text-only stream: what it could not decode arrives as surrogates
        return utf8_bytes(sys.stdin.read()).decode("utf-8")
    return stream.read().decode("utf-8", "replace")


def split_run_args(args: tuple[str, ...], model_option: str | None = None
                   ) -> tuple[str | None, str | None]:
    """(MODEL or None, PROMPT or None) from `lsd run`'s positional arguments."""
    from ..models.registry import load_registry, looks_like_model

    if model_option is not None:
        if len(args) > 1:
            raise click.UsageError("with --model, give at most one PROMPT (quote it)")
        return model_option, args[0] if args else None
    if len(args) > 2:
        raise click.UsageError("expected at most MODEL and PROMPT (quote the prompt)")
    if len(args) == 2:
        return args[0], args[1]
    if len(args) == 1 and looks_like_model(args[0], load_registry()):
        return args[0], None
    return None, args[0] if args else None
