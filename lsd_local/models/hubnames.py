"""Any GGUF on the Hub by name: `owner/repo[:QUANT]` or `hf.co/owner/repo[:QUANT]` (the syntax
of llama.cpp's -hf and Ollama) -> the file(s) to fetch. The quantization tag matches file
names case-insensitively (default Q4_K_M, or the repo's only model); a model split into
`-0000N-of-0000M.gguf` parts is fetched whole and loaded from its first part."""

from __future__ import annotations

import re

from ..errors import LsdError
from .hub import _endpoint, _repo_folder, _short, offline, repo_error
from .registry import ModelSpec

DEFAULT_QUANT = "Q4_K_M"  # llama.cpp's -hf default too
SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def parse_hub_name(name: str) -> tuple[str, str | None]:
    """(owner/repo, QUANT or None) from `[hf.co/]owner/repo[:QUANT]`."""
    bare = re.sub(r"^(?:hf\.co|huggingface\.co)/", "", name)
    repo, _, quant = bare.partition(":")
    return repo, quant or None


def hub_specs(name: str) -> list[ModelSpec]:
    """The file(s) `name` stands for, as specs for hub.download (a split model: all parts,
    first part first). Asks the Hub for the repo's files; offline, what the cache holds."""
    repo, quant = parse_hub_name(name)
    files = _cached_files(repo) if offline() else _hub_files(repo)
    return [ModelSpec(name=name, repo=repo, file=f) for f in choose_gguf(files, quant, repo)]


def cached_hub_specs(name: str) -> list[ModelSpec]:
    """What `name` stands for among the files already in the cache (no network)."""
    repo, quant = parse_hub_name(name)
    return [ModelSpec(name=name, repo=repo, file=f)
            for f in choose_gguf(_cached_files(repo, offline_error=False), quant, repo)]


def choose_gguf(files: list[str], quant: str | None, repo: str) -> list[str]:
    """The .gguf file (or the parts of one split model) among `files` for `quant`."""
    models = _group(f for f in files if f.lower().endswith(".gguf")
                    and "mmproj" not in f.lower())  # vision projectors are no models
    if not models:
        raise LsdError(f"{repo} holds no .gguf file")
    if quant is None and len(models) == 1:
        return next(iter(models.values()))
    tag = (quant or DEFAULT_QUANT).lower()
    # the tag whole: Q6_K is not Q6_K_L, Q4_0 not Q4_0_4_4, Q4 not IQ4 (folders count too)
    pattern = re.compile(rf"(?<![a-z0-9]){re.escape(tag)}(?![a-z0-9_])")
    found = {key: parts for key, parts in models.items() if pattern.search(key.lower())}
    if len(found) == 1:
        return next(iter(found.values()))
    choices = ", ".join(sorted(found or models))
    if found:
        raise LsdError(f"several files in {repo} match {tag.upper()}: {choices}; name one "
                       "with a longer tag (owner/repo:TAG)")
    raise LsdError(f"no {tag.upper()} file in {repo}; it has: {choices} (owner/repo:TAG)")


def _group(files) -> dict[str, list[str]]:
    """model key -> its files, split parts in order (the key names the parts' first one)."""
    groups: dict[str, list[str]] = {}
    for name in sorted(files):
        key = SPLIT_PART.sub(lambda m: f"-NNNNN-of-{m[2]}.gguf", name)
        groups.setdefault(key, []).append(name)
    return groups


def _hub_files(repo: str) -> list[str]:
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=_endpoint()).model_info(repo)
    except Exception as exc:  # noqa: BLE001 - OSError, HTTP errors of either client
        known = repo_error(exc, repo)
        if known is not None:
            raise known from None
        cached = _cached_files(repo, required=False)
        if cached:
            return cached
        raise LsdError(f"cannot reach the Hugging Face Hub to list {repo} (offline?): "
                       f"{_short(exc)}") from None
    return [s.rfilename for s in info.siblings or []]


def _cached_files(repo: str, required: bool = True,
                  offline_error: bool = True) -> list[str]:
    """Files of `repo` in the Hub cache (its snapshots), relative to a snapshot."""
    snapshots = _repo_folder(ModelSpec(name=repo, repo=repo, file="")) / "snapshots"
    found = sorted({p.relative_to(snap).as_posix() for snap in snapshots.glob("*")
                    for p in snap.rglob("*") if p.name.lower().endswith(".gguf")}
                   ) if snapshots.is_dir() else []
    if required and not found:
        raise LsdError(f"{repo} is not in the Hugging Face cache" + (
            " and HF_HUB_OFFLINE=1 forbids asking the Hub for its files" if offline_error
            else ""))
    return found
