"""Model names -> model specs: the shipped models.toml plus the user's own overrides."""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config import N_CTX
from ..errors import LsdError
from .resources import data_path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

FIELDS = {"repo", "file", "revision", "quant", "sha256", "size", "ctx", "draft",
          "chat_template"}


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry: where the GGUF lives on the Hub and how to run it."""

    name: str
    repo: str
    file: str
    quant: str = ""
    sha256: str | None = None
    size: int | None = None  # bytes, when known: shown by `lsd models` before a download
    revision: str | None = None  # a commit to fetch instead of main (pinned: main may move)
    ctx: int = N_CTX
    draft: str | None = None  # registry name of the default draft model
    chat_template: str | None = None


def shipped_registry() -> Path | None:
    """The models.toml that ships with lsd."""
    return data_path("models.toml")


def user_registry() -> Path:
    """~/.config/lsd/models.toml, honouring XDG_CONFIG_HOME."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "lsd" / "models.toml"


def _read(path: Path) -> dict[str, ModelSpec]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise LsdError(f"cannot read model registry {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise LsdError(f"model registry {path} is not valid TOML: {exc}") from None
    specs = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or not {"repo", "file"} <= set(entry):
            raise LsdError(f"{path}: entry [{name}] needs 'repo' and 'file'")
        unknown = set(entry) - FIELDS
        if unknown:
            raise LsdError(f"{path}: entry [{name}] has unknown field(s) "
                           f"{', '.join(sorted(unknown))}")
        for field in ("size", "ctx"):
            value = entry.get(field)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value <= 0):
                raise LsdError(f"{path}: entry [{name}] has {field} = {value!r} (a positive "
                               "whole number)")
        specs[name] = ModelSpec(name=name, **entry)
    return specs


def load_registry() -> dict[str, ModelSpec]:
    """Shipped entries, overridden by the user's file."""
    specs: dict[str, ModelSpec] = {}
    for path in (shipped_registry(), user_registry()):
        if path is not None and path.is_file():
            specs.update(_read(path))
    return specs


def find_spec(name: str, registry: dict[str, ModelSpec]) -> ModelSpec:
    """The entry for `name`, or an LsdError suggesting close names."""
    if name in registry:
        return registry[name]
    close = difflib.get_close_matches(name, list(registry), n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else " See `lsd models`."
    raise LsdError(f"unknown model {name!r} (not a registry name, nor a .gguf file).{hint}")


# owner/repo[:QUANT], optionally behind hf.co/ (llama.cpp's -hf and Ollama's syntax); each part
# holds a letter, so that "3/4" stays a prompt
HUB_NAME = re.compile(r"(?:(?:hf\.co|huggingface\.co)/)?(?=[\w.-]*[A-Za-z])[\w][\w.-]*/"
                      r"(?=[\w.-]*[A-Za-z])[\w.-]+(?::[\w.-]+)?")


def _exists(spec: str, file_only: bool = False) -> bool:
    """Whether `spec` names an existing path; False for what cannot be one (`~nobody`, a name
    too long for the file system)."""
    try:
        path = Path(spec).expanduser()
        return path.is_file() if file_only else path.exists()
    except (OSError, RuntimeError, ValueError):
        return False


def is_path(spec: str) -> bool:
    """A command-line model argument that names a file rather than a registry entry."""
    return spec.lower().endswith(".gguf") or os.sep in spec or _exists(spec)


def is_hub_name(spec: str) -> bool:
    """`owner/repo[:QUANT]` or `hf.co/owner/repo[:QUANT]`: not a .gguf path, not a file."""
    return (bool(HUB_NAME.fullmatch(spec)) and not spec.lower().endswith(".gguf")
            and not _exists(spec))


def looks_like_model(arg: str, registry: dict[str, ModelSpec]) -> bool:
    """Whether a lone command-line argument names a model rather than being a prompt: no
    whitespace, and a .gguf path, an existing file, a registry name, or a Hub name that says
    so (hf.co/, a :QUANT tag or GGUF in its name: "and/or", "I/O" and "TCP/IP" stay
    prompts; `-m` names any model)."""
    if not arg or any(ch.isspace() for ch in arg):
        return False
    if arg.lower().endswith(".gguf") or arg in registry or _exists(arg, file_only=True):
        return True
    return is_hub_name(arg) and (arg.lower().startswith(("hf.co/", "huggingface.co/"))
                                 or ":" in arg or "gguf" in arg.lower())
