"""Models: load a GGUF file, tokenize, decode with explicit positions, truncate the cache.

A `Model` owns one llama_model, one llama_context with `LoadOptions.n_seq` sequences (one
`Slot` each: backend/slot.py) and one reusable llama_batch. The model's own decode, truncate
and state methods act on sequence 0, so a model loaded with one sequence is used as before.
Positions are explicit: `decode(tokens, start_pos, n_logit_rows)` appends tokens at
`start_pos..` (which must equal the number of cached positions) and `truncate(n)` removes every
cached position >= n. Logits are requested only for the trailing `n_logit_rows` tokens and
returned as a zero-copy float32 view that stays valid until the next `decode`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as ll
import numpy as np

from ..config import LoadOptions
from ..errors import (
    ModelLoadError,
    check,
)
from .cpu_probe import RepackDecision, repack_decision
from .devices import device_array, list_devices, offload_layers, select_devices
from .gguf_check import check_gguf
from .logits import LogitsView
from .slot import SeqState, Slot, TokenBatch
from .vocab import Vocab

SPLIT_MODE_IDS = {"none": 0, "layer": 1, "row": 2}  # llama_split_mode
GGUF_MAGIC = b"GGUF"


class _LogSink:
    """Collects llama.cpp's log lines so that load failures can quote the reason."""

    def __init__(self) -> None:
        self.verbose = False
        self.recent: deque[str] = deque(maxlen=20)
        self.callback = ll.llama_log_callback(self._on_log)  # kept alive by this object

    def _on_log(self, level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        line = text.decode("utf-8", errors="replace")
        if level in (3, 4):  # GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR
            self.recent.append(line.strip())
        if self.verbose:
            print(line, end="", file=sys.stderr)


_log_sink: _LogSink | None = None  # installed on first load, never at import


def _install_log_sink(verbose: bool) -> _LogSink:
    global _log_sink
    if _log_sink is None:
        logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL)
        ll.llama_backend_init()
        _log_sink = _LogSink()
        ll.llama_log_set(_log_sink.callback, ctypes.c_void_p(0))
    _log_sink.verbose = verbose
    return _log_sink


def physical_cores() -> int:
    """Number of physical CPU cores (llama.cpp's default thread count), from sysfs when possible."""
    siblings = set()
    for cpu in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/thread_siblings_list"):
        try:
            siblings.add(cpu.read_text().strip())
        except OSError:
            continue
    return len(siblings) or os.cpu_count() or 1


def recurrent_message(model: Model) -> str:
    """What a recurrent/hybrid model cannot do, said the same way wherever it matters."""
    return (f"{model.path.name} is a recurrent/hybrid model whose cache cannot drop rejected "
            "tokens")


def _check_gguf_file(path: Path) -> None:
    if not path.exists():
        raise ModelLoadError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelLoadError(f"model path is a directory, not a .gguf file: {path}")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelLoadError(f"cannot read model file {path}: {exc.strerror}") from None
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF file (bad magic {magic!r}): {path}")


