"""Fuzz the GGUF loading path: a few hundred mutated tiny GGUF files (bit flips and random
bytes in the header, metadata and tensor table, huge integers, truncations, garbage tensor
data). Each must either load and decode, or fail with a clean LsdError; the process must never
die. The files are loaded one after another in a child process so that a crash is seen (exit
status and the last file named) instead of killing the test run."""

from __future__ import annotations

import random
import re
import struct
import subprocess
import sys
from collections import Counter

import gguf
import pytest
import tinymodels

from lsd_local import Engine, ModelLoadError

N_FILES = 300
CHILD = r"""
import sys
import numpy as np
from lsd_local import Engine
from lsd_local.errors import LsdError

for path in sys.argv[1:]:
    print("FILE", path, flush=True)
    try:
        with Engine.load(path, drafter="none", n_ctx=64, n_threads=1) as eng:
            gen = eng.generate("the cat", max_tokens=3).run()
            print("LOADED", len(gen.tokens), flush=True)
    except LsdError as exc:
        print("CLEAN", str(exc).replace("\n", " ")[:200], flush=True)
    except Exception as exc:
        print("UNCLEAN", type(exc).__name__, str(exc)[:200], flush=True)
print("DONE", flush=True)
"""


def mutate(data: bytes, meta_end: int, rng: random.Random) -> tuple[str, bytes]:
    b = bytearray(data)
    kind = rng.choice(["flip", "bytes", "int", "trunc", "tensor_data", "header"])
    if kind == "flip":
        p = rng.randrange(meta_end)
        b[p] ^= 1 << rng.randrange(8)
    elif kind == "bytes":
        for _ in range(rng.randint(2, 20)):
            b[rng.randrange(meta_end)] = rng.randrange(256)
    elif kind == "int":  # a length, count, type, dimension or offset gone wild
        p = rng.randrange(meta_end - 8)
        value = rng.choice([0, 1, 2**31 - 1, 2**32 - 1, 2**63 - 1, 2**64 - 1, rng.randrange(2**64)])
        b[p:p + 8] = struct.pack("<Q", value)
    elif kind == "trunc":
        b = b[:rng.randrange(len(b))]
    elif kind == "tensor_data":
        for _ in range(50):
            b[rng.randrange(meta_end, len(b))] = rng.randrange(256)
    else:  # version, tensor count, metadata count
        p = rng.choice([4, 8, 16])
        b[p:p + 4] = struct.pack("<I", rng.choice([0, 2, 4, 99, 2**31, 2**32 - 1]))
    return kind, bytes(b)


def test_mutated_gguf_files_load_or_fail_cleanly(tmp_path, capsys):
    spec = tinymodels.TinySpec(n_layer=1)
    base = tinymodels.write_gguf(tmp_path / "base.gguf", spec,
                                 tinymodels.random_weights(spec, 259 + len(spec.words)))
    data = base.read_bytes()
    meta_end = gguf.GGUFReader(str(base)).data_offset
    rng = random.Random(20261129)
    paths, kinds = [], {}
    for i in range(N_FILES):
        kind, mutated = mutate(data, meta_end, rng)
        path = tmp_path / f"m{i:03d}.gguf"
        path.write_bytes(mutated)
        paths.append(str(path))
        kinds[str(path)] = kind
    child = subprocess.run([sys.executable, "-c", CHILD, *paths], capture_output=True,
                           text=True, timeout=600)
    lines = child.stdout.splitlines()
    last = next((line for line in reversed(lines) if line.startswith("FILE")), "")
    assert child.returncode == 0 and lines[-1] == "DONE", (
        f"the process died (status {child.returncode}) on {last}: {child.stderr[-500:]}")
    outcomes = Counter(line.split()[0] for line in lines if not line.startswith(("FILE", "DONE")))
    unclean = [line for line in lines if line.startswith("UNCLEAN")]
    assert not unclean, unclean[:5]
    assert sum(outcomes.values()) == N_FILES
    assert outcomes["CLEAN"] > 50 and outcomes["LOADED"] > 20  # both paths were exercised
    with capsys.disabled():
        print(f"\nGGUF fuzz: {N_FILES} mutated files ({dict(Counter(kinds.values()))}): "
              f"{dict(outcomes)}")


@pytest.mark.parametrize("old,new,message", [
    (b"<0x63>", b"<0x64>", "token 103 b'<0x64>' duplicates token 102"),
    (b"<0x63>", b"<0x63<", "byte token 102 reads b'<0x63<', not <0xXX>"),
    (b"GGUF\x03", b"GGUF\x07", "unsupported GGUF version 7"),
])
def test_damage_llama_cpp_would_abort_on_is_a_clean_error(tmp_path, old, new, message):
    spec = tinymodels.TinySpec(n_layer=1)
    base = tinymodels.write_gguf(tmp_path / "base.gguf", spec,
                                 tinymodels.random_weights(spec, 259 + len(spec.words)))
    data = base.read_bytes()
    assert data.count(old) >= 1
    path = tmp_path / "damaged.gguf"
    path.write_bytes(data.replace(old, new, 1))
    with pytest.raises(ModelLoadError, match=re.escape(message)):
        Engine.load(path)


def test_truncated_metadata_and_special_token_out_of_range(tmp_path):
    spec = tinymodels.TinySpec(n_layer=1)
    base = tinymodels.write_gguf(tmp_path / "base.gguf", spec,
                                 tinymodels.random_weights(spec, 259 + len(spec.words)))
    data = base.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:3000])
    with pytest.raises(ModelLoadError, match="ends inside its metadata"):
        Engine.load(tmp_path / "cut.gguf")
    key = b"tokenizer.ggml.eos_token_id"
    at = data.index(key) + len(key) + 4  # after the key and its uint32 type
    damaged = data[:at] + struct.pack("<I", 5000) + data[at + 4:]
    (tmp_path / "eos.gguf").write_bytes(damaged)
    with pytest.raises(ModelLoadError, match="special token id eos=5000 is outside"):
        Engine.load(tmp_path / "eos.gguf")
