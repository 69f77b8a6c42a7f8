"""A tiny random-weight llama GGUF with Q8_0 matrices, written with numpy alone: the model
the CPU probe (cpu_probe.py) loads. Q8_0 takes ggml's AMX path where a build has one, and
the shapes meet its tile alignment (rows and columns multiples of 32)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

ALIGNMENT = 32  # GGUF's default general.alignment
F32, Q8_0 = 0, 8  # ggml_type ids
UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9  # gguf_type ids
Q8_BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", 32)])  # ggml's block_q8_0
N_EMBD, N_FF, N_HEAD, N_VOCAB = 256, 512, 4, 320


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _value(kind: int, value) -> bytes:
    if kind == STRING:
        return _string(value)
    if kind == ARRAY:
        item_kind, items = value
        return (struct.pack("<IQ", item_kind, len(items))
                + b"".join(_value(item_kind, item) for item in items))
    return struct.pack({UINT32: "<I", INT32: "<i", FLOAT32: "<f", BOOL: "<?"}[kind], value)


def quantize_q8_0(weights: np.ndarray) -> bytes:
    """float32[rows, cols] (cols % 32 == 0) -> ggml Q8_0 blocks: a float16 scale and 32
    int8 values per 32 weights."""
    blocks = weights.astype(np.float32).reshape(-1, 32)
    scale = np.abs(blocks).max(axis=1) / 127.0
    safe = np.where(scale > 0, scale, 1.0)
    out = np.empty(len(blocks), Q8_BLOCK)
    out["d"] = scale.astype(np.float16)
    out["qs"] = np.clip(np.rint(blocks / safe[:, None]), -127, 127).astype(np.int8)
    return out.tobytes()


def _metadata(n_ctx: int) -> list[tuple[str, int, object]]:
    tokens = (["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
              + [f"\u2581w{i}" for i in range(N_VOCAB - 259)])
    types = [2, 3, 3] + [6] * 256 + [1] * (N_VOCAB - 259)  # unknown, control, byte, normal
    return [("general.architecture", STRING, "llama"), ("general.file_type", UINT32, 7),
            ("llama.context_length", UINT32, n_ctx), ("llama.embedding_length", UINT32, N_EMBD),
            ("llama.block_count", UINT32, 1), ("llama.feed_forward_length", UINT32, N_FF),
            ("llama.attention.head_count", UINT32, N_HEAD),
            ("llama.attention.head_count_kv", UINT32, N_HEAD),
            ("llama.rope.dimension_count", UINT32, N_EMBD // N_HEAD),
            ("llama.attention.layer_norm_rms_epsilon", FLOAT32, 1e-5),
            ("tokenizer.ggml.model", STRING, "llama"),
            ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
            ("tokenizer.ggml.scores", ARRAY, (FLOAT32, [0.0] * N_VOCAB)),
            ("tokenizer.ggml.token_type", ARRAY, (INT32, types)),
            ("tokenizer.ggml.bos_token_id", UINT32, 1), ("tokenizer.ggml.eos_token_id", UINT32, 2),
            ("tokenizer.ggml.unknown_token_id", UINT32, 0),
            ("tokenizer.ggml.add_bos_token", BOOL, True)]


def _tensors(seed: int) -> list[tuple[str, int, np.ndarray]]:
    """(name, ggml type, float32 array in GGUF's row-major layout)."""
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    ones = np.ones(N_EMBD, np.float32)
    out = [("token_embd.weight", F32, mat(N_VOCAB, N_EMBD)), ("output_norm.weight", F32, ones),
           ("output.weight", Q8_0, mat(N_VOCAB, N_EMBD)),
           ("blk.0.attn_norm.weight", F32, ones), ("blk.0.ffn_norm.weight", F32, ones)]
    out += [(f"blk.0.{name}.weight", Q8_0, mat(N_EMBD, N_EMBD))
            for name in ("attn_q", "attn_k", "attn_v", "attn_output")]
    out += [("blk.0.ffn_gate.weight", Q8_0, mat(N_FF, N_EMBD)),
            ("blk.0.ffn_up.weight", Q8_0, mat(N_FF, N_EMBD)),
            ("blk.0.ffn_down.weight", Q8_0, mat(N_EMBD, N_FF))]
    return out


def _pad(n: int) -> int:
    return -n % ALIGNMENT


def write_probe_model(path: Path, n_ctx: int = 256, seed: int = 0) -> Path:
    """Write the model (about 0.6 MB) to `path` and return it."""
    metadata, tensors = _metadata(n_ctx), _tensors(seed)
    header = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(metadata))]
    header += [_string(key) + struct.pack("<I", kind) + _value(kind, value)
               for key, kind, value in metadata]
    blobs, offset = [], 0
    for name, kind, array in tensors:
        data = quantize_q8_0(array) if kind == Q8_0 else array.tobytes()
        dims = array.shape[::-1]  # ggml's ne: the row length first
        header.append(_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims,
                                                  kind, offset))
        blobs.append(data + b"\0" * _pad(len(data)))
        offset += len(blobs[-1])
    head = b"".join(header)
    path.write_bytes(head + b"\0" * _pad(len(head)) + b"".join(blobs))
    return path
