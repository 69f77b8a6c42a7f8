"""Errors a user can cause. The CLI prints them as one line; the library raises them."""

from __future__ import annotations


class LsdError(Exception):
    """Base class for every error lsd reports to a user (never a bug in lsd itself)."""


class ModelLoadError(LsdError):
    """A GGUF file is missing, unreadable, corrupt or of an unsupported architecture."""


class IncompatibleModelsError(LsdError):
    """The draft model cannot draft for the target (different vocabulary, unsupported cache)."""


class ContextOverflowError(LsdError):
    """The prompt does not fit into the context window."""


class ModelOutputError(LsdError):
    """llama.cpp produced unusable output (NaN logits): a broken model file or backend."""


class EngineBusyError(LsdError, RuntimeError):
    """A generation was started while another one of the same Engine is unfinished (an
    engine has one KV cache: two interleaved generations would corrupt each other)."""


class ParameterError(LsdError, ValueError):
    """An invalid parameter value; the message names the parameter (and `param` holds its
    name when one parameter is at fault, e.g. for the server's error objects)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def check(condition: bool, name: str, message: str) -> None:
    """Raise ParameterError naming `name` unless `condition` holds."""
    if not condition:
        raise ParameterError(f"invalid {name}: {message}", param=name)


class GrammarError(LsdError, ValueError):
    """A grammar or JSON schema that cannot be used (unknown name, syntax error, no match);
    `param` names the request field it came from when that is not the grammar itself (a
    tool's parameters: "tools")."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