class Model:
    """One GGUF model with its own context and KV cache (sequence 0)."""

    def __init__(self, path: Path, model_p, ctx_p, opts: LoadOptions) -> None:
        self.path = path
        self.options = opts
        self._model = model_p
        self.ctx = ctx_p
        self.vocab = Vocab(ll.llama_model_get_vocab(model_p))  # lives as long as model_p
        self.memory = ll.llama_get_memory(ctx_p)
        self.n_vocab: int = self.vocab.n_tokens
        self.n_seq: int = max(opts.n_seq, 1)  # sequences: slots (backend/slot.py)
        self.n_ctx: int = ll.llama_n_ctx(ctx_p) // self.n_seq  # the most one sequence holds
        self.n_batch: int = ll.llama_n_batch(ctx_p)
        self.placement = "CPU"  # where its layers went (Model.load says)
        self.repack = RepackDecision(True)  # llama.cpp's extra buffer types (Model.load says)
        # the most logit rows one decode has asked for: llama.cpp's logits buffer has grown
        # to hold them (a decode asking more grows it again, a one-time cost)
        self.most_logit_rows = 0
        # called after each llama_decode (every prefill chunk, every round): a watchdog in
        # another process learns that the model is not stuck inside C (lsd serve)
        self.on_decoded: Callable[[], None] | None = None
        self.supports_truncate = not (ll.llama_model_is_recurrent(model_p)
                                      or ll.llama_model_is_hybrid(model_p))
        self.batch = TokenBatch(self.n_batch, self.n_seq)
        self.logits = LogitsView(ctx_p, self.n_batch, self.n_vocab)
        self.slots = tuple(Slot(self, seq) for seq in range(self.n_seq))

    @classmethod
    def load(cls, path: str | os.PathLike, opts: LoadOptions | None = None) -> Model:
        """Load a GGUF file; raise ModelLoadError with llama.cpp's reason when it fails."""
        opts = opts or LoadOptions()
        path = Path(path).expanduser()
        _check_gguf_file(path)
        check_gguf(path)  # damage llama.cpp would abort the process on
        sink = _install_log_sink(opts.verbose)
        sink.recent.clear()
        params, placement = _model_params(opts)
        model_p = ll.llama_model_load_from_file(os.fsencode(path), params)
        if not model_p:
            reason = "; ".join(sink.recent) or "llama.cpp gave no reason"
            raise ModelLoadError(f"cannot load {path.name}: {reason}")
        ctx_p = ll.llama_init_from_model(model_p, _context_params(opts))
        if not ctx_p:
            ll.llama_model_free(model_p)
            reason = "; ".join(sink.recent) or "out of memory?"
            raise ModelLoadError(f"cannot create a context for {path.name}: {reason}")
        model = cls(path, model_p, ctx_p, opts)
        model.placement = placement.describe(ll.llama_model_n_layer(model_p))
        model.repack = repack_decision(opts.no_repack, build_identity())
        return model

    def chat_template(self, name: str | None = None) -> str | None:
        """The GGUF's default chat template (Jinja text), or the one it names `name`
        (`tokenizer.chat_template.NAME`, e.g. "tool_use"), if it ships one."""
        raw = ll.llama_model_chat_template(self._model, name.encode() if name else None)
        return raw.decode("utf-8", errors="replace") if raw else None

    @property
    def n_params(self) -> int:
        return int(ll.llama_model_n_params(self._model))

    # --- evaluation (sequence 0; a slot per sequence: backend/slot.py) ---------------------

    def decode(self, tokens: Sequence[int] | np.ndarray, start_pos: int,
               n_logit_rows: int) -> np.ndarray:
        """Evaluate `tokens` at positions start_pos.. of sequence 0 and return logits of the
        last rows: Slot.decode."""
        return self.slots[0].decode(tokens, start_pos, n_logit_rows)

    @property
    def n_cached(self) -> int:
        """Positions 0..n_cached-1 of sequence 0 are in the KV cache."""
        return self.slots[0].n_cached

    @property
    def cached_tokens(self) -> np.ndarray:
        """int32[n_cached]: the tokens whose keys and values are in the cache (a view)."""
        return self.slots[0].cached_tokens

    def reuse_prefix(self, tokens: np.ndarray, limit: int) -> int:
        """Slot.reuse_prefix of sequence 0."""
        return self.slots[0].reuse_prefix(tokens, limit)

    def truncate(self, n: int) -> None:
        """Remove every cached position >= n of sequence 0."""
        self.slots[0].truncate(n)

    def state_nbytes(self) -> int:
        """Bytes `save_state` would copy now (llama.cpp's exact size)."""
        return self.slots[0].state_nbytes()

    def save_state(self) -> SeqState:
        """A copy of sequence 0's cache and tokens (Slot.save_state)."""
        return self.slots[0].save_state()

    def restore_state(self, state: SeqState) -> None:
        """Replace sequence 0's cache with a saved one (Slot.restore_state)."""
        self.slots[0].restore_state(state)

    def close(self) -> None:
        """Free the context, batch and model (idempotent)."""
        if self.ctx:
            self.batch.free()
            ll.llama_free(self.ctx)
            self.ctx = None
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit llama_cpp may be gone
            self.close()


