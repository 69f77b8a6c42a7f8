"""Loading an engine's models: placement over devices and RPC servers, what a recurrent
target allows, doubts about a target/draft pair, and the link to what auto learned in
earlier processes."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..backend import Model, build_identity, physical_cores, recurrent_message, vocab_compatible
from ..backend.devices import add_rpc_servers, list_devices
from ..config import EngineSettings, LoadOptions
from ..drafters.auto import learned
from ..drafters.suffixstore import SuffixIndex, suffix_dir
from ..errors import IncompatibleModelsError, ParameterError
from ..kernels.warmup import process_warmup


def add_rpc(spec: EngineSettings) -> LoadOptions:
    """Register the RPC servers as devices (each checked first: llama.cpp aborts on one it
    cannot reach); returns the draft's options: unless they name devices, the draft keeps
    to local ones."""
    add_rpc_servers(list(spec.rpc))
    if spec.draft_device_given:
        return spec.draft_load
    local = [d.name for d in list_devices() if d.takes_layers and d.backend != "RPC"]
    return replace(spec.draft_load, devices=",".join(local) or "none", tensor_split=None)


def speculation_allowed(target: Model, drafter: str) -> bool:
    """The one place that decides what a recurrent/hybrid target (its state cannot drop
    rejected tokens) allows: plain decoding under "auto" (False), an error for an explicit
    drafter; any other target speculates (True)."""
    if target.supports_truncate or drafter == "none":
        return True
    if drafter == "auto":
        return False
    raise speculation_refused(target)


def speculation_refused(target: Model) -> IncompatibleModelsError:
    """The error for a drafter named on a target that cannot drop rejected tokens (Engine's
    configure and requests raise it too, for any drafter but "none")."""
    return IncompatibleModelsError(f"{recurrent_message(target)}; use drafter='none'")


def load_models(target, draft, spec: EngineSettings) -> tuple[Model, Model | None, bool]:
    """Load the target (and the draft when the drafter uses one and may speculate); return
    them and whether speculation is allowed. Nothing stays loaded when a load fails or a
    recurrent target meets an explicit drafter."""
    draft_load = add_rpc(spec) if spec.rpc else spec.draft_load
    target_model = Model.load(target, spec.load)
    draft_model = None
    try:
        drafter = spec.drafter.drafter
        speculate = speculation_allowed(target_model, drafter)
        if speculate and draft is not None and drafter in ("model", "multilevel", "auto"):
            draft_model = Model.load(draft, draft_load)
    except BaseException:
        target_model.close()
        if draft_model is not None:
            draft_model.close()
        raise
    return target_model, draft_model, speculate


def load_notices(target: Model, draft: Model | None, cross_vocab: bool) -> list[str]:
    """What a user should know about the loaded models (the CLI prints these lines); the
    doubtful choices among them are also Python warnings, for library users."""
    doubts = pair_doubts(target, draft) + ([target.repack.notice] if target.repack.notice
                                           else [])
    for notice in doubts:
        warnings.warn(notice, UserWarning, stacklevel=5)  # the caller of Engine.load
    info = [f"draft {draft.path.name} has another vocabulary than {target.path.name}: it "
            "drafts through text (cross-vocabulary)"] if cross_vocab and draft else []
    return info + doubts


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


@dataclass(frozen=True)
class Loaded:
    """What an engine is made of once its models are loaded."""

    target: Model
    draft: Model | None
    settings: EngineSettings  # (a recurrent target under auto: plain decoding)
    cross_vocab: bool  # the draft has another vocabulary: it drafts through text
    learned: learned.LearnedStore | None
    notices: list[str]  # what else a user should know
    suffix: SuffixIndex | None = None  # past requests' text (kept on disk with remember)


def load_for_engine(target, draft, spec: EngineSettings) -> Loaded:
    """Load an engine's models (the numba kernels load beside them) and open what auto
    learned in earlier processes."""
    if spec.drafter.uses_draft_model and draft is None:
        raise ParameterError(f"invalid drafter: {spec.drafter.drafter!r} needs a draft model "
                             "(draft=...)", param="drafter")
    process_warmup().start()  # cached numba kernels load while the models load
    target_model, draft_model, speculate = load_models(target, draft, spec)
    if not speculate:  # auto on a model whose state cannot be cut: plain, and says why
        notice = f"{recurrent_message(target_model)}: plain decoding"
        warnings.warn(notice, UserWarning, stacklevel=4)
        plain = replace(spec, drafter=replace(spec.drafter, drafter="none", k=None))
        return Loaded(target_model, None, plain, False, None, [notice])  # (no lookup)
    cross_vocab = draft_model is not None and not vocab_compatible(target_model, draft_model)
    notices: list[str] = []
    memory = open_learned(target_model, draft_model, spec, notices.append) \
        if spec.remember else None
    suffix = open_suffix(target_model, spec, notices.append)
    return Loaded(target_model, draft_model, spec, cross_vocab, memory, notices, suffix)


def open_suffix(target: Model, spec: EngineSettings,
                notify: Callable[[str], None]) -> SuffixIndex | None:
    """The suffix index over past requests (None with suffix_tokens=0); with remember (and
    LSD_NO_STATE unset) it starts from what earlier processes on this vocabulary kept and is
    saved back on close."""
    if spec.suffix_tokens <= 0:
        return None
    key = target.vocab.fingerprint()
    index = SuffixIndex(spec.suffix_tokens, key)
    if spec.remember and not learned.disabled():
        index.path = suffix_dir() / f"{key}.bin"
        index.load(index.path, target.n_vocab, notify)
    return index


def open_learned(target: Model, draft: Model | None, spec: EngineSettings,
                 notify: Callable[[str], None]) -> learned.LearnedStore | None:
    """The link to what auto learned for these models on this machine: costs keyed by the
    model files, threads, placement and llama.cpp build (and buffer types when they are
    off); acceptance by the model pair. None while LSD_NO_STATE is set."""
    if learned.disabled():
        return None
    target_id = learned.file_identity(target.path)
    draft_id = learned.file_identity(draft.path) if draft is not None else None
    placement = {"target": target.placement}
    if draft is not None:
        placement["draft"] = draft.placement
    # weights loaded without extra buffer types run at another speed (keys made before
    # that option existed stay valid for the default)
    repack = () if target.repack.use_extra_bufts else ("no extra buffer types",)
    cost_key = learned.key_of("cost", target_id, draft_id,
                              spec.load.n_threads or physical_cores(), placement,
                              build_identity(), *repack)
    return learned.LearnedStore(learned.learned_path(), cost_key,
                                learned.key_of("pair", target_id, draft_id), notify)
