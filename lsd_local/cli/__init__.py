"""The `lsd` command line: parses options, calls the library, prints. One module per
command (run, chat, serve, models, devices, bench); options.py holds what they share."""

from __future__ import annotations

import os
import sys

import click

from .. import __version__
from ..errors import LsdError, ParameterError
from .bench import bench as bench_command
from .chat import chat as chat_command
from .devices import devices as devices_command
from .models import list_models, pull, remove
from .run import run as run_command
from .run import split_run_args
from .serve import serve as serve_command

__all__ = ["cli", "main", "split_run_args"]


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


# every option can come from the environment: LSD_<COMMAND>_<OPTION>, e.g. LSD_RUN_MAX_TOKENS
@click.group(cls=LsdGroup, context_settings={"auto_envvar_prefix": "LSD"})
@click.version_option(__version__, prog_name="lsd", allow_from_autoenv=False)
def cli() -> None:
    """lsd: faster local generation with loose speculative decoding (llama.cpp, GGUF).

    MODEL is a name from `lsd models` (downloaded on first use) or a path to a .gguf file.
    """


# imported under other names: lsd_local.cli.run, .chat and .bench stay the modules
for _command in (run_command, chat_command, serve_command, pull, list_models, remove,
                 devices_command, bench_command):
    cli.add_command(_command)


def main() -> None:
    """Console entry point."""
    try:
        cli()
    except BrokenPipeError:  # `lsd run ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
