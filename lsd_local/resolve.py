"""Command-line model arguments (registry names or paths) -> GGUF paths and a drafter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .registry import ModelSpec, is_path, load_registry, lookup


def _fetch(spec: ModelSpec, notify: Callable[[str], None]) -> Path:
    from .hub import cached_file, download

    path = cached_file(spec)
    if path is None:
        notify(f"downloading {spec.name}: {spec.file} from {spec.repo}")
        path = download(spec)
    return path


def resolve_one(arg: str, registry: dict[str, ModelSpec],
                notify: Callable[[str], None]) -> tuple[Path, ModelSpec | None]:
    """A path is used as is (the loader checks it); a name is found in the cache or fetched."""
    if is_path(arg):
        return Path(arg).expanduser(), None
    spec = lookup(arg, registry)
    return _fetch(spec, notify), spec


@dataclass(frozen=True)
class Resolved:
    """What the command line asked for, as files and settings."""

    target: Path
    draft: Path | None
    drafter: str
    ctx: int | None  # the registry's context length, if MODEL is a registry name
    chat_template: str | None  # the registry's template override, if any


def resolve_models(model: str, draft: str | None, drafter: str | None, n_gpu_layers: int,
                   notify: Callable[[str], None] = print) -> Resolved:
    """Find (or download) the target and the draft and choose the drafter.

    Without --drafter: on a GPU (n_gpu_layers != 0) a registry model with a default draft uses
    it through the multilevel drafter; on a CPU scoring drafts costs nearly as much per token
    as generating, so prompt lookup (no draft model) is the measured better default.
    """
    registry = load_registry()
    target, spec = resolve_one(model, registry, notify)
    ctx = spec.ctx if spec else None
    template = spec.chat_template if spec else None
    draft_arg = None if draft == "none" else draft
    if draft_arg is None and draft != "none" and spec and spec.draft:
        wants_model = drafter in ("model", "multilevel") or (drafter is None and n_gpu_layers)
        draft_arg = spec.draft if wants_model else None
    if drafter is None:
        drafter = "multilevel" if draft_arg and n_gpu_layers else (
            "model" if draft_arg else "lookup")
    if drafter in ("lookup", "none"):
        return Resolved(target, None, drafter, ctx, template)
    draft_path = resolve_one(draft_arg, registry, notify)[0] if draft_arg else None
    return Resolved(target, draft_path, drafter, ctx, template)
