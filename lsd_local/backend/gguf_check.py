"""Check a GGUF file's structure before llama.cpp reads it.

llama.cpp rejects most damage with an error, but some it meets with an assertion that aborts
the whole process (a vocabulary with a duplicated token, a special token id outside the
vocabulary, an impossible tensor shape). Those are found here first, in plain Python, reading
only the header, metadata and tensor table (a few MB even for large models).
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from ..errors import ModelLoadError

MAX_COUNT = 1 << 24  # tensors, metadata entries, array elements: far beyond any real model
MAX_DIM = 1 << 40
# metadata value types: struct format of the scalars; 8 = string, 9 = array
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
GGML_TYPE_COUNT = 64  # ids above this are not ggml types in any version
SPECIAL_TOKEN_KEYS = ("bos", "eos", "unknown", "separator", "padding", "eot", "eom", "mask",
                      "cls")
TOKEN_TYPES = range(0, 7)  # llama_token_type: undefined .. byte
BYTE_TYPE = 6
BYTE_TOKEN = re.compile(rb"<0x[0-9A-Fa-f]{2}>")


class _Reader:
    """Bounds-checked little-endian reads from the start of a file, read in as needed."""

    def __init__(self, file, size: int, name: str) -> None:
        self.file = file
        self.data = bytearray(file.read(min(size, 1 << 22)))
        self.size = size
        self.pos = 0
        self.name = name

    def _need(self, end: int) -> None:
        if end > self.size:
            raise self.fail("the file ends inside its metadata (truncated download?)")
        while end > len(self.data):
            self.data += self.file.read(max(end - len(self.data), len(self.data)))

    def fail(self, what: str) -> ModelLoadError:
        return ModelLoadError(f"corrupt GGUF file {self.name}: {what} (at byte {self.pos})")

    def take(self, n: int) -> bytes:
        self._need(self.pos + n)
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def strings(self, n: int, what: str, keep: bool) -> list[bytes]:
        """n length-prefixed strings (kept as bytes, or only skipped): the fast path for
        vocabularies and merge lists of 150k entries."""
        out = []
        unpack, data, pos = struct.unpack_from, self.data, self.pos
        for _ in range(n):
            if pos + 8 > len(data):
                self._need(pos + 8)
                data = self.data
            length = unpack("<Q", data, pos)[0]
            if length > self.size:
                self.pos = pos
                raise self.fail(f"{what} length {length} exceeds the file")
            pos += 8
            if pos + length > len(data):
                self._need(pos + length)
                data = self.data
            if keep:
                out.append(bytes(data[pos:pos + length]))
            pos += length
        self.pos = pos
        return out

    def scalar(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, what: str) -> int:
        n = self.scalar("<Q")
        if n > MAX_COUNT:
            raise self.fail(f"{what} count {n} is impossible")
        return n

    def string(self, what: str) -> str:
        n = self.scalar("<Q")
        if n > self.size:
            raise self.fail(f"{what} length {n} exceeds the file")
        raw = self.take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8 text") from None

    def value(self, kind: int, key: str):
        if kind in SCALARS:
            return self.scalar(SCALARS[kind])
        if kind == STRING:
            return self.string(f"value of {key}")
        if kind == ARRAY:
            item = self.scalar("<I")
            n = self.count(f"{key} array")
            if item == ARRAY:
                raise self.fail(f"{key} is an array of arrays")
            if item in SCALARS:  # read in one go: fast for 150k-entry score arrays
                fmt = SCALARS[item]
                return list(struct.unpack(f"<{n}{fmt[1]}", self.take(n * struct.calcsize(fmt))))
            if item == STRING:  # only the vocabulary is looked at
                return self.strings(n, f"{key} item", keep=key == "tokenizer.ggml.tokens")
            raise self.fail(f"{key} has unknown element type {item}")
        raise self.fail(f"{key} has unknown value type {kind}")


def check_gguf(path: Path) -> None:
    """Raise ModelLoadError naming what is wrong when the GGUF structure is damaged in a way
    llama.cpp would abort on (or cannot express as an error)."""
    with path.open("rb") as file:
        _check(_Reader(file, path.stat().st_size, path.name))


def _check(r: _Reader) -> None:
    if r.take(4) != b"GGUF":
        raise r.fail("bad magic")
    version = r.scalar("<I")
    if version not in (2, 3):
        raise r.fail(f"unsupported GGUF version {version} (lsd reads versions 2 and 3)")
    n_tensors = r.count("tensor")
    n_kv = r.count("metadata")
    meta = {}
    for _ in range(n_kv):
        key = r.string("metadata key")
        if key in meta:
            raise r.fail(f"metadata key {key!r} appears twice")
        meta[key] = r.value(r.scalar("<I"), key)
    _check_vocabulary(meta, r)
    _check_tensors(r, n_tensors, meta)


def _check_vocabulary(meta: dict, r: _Reader) -> None:
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        return
    if not isinstance(tokens, list) or not all(isinstance(t, bytes) for t in tokens):
        raise r.fail("tokenizer.ggml.tokens is not a list of strings")
    if len(set(tokens)) != len(tokens):  # llama.cpp asserts (aborts) on a duplicate
        seen: dict[bytes, int] = {}
        for i, token in enumerate(tokens):
            if token in seen:
                raise r.fail(f"vocabulary token {i} {token!r} duplicates token {seen[token]}")
            seen[token] = i
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        values = meta.get(key)
        if values is not None and (not isinstance(values, list) or len(values) != len(tokens)):
            raise r.fail(f"{key} does not have one entry per token ({len(tokens)})")
    types = meta.get("tokenizer.ggml.token_type") or []
    bad = next((i for i, t in enumerate(types) if t not in TOKEN_TYPES), None)
    if bad is not None:
        raise r.fail(f"token {bad} has an unknown type {types[bad]}")
    # a byte-fallback token is looked up by its text '<0xXX>' (a throwing lookup: a damaged
    # one ends the process when that byte is tokenized)
    bad = next((i for i, t in enumerate(types) if t == BYTE_TYPE
                and not BYTE_TOKEN.fullmatch(tokens[i])), None)
    if bad is not None:
        raise r.fail(f"byte token {bad} reads {tokens[bad]!r}, not <0xXX>")
    for name in SPECIAL_TOKEN_KEYS:
        value = meta.get(f"tokenizer.ggml.{name}_token_id")
        if value is not None and not (isinstance(value, int) and -1 <= value < len(tokens)):
            raise r.fail(f"special token id {name}={value} is outside the vocabulary "
                         f"of {len(tokens)} tokens")


def _check_tensors(r: _Reader, n_tensors: int, meta: dict) -> None:
    names = set()
    offsets = []
    alignment = meta.get("general.alignment", 32)
    for _ in range(n_tensors):
        name = r.string("tensor name")
        if name in names:
            raise r.fail(f"tensor {name!r} appears twice")
        names.add(name)
        n_dims = r.scalar("<I")
        if not 1 <= n_dims <= 4:
            raise r.fail(f"tensor {name!r} has {n_dims} dimensions")
        dims = [r.scalar("<Q") for _ in range(n_dims)]
        if any(not 1 <= d <= MAX_DIM for d in dims):
            raise r.fail(f"tensor {name!r} has an impossible shape {dims}")
        kind = r.scalar("<I")
        if kind >= GGML_TYPE_COUNT:
            raise r.fail(f"tensor {name!r} has an unknown type {kind}")
        offset = r.scalar("<Q")
        if not isinstance(alignment, int) or alignment <= 0 or offset % alignment:
            raise r.fail(f"tensor {name!r} data offset {offset} is not aligned")
        offsets.append((offset, name))
    data_start = -(-r.pos // alignment) * alignment
    for offset, name in offsets:
        if data_start + offset >= r.size:
            raise r.fail(f"tensor {name!r} starts beyond the end of the file (truncated "
                         "download?)")

