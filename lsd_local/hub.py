"""Downloads from the Hugging Face Hub into its standard cache (resumable), with checksums."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .errors import LsdError
from .registry import ModelSpec


def offline() -> bool:
    """HF_HUB_OFFLINE read at call time (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> Path | None:
    """The Hub cache folder from the environment, or None for huggingface_hub's default."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return None


def cached_file(spec: ModelSpec) -> Path | None:
    """Path of the spec's file in the Hub cache, or None when it is not downloaded."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(spec.repo, spec.file, cache_dir=cache_dir())
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify(spec: ModelSpec, path: Path) -> None:
    """Check the sha256 from the registry; a mismatching file is deleted (it is corrupt)."""
    if not spec.sha256:
        return
    got = sha256_of(path)
    if got != spec.sha256.lower():
        real = path.resolve()
        for p in {path, real}:
            p.unlink(missing_ok=True)
        raise LsdError(f"{spec.file}: sha256 mismatch (expected {spec.sha256}, got {got}); "
                       "the corrupt download was deleted, run `lsd pull` again")


def download(spec: ModelSpec) -> Path:
    """Fetch spec.file from spec.repo (progress bar, resumes a partial download)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    where = f"{spec.file} from {spec.repo}"
    if offline():
        found = cached_file(spec)
        if found is None:
            raise LsdError(f"{where} is not in the Hugging Face cache and HF_HUB_OFFLINE=1 "
                           "forbids downloading it; fetch it elsewhere, or pass a .gguf path")
        return found
    try:
        path = Path(hf_hub_download(spec.repo, spec.file, cache_dir=cache_dir()))
    except GatedRepoError:
        raise LsdError(f"{spec.repo} is gated: accept its license on the Hub and log in "
                       "(`hf auth login`), then retry") from None
    except RepositoryNotFoundError:
        raise LsdError(f"repository {spec.repo} not found on the Hub") from None
    except LocalEntryNotFoundError:  # a subclass of EntryNotFoundError: test it first
        raise LsdError(f"cannot reach the Hugging Face Hub to fetch {where} (offline?); "
                       "retry with network, or pass a local .gguf path") from None
    except EntryNotFoundError:
        raise LsdError(f"{spec.file} not found in {spec.repo}") from None
    except OSError as exc:  # includes no space left on device and connection errors
        raise LsdError(f"download of {where} failed: {exc}; run the same command again to "
                       "resume") from None
    verify(spec, path)
    return path
