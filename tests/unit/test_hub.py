"""Checksums of downloaded files and the registry format (no network)."""

from __future__ import annotations

import hashlib

import pytest

from lsd_local.errors import LsdError
from lsd_local.hub import verify
from lsd_local.registry import ModelSpec, _read, find_spec


def test_sha256_mismatch_deletes_the_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF not really a model")
    good = hashlib.sha256(path.read_bytes()).hexdigest()
    verify(ModelSpec("m", "org/repo", "model.gguf", sha256=good), path)
    assert path.exists()
    with pytest.raises(LsdError, match="sha256 mismatch .* deleted"):
        verify(ModelSpec("m", "org/repo", "model.gguf", sha256="0" * 64), path)
    assert not path.exists()


def test_registry_entries_are_checked(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text('["a.b"]\nrepo = "r"\nfile = "f.gguf"\nsizee = 3\n')
    with pytest.raises(LsdError, match="unknown field"):
        _read(path)
    path.write_text('["a.b"]\nrepo = "r"\n')
    with pytest.raises(LsdError, match="needs 'repo' and 'file'"):
        _read(path)
    path.write_text('["a.b"\n')
    with pytest.raises(LsdError, match="not valid TOML"):
        _read(path)


def test_shipped_registry_parses_and_drafts_exist():
    from lsd_local.registry import load_registry, shipped_registry
    assert shipped_registry() is not None
    registry = load_registry()
    assert {"qwen2.5-coder-1.5b", "qwen2.5-coder-32b", "llama3.1-8b", "gemma3-4b"} <= set(registry)
    for spec in registry.values():
        if spec.draft:
            assert find_spec(spec.draft, registry).name == spec.draft
