"""Checksums of downloaded files and the registry format (no network)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from lsd_local.errors import LsdError
from lsd_local.models.hub import _verify_partial
from lsd_local.models.registry import ModelSpec, _read, find_spec


def test_sha256_mismatch_deletes_the_file(tmp_path):
    """The registry's sha256 if it has one, else the Hub's LFS etag (an LFS file's sha256)."""
    path = tmp_path / "model.gguf.lsd-partial"
    path.write_bytes(b"GGUF not really a model")
    good = hashlib.sha256(path.read_bytes()).hexdigest()
    plain_etag, lfs_etag = SimpleNamespace(etag="abc123"), SimpleNamespace(etag=good)
    _verify_partial(ModelSpec("m", "org/repo", "model.gguf", sha256=good), plain_etag, path)
    _verify_partial(ModelSpec("m", "org/repo", "model.gguf"), lfs_etag, path)
    assert path.exists()
    with pytest.raises(LsdError, match="sha256 mismatch .* deleted"):
        _verify_partial(ModelSpec("m", "org/repo", "model.gguf"), SimpleNamespace(etag="0" * 64),
                        path)
    assert not path.exists()


@pytest.mark.parametrize("text,message", [
    ('["a.b"]\nrepo = "r"\nfile = "f.gguf"\nsizee = 3\n', "unknown field"),
    ('["a.b"]\nrepo = "r"\nfile = "f.gguf"\nsize = "1GB"\n', "size = '1GB'"),
    ('["a.b"]\nrepo = "r"\n', "needs 'repo' and 'file'"),
    ('["a.b"\n', "not valid TOML"),
])
def test_registry_entries_are_checked(tmp_path, text, message):
    path = tmp_path / "models.toml"
    path.write_text(text)
    with pytest.raises(LsdError, match=message):
        _read(path)


def test_shipped_registry_parses_and_drafts_exist():
    from lsd_local.models.registry import load_registry, shipped_registry
    assert shipped_registry() is not None
    registry = load_registry()
    assert {"qwen2.5-coder-1.5b", "qwen2.5-coder-32b", "llama3.1-8b", "gemma3-4b"} <= set(registry)
    for spec in registry.values():
        if spec.draft:
            assert find_spec(spec.draft, registry).name == spec.draft


@pytest.mark.parametrize("quant,expected", [
    ("Q6_K", ["m-Q6_K.gguf"]), ("q6_k_l", ["m-Q6_K_L.gguf"]), ("Q4_0", ["m-Q4_0.gguf"]),
    ("IQ4_XS", ["sub/m-IQ4_XS.gguf"]),
    ("Q2_K", ["Q2_K/m-00001-of-00002.gguf", "Q2_K/m-00002-of-00002.gguf"]),
])
def test_a_quant_tag_picks_the_file_with_that_whole_tag(quant, expected):
    from lsd_local.models.hubnames import choose_gguf

    files = ["m-Q6_K.gguf", "m-Q6_K_L.gguf", "m-Q4_0.gguf", "m-Q4_0_4_4.gguf",
             "sub/m-IQ4_XS.gguf", "Q2_K/m-00001-of-00002.gguf", "Q2_K/m-00002-of-00002.gguf",
             "mmproj-Q6_K.gguf", "README.md"]
    assert choose_gguf(files, quant, "org/m") == expected