@dataclass(frozen=True)
class Placement:
    """Where llama.cpp was told to put a model's layers."""

    n_gpu_layers: int  # llama.cpp's value: -1 = all
    devices: tuple[str, ...]  # the devices that take layers, by name

    def describe(self, n_layer: int) -> str:
        """One line: "CPU", or how many layers go to which devices."""
        if self.n_gpu_layers == 0 or not self.devices:
            return "CPU"
        n_blocks = n_layer + 1  # llama.cpp counts the output layer as one more
        layers = n_blocks if self.n_gpu_layers < 0 else min(self.n_gpu_layers, n_blocks)
        where = ", ".join(self.devices)
        rest = "" if layers == n_blocks else f" (the other {n_blocks - layers} on the CPU)"
        return f"{layers}/{n_blocks} layers on {where}{rest}"


def _model_params(opts: LoadOptions):
    """llama_model_params for `opts`, and where that puts the layers."""
    params = ll.llama_model_default_params()
    n_gpu_layers, devices = opts.n_gpu_layers, ()
    if opts.devices is not None or not isinstance(n_gpu_layers, int) or n_gpu_layers != 0:
        available = list_devices()
        allowed = select_devices(opts.devices, available)
        n_gpu_layers = offload_layers(n_gpu_layers, allowed, available)
        pool = available if allowed is None else allowed
        devices = tuple(d.name for d in pool if d.takes_layers)
        array = device_array(allowed)
        if array is not None:
            params.devices = ctypes.cast(array, ctypes.c_void_p)
            params._devices_ref = array  # keep the array alive as long as params
    params.n_gpu_layers = n_gpu_layers
    params.use_extra_bufts = repack_decision(opts.no_repack, build_identity()).use_extra_bufts
    params.main_gpu = opts.main_gpu
    params.split_mode = SPLIT_MODE_IDS[opts.split_mode]
    if opts.tensor_split:
        # llama.cpp reads llama_max_devices() floats from this pointer: pad with zeros
        n_max = ll.llama_max_devices()
        check(len(opts.tensor_split) <= n_max, "tensor_split",
              f"{len(opts.tensor_split)} values (this build splits over {n_max} at most)")
        arr = (ctypes.c_float * n_max)(*opts.tensor_split)
        params.tensor_split = ctypes.cast(arr, ctypes.POINTER(ctypes.c_float))
        params._tensor_split_ref = arr  # keep the array alive as long as params
    return params, Placement(n_gpu_layers, devices)


def _context_params(opts: LoadOptions):
    params = ll.llama_context_default_params()
    threads = opts.n_threads or physical_cores()
    n_seq = max(opts.n_seq, 1)
    params.n_ctx = opts.n_ctx * n_seq  # every sequence may hold n_ctx
    params.n_batch = opts.n_batch
    params.n_ubatch = opts.n_batch
    params.n_seq_max = n_seq
    # one KV buffer for all sequences: a batch of several is then one ubatch (llama.cpp
    # splits a batch per sequence otherwise), and one sequence may use cells others do not
    params.kv_unified = n_seq > 1
    params.n_threads = threads
    params.n_threads_batch = threads
    params.no_perf = True
    return params


def build_identity() -> str:
    """This llama.cpp build: llama-cpp-python's version and the backends and CPU features
    llama.cpp reports (learned timings are only valid for the same build)."""
    info = ll.llama_print_system_info()
    return f"{ll.__version__} {info.decode(errors='replace') if info else ''}".strip()
