"""Loading an engine's models: placement over devices and RPC servers, what a
recurrent target allows, and doubts about a target/draft pair."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from . import learned
from .backend import LoadOptions, Model, build_identity, physical_cores
from .backend.devices import add_rpc_servers, list_devices
from .errors import IncompatibleModelsError


def add_rpc(rpc: str | Sequence[str], draft_opts: LoadOptions,
            draft_device: str | None) -> LoadOptions:
    """Register the RPC servers as devices (each checked first: llama.cpp aborts on one it
    cannot reach); unless draft_device says otherwise, the draft keeps to local devices."""
    endpoints = [e.strip() for e in (rpc.split(",") if isinstance(rpc, str) else rpc)
                 if e.strip()]
    add_rpc_servers(endpoints)
    if draft_device is not None:
        return draft_opts
    local = [d.name for d in list_devices() if d.takes_layers and d.backend != "RPC"]
    return replace(draft_opts, devices=",".join(local) or "none", tensor_split=None)


def speculation_allowed(target: Model, drafter: str) -> bool:
    """The one place that decides what a recurrent/hybrid target (its state cannot drop
    rejected tokens) allows: plain decoding under "auto" (False), an error for an explicit
    drafter; any other target speculates (True)."""
    if target.supports_truncate or drafter == "none":
        return True
    if drafter == "auto":
        return False
    raise IncompatibleModelsError(
        f"{target.path.name} is a recurrent/hybrid model whose cache cannot drop rejected "
        "tokens; use drafter='none'")


def load_models(target, draft, drafter: str, opts: LoadOptions,
                 draft_opts: LoadOptions) -> tuple[Model, Model | None, bool]:
    """Load the target (and the draft when the drafter uses one and may speculate); return
    them and whether speculation is allowed. Nothing stays loaded when a load fails or a
    recurrent target meets an explicit drafter."""
    target_model = Model.load(target, opts)
    draft_model = None
    try:
        speculate = speculation_allowed(target_model, drafter)
        if speculate and draft is not None and drafter in ("model", "multilevel", "auto"):
            draft_model = Model.load(draft, draft_opts)
    except BaseException:
        target_model.close()
        if draft_model is not None:
            draft_model.close()
        raise
    return target_model, draft_model, speculate


def pair_doubts(target: Model, draft: Model | None) -> list[str]:
    """Doubtful target/draft choices (the CLI prints them; Python warnings for the library)."""
    if draft is None:
        return []
    if draft.path.resolve() == target.path.resolve():
        return [f"the draft is the target itself ({target.path.name}): every draft is "
                "accepted, but drafting costs as much as it saves"]
    if draft.n_params > target.n_params:
        return [f"draft {draft.path.name} ({draft.n_params / 1e6:.1f}M parameters) is larger "
                f"than the target {target.path.name} ({target.n_params / 1e6:.1f}M): drafting "
                "will cost more than it saves"]
    return []


def open_memory(engine, n_threads: int | None):
    """The learned-state link for an engine's models: costs keyed by the model files,
    threads, placement and llama.cpp build; acceptance by the model pair (see learned.py)."""
    target = learned.file_identity(engine.target.path)
    draft = learned.file_identity(engine.draft_model.path) if engine.draft_model else None
    # weights loaded without extra buffer types run at another speed (keys made before
    # that option existed stay valid for the default)
    repack = () if engine.target.repack.use_extra_bufts else ("no extra buffer types",)
    cost_key = learned.key_of("cost", target, draft, n_threads or physical_cores(),
                              engine.placement, build_identity(), *repack)
    notices: list[str] = []
    memory = learned.Memory(learned.state_path(), cost_key,
                            learned.key_of("pair", target, draft), notices.append)
    engine.notices.extend(notices)
    return memory
