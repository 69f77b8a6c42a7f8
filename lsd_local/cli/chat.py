"""`lsd chat` (and `lsd run MODEL` on a terminal): the REPL over a ChatSession."""

from __future__ import annotations

import sys

import click

from ..errors import LsdError
from ..stats import Origin
from .generation import generation_kwargs
from .options import (
    check_grammar_source,
    complete_model,
    generation_options,
    load_engine,
    use_colour,
)
from .session import ChatSession

COLOURS = {Origin.DRAFT_EXACT: "green", Origin.DRAFT_LOOSE: "yellow", Origin.TARGET: None}
HELP = """commands:
  /reset              forget the conversation (keeps the system message)
  /stats              statistics of this session and of the last answer
  /mode strict|fly|asd  switch the verification rule
  /think on|off       let a reasoning model think first or not (its template's
                      enable_thinking)
  /think show|fold|hide  what it thinks: in full (dimmed), folded into one line (the
                      default; long tool calls cut too), or hidden
  /help               this text
  Ctrl-C stops an answer; Ctrl-C again at the prompt, or Ctrl-D, exits."""


def render_spans(spans, colour: bool) -> str:
    """Text of (text, origin) spans, coloured by origin when `colour`."""
    if not colour:
        return "".join(text for text, _ in spans)
    return "".join(click.style(text, fg=COLOURS[origin]) if COLOURS[origin] else text
                   for text, origin in spans)


def _command(session: ChatSession, line: str) -> str | None:
    """Handle a /command; returns the text to print."""
    name, _, arg = line[1:].partition(" ")
    if name == "help":
        return HELP
    if name == "reset":
        session.reset()
        return "(conversation cleared)"
    if name == "stats":
        last = "" if session.last is None else "\nlast answer: " + session.last.summary()
        return (f"session: {session.turns} answers, {session.totals.summary()}\n"
                f"{session.totals.mix()}{last}")
    if name == "mode":
        session.engine.configure(rule=arg.strip())
        return f"(rule: {session.engine.rule_config.rule})"
    if name == "think":
        return session.think(arg.strip())
    return f"unknown command /{name}; /help lists them"


FOLDED_ARGUMENTS = 80  # characters of a tool call's arguments shown while folded


def render_call(call, full: bool = True) -> str:
    """A tool call as a call: → name(arguments); not `full`: long arguments cut."""
    arguments = call.arguments
    if not full and len(arguments) > FOLDED_ARGUMENTS:
        arguments = arguments[:FOLDED_ARGUMENTS] + "…"
    return f"→ {call.name}({arguments})"


class FoldedThinking:
    """Reasoning as one dimmed line: "(thinking… N tokens)" while it streams (rewritten in
    place on a terminal), "(thought for N tokens: /think show)" once the answer starts."""

    def __init__(self, terminal: bool) -> None:
        self.terminal = terminal
        self.open = False

    def thinking(self, n_tokens: int) -> None:
        if self.terminal:
            click.echo("\r" + click.style(f"(thinking… {n_tokens} tokens)", dim=True), nl=False)
        self.open = True

    def close(self, n_tokens: int) -> None:
        if self.open:
            line = f"(thought for {n_tokens} tokens: /think show)"
            click.echo(("\r" if self.terminal else "") + click.style(line, dim=True))
            self.open = False


def _answer(session: ChatSession, text: str, show_drafts: bool) -> None:
    dropped = session.dropped_turns
    gen = session.ask(text)
    if session.dropped_turns > dropped:
        click.echo(f"(context full: forgot the {session.dropped_turns - dropped} oldest "
                   "exchange(s); /reset starts over)")
    interrupted, view = False, session.thinking_view
    folded = FoldedThinking(sys.stdout.isatty())
    try:
        for event in gen:
            if event.reasoning and view == "show":
                click.echo(click.style(event.reasoning, dim=True), nl=False)
            elif event.reasoning and view == "fold":
                folded.thinking(gen.stats.reasoning_tokens)
            if event.text or event.tool_calls:
                folded.close(gen.stats.reasoning_tokens)
            click.echo(render_spans(event.spans, show_drafts), nl=False)
    except KeyboardInterrupt:
        interrupted = True
    folded.close(gen.stats.reasoning_tokens)
    for call in gen.tool_calls:
        click.echo(f"\n{render_call(call, full=view == 'show')}", nl=False)
    session.finish(gen)
    context_full = (gen.finish_reason == "length"
                    and gen.stats.generated_tokens < session.kwargs.get("max_tokens", 0))
    click.echo(" [interrupted]" if interrupted else
               " [context full: /reset, or a larger --ctx]" if context_full else "")
    line = f"[{gen.stats.summary()}]"
    click.echo(click.style(line, dim=True) if show_drafts else line)


def _read_line(prompt: str) -> str:
    click.echo(prompt, nl=False)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def run_chat(session: ChatSession, show_drafts: bool) -> None:
    """The read-answer loop. Ctrl-C stops an answer; twice at the prompt (or Ctrl-D) exits."""
    if hasattr(sys.stdin, "reconfigure"):  # bytes that are not UTF-8 become U+FFFD
        sys.stdin.reconfigure(errors="replace")
    if sys.stdin.isatty():
        import readline  # noqa: F401  (line editing and history for input())
        read = input
    else:
        read = _read_line
    click.echo("lsd chat: /help for commands, Ctrl-D to exit.")
    armed = False  # a Ctrl-C at the prompt was seen
    while True:
        try:
            line = read(">>> ")
        except EOFError:
            click.echo()
            return
        except KeyboardInterrupt:
            if armed:
                click.echo()
                return
            armed = True
            click.echo("\n(Ctrl-C again or Ctrl-D to exit)")
            continue
        armed = False
        if not line.strip():
            continue
        try:
            if line.startswith("/"):
                click.echo(_command(session, line.strip()))
            else:
                _answer(session, line, show_drafts)
        except LsdError as exc:
            click.echo(f"Error: {exc}")


@click.command()
@click.argument("model", required=False, shell_complete=complete_model)
@generation_options
def chat(model: str | None, model_option: str | None, **opts) -> None:
    """Chat with MODEL in the terminal (/help lists the commands). Without MODEL: the default
    model if downloaded, else the embedded demo model (lsd-local[demo])."""
    if model is not None and model_option is not None:
        raise click.UsageError("give the model once: as MODEL or with --model")
    start_chat(model_option or model, opts)


def start_chat(model: str | None, opts: dict) -> None:
    """Load MODEL and run the interactive chat (`lsd chat`, and `lsd run MODEL` on a tty)."""
    check_grammar_source(opts)
    with load_engine(model, opts) as engine:
        constraint = engine.compile_grammar(opts["grammar"], opts["json_schema"])
        if constraint is not None:  # a syntax error shows now, not after the first question
            constraint.close()
        session = ChatSession(engine, opts["system"], generation_kwargs(opts))
        run_chat(session, show_drafts=opts["show_drafts"] and use_colour())
