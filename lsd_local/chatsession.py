"""Interactive chat: a conversation over one Engine (KV reused across turns) and its REPL."""

from __future__ import annotations

import sys

import click

from .errors import ContextOverflowError, LsdError
from .stats import GenerationStats, Origin

COLOURS = {Origin.DRAFT_EXACT: "green", Origin.DRAFT_LOOSE: "yellow", Origin.TARGET: None}
HELP = """commands:
  /reset              forget the conversation (keeps the system message)
  /stats              statistics of this session and of the last answer
  /mode strict|fly|asd  switch the verification rule
  /help               this text
  Ctrl-C stops an answer; Ctrl-C again at the prompt, or Ctrl-D, exits."""


def render_spans(spans, colour: bool) -> str:
    """Text of (text, origin) spans, coloured by origin when `colour`."""
    if not colour:
        return "".join(text for text, _ in spans)
    return "".join(click.style(text, fg=COLOURS[origin]) if COLOURS[origin] else text
                   for text, origin in spans)


class ChatSession:
    """The message history of one conversation; each answer reuses the cached prefix."""

    def __init__(self, engine, system: str | None, generation_kwargs: dict) -> None:
        self.engine = engine
        self.system = system
        self.kwargs = generation_kwargs
        self.messages: list[dict] = []
        self.totals = GenerationStats()  # every answer of the session added up
        self.turns = 0
        self.dropped_turns = 0
        self.last: GenerationStats | None = None
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def ask(self, text: str):
        """Start an answer; iterate the returned Generation, then call `finish` with it.
        When the conversation no longer fits the context, the oldest turns are dropped
        (`dropped_turns` counts them) until it does."""
        self.messages.append({"role": "user", "content": text})
        first = 1 if self.system else 0
        while True:
            try:
                return self.engine.generate(self.messages, **self.kwargs)
            except ContextOverflowError:
                if len(self.messages) - first <= 1 or not self._fits_alone():
                    self.messages.pop()  # the new message is too long even on its own
                    raise
                del self.messages[first:first + 2]  # the oldest question and its answer
                self.dropped_turns += 1
            except LsdError:
                self.messages.pop()
                raise

    def _fits_alone(self) -> bool:
        """Would the system message plus the newest question fit the context?"""
        alone = self.messages[:1 if self.system else 0] + self.messages[-1:]
        return len(self.engine.prompt_tokens(alone)) + 1 <= self.engine.target.n_ctx

    def finish(self, gen) -> None:
        """Record the (possibly interrupted) answer in the history and the statistics."""
        self.messages.append({"role": "assistant", "content": gen.text})
        self.last = gen.stats
        self.totals.merge(gen.stats)
        self.turns += 1


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
    return f"unknown command /{name}; /help lists them"


def _answer(session: ChatSession, text: str, show_drafts: bool) -> None:
    dropped = session.dropped_turns
    gen = session.ask(text)
    if session.dropped_turns > dropped:
        click.echo(f"(context full: forgot the {session.dropped_turns - dropped} oldest "
                   "exchange(s); /reset starts over)")
    interrupted = False
    try:
        for event in gen:
            click.echo(render_spans(event.spans, show_drafts), nl=False)
    except KeyboardInterrupt:
        interrupted = True
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
