"""Random-weight GGUF files with the shapes of Qwen2.5-Coder 1.5B and 0.5B, and the
verification cost t(K) of each on whatever device llama.cpp puts them (all layers offloaded
when a GPU is there): what `--k auto` trades off, where real files cannot be carried.

    python bench/gpu_shapes.py [--dir DIR] [--max-k 33] [--cpu-too] [--types f16,q4_k_m]

F16 weights (the `gguf` package writes them; speed does not depend on the values) with the
qwen2 architecture (attention biases, GQA, tied embeddings) and a 151,936-token
SentencePiece-style vocabulary, and a Q4_K_M copy made by llama.cpp's own quantizer: the
weight types of the files `lsd pull` gives (Q6_K for the tied output head, attention V and
half the FFN down projections, Q4_K elsewhere). Run by bench/gpu_check.sh on a GPU machine.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

N_VOCAB = 151936


@dataclass(frozen=True)
class Shape:
    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int


SHAPES = [Shape("qwen2.5-coder-1.5b-shape", 1536, 28, 12, 2, 8960),
          Shape("qwen2.5-coder-0.5b-shape", 896, 24, 14, 2, 4864)]


def write_model(path: Path, shape: Shape, seed: int = 0) -> Path:
    """A qwen2 GGUF of `shape` with F16 random weights (norms and biases F32)."""
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    d, head_dim = shape.n_embd, shape.n_embd // shape.n_head
    kv = shape.n_head_kv * head_dim

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(
            np.float16)

    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name(shape.name)
    writer.add_context_length(32768)
    writer.add_embedding_length(d)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_freq_base(1e6)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581w{i}" for i in range(N_VOCAB - len(tokens))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (N_VOCAB - 259)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * 259 + [-float(i) for i in range(N_VOCAB - 259)])
    writer.add_token_types([int(t) for t in types])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_tensor("token_embd.weight", mat(N_VOCAB, d))
    writer.add_tensor("output_norm.weight", np.ones(d, np.float32))
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(d, np.float32))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(d, np.float32))
        writer.add_tensor(p + "attn_q.weight", mat(d, d))
        writer.add_tensor(p + "attn_q.bias", np.zeros(d, np.float32))
        writer.add_tensor(p + "attn_k.weight", mat(kv, d))
        writer.add_tensor(p + "attn_k.bias", np.zeros(kv, np.float32))
        writer.add_tensor(p + "attn_v.weight", mat(kv, d))
        writer.add_tensor(p + "attn_v.bias", np.zeros(kv, np.float32))
        writer.add_tensor(p + "attn_output.weight", mat(d, d))
        writer.add_tensor(p + "ffn_gate.weight", mat(shape.n_ff, d))
        writer.add_tensor(p + "ffn_up.weight", mat(shape.n_ff, d))
        writer.add_tensor(p + "ffn_down.weight", mat(d, shape.n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def quantized(f16: Path, name: str = "q4_k_m") -> Path:
    """A copy of an F16 file in llama.cpp's Q4_K_M mix (its quantizer, all cores)."""
    import os

    import llama_cpp

    out = f16.with_name(f16.name.replace("-f16.gguf", f"-{name}.gguf"))
    if out.exists():
        return out
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.nthread = os.cpu_count() or 1
    if llama_cpp.llama_model_quantize(str(f16).encode(), str(out).encode(), params) != 0:
        raise SystemExit(f"llama.cpp could not quantize {f16}")
    return out


def verification_costs(path: Path, max_k: int, n_gpu_layers
                       ) -> tuple[str, list[float], tuple[float, float]]:
    """(placement, seconds to score K tokens with K logit rows for K = 1..max_k, batch drift)
    after a 512-token context, medians of 5 interleaved repeats
    (estimators.measure_decode_times)."""
    from lsd_local.backend import LoadOptions, Model
    from lsd_local.drafters.auto.estimators import measure_decode_times

    model = Model.load(path, LoadOptions(n_ctx=2048, n_batch=512, n_gpu_layers=n_gpu_layers))
    try:
        context = np.random.default_rng(1).integers(300, N_VOCAB, 512).astype(np.int32)
        curve = measure_decode_times(model, context, list(range(1, max_k + 1)), repeats=5)
        return model.placement, [float(t) for t in curve.seconds], batch_drift(model, context)
    finally:
        model.close()


def batch_drift(model, context: np.ndarray, n: int = 16) -> tuple[float, float]:
    """How far the logits of a token scored as the first of a block of n differ from the
    same token scored alone (int32 context cached before it): (the largest difference,
    the logit spread of the alone row), the numerics that can make strict speculation part
    from plain greedy decoding where the top two logits nearly tie."""
    model.truncate(0)
    model.decode(context[:-1], 0, 0)
    alone = model.decode(context[-1:], len(context) - 1, 1)[0].copy()
    model.truncate(len(context) - 1)
    block = model.decode(np.resize(context[-1:], n), len(context) - 1, n)[0].copy()
    model.truncate(0)
    return float(np.abs(alone - block).max()), float(alone.max() - alone.min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/gpu-models"))
    parser.add_argument("--max-k", type=int, default=33)
    parser.add_argument("--cpu-too", action="store_true", help="also measure with 0 layers")
    parser.add_argument("--types", default="f16,q4_k_m",
                        help="weight types to measure, comma separated: f16, q4_k_m")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    types = args.types.split(",")
    print("weights: random (qwen2 architecture, Qwen2.5-Coder shapes):", ", ".join(types))
    for shape in SHAPES:
        f16 = write_model(args.dir / f"{shape.name}-f16.gguf", shape)
        paths = {"f16": f16, **({"q4_k_m": quantized(f16)} if "q4_k_m" in types else {})}
        for kind in types:
            for layers in ("auto", 0) if args.cpu_too else ("auto",):
                where, times, drift = verification_costs(paths[kind], args.max_k, layers)
                print(f"\n{shape.name} {kind} ({where}): t(K) in ms, K = 1..{args.max_k}; "
                      f"a row scored in a block of 16 differs from it alone by up to "
                      f"{drift[0]:.2e} (the row's logits span {drift[1]:.2f})")
                for k, t in enumerate(times, start=1):
                    print(f"  K={k:2d}  {t * 1000:8.2f} ms   t(K)/t(1) = {t / times[0]:5.2f}")


if __name__ == "__main__":
    main()
