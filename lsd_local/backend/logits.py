"""The logits rows of a llama_context as a zero-copy numpy view, and the check that refuses
NaN and +inf in them.

Both run once per decode, right after llama_decode has streamed the model's weights through
the CPU caches, so every Python object touched there is a cache miss: the view is built only
when llama.cpp moves its output buffer, and the check is one SIMD max over the block.
"""

from __future__ import annotations

import ctypes

import llama_cpp as ll
import numpy as np

from ..errors import ModelOutputError


def _logits_address_function():
    """llama_get_logits returning the buffer's address as an int (llama-cpp-python's binding
    builds a ctypes pointer object on every call, much slower: docs/benchmarks.md). A separate
    function object of the same library, so llama-cpp-python's own binding is left as it is; if
    a later llama-cpp-python hides its library handle, the address comes through its
    binding."""
    library = getattr(getattr(ll, "llama_cpp", None), "_lib", None)
    if library is None:
        return lambda ctx: ctypes.cast(ll.llama_get_logits(ctx), ctypes.c_void_p).value or 0
    function = library["llama_get_logits"]
    function.argtypes = [ctypes.c_void_p]
    function.restype = ctypes.c_void_p
    return function


class LogitsView:
    """float32[rows, n_vocab] views of one context's logits buffer."""

    def __init__(self, ctx: int, max_rows: int, n_vocab: int) -> None:
        self._ctx = ctx
        self._max_rows = max_rows
        self._n_vocab = n_vocab
        self._address_of = _logits_address_function()
        self._address = 0
        self._all = np.empty((0, n_vocab), np.float32)

    def rows(self, n_rows: int) -> np.ndarray:
        """The first n_rows rows of the buffer (valid until the next decode). The view spans
        max_rows rows whatever llama.cpp allocated: only rows the last decode wrote are ever
        sliced, and creating the view reads nothing."""
        address = self._address_of(self._ctx) or 0  # c_void_p gives None for NULL
        if address != self._address:
            if not address:
                raise RuntimeError("llama.cpp returned no logits buffer")
            size = self._max_rows * self._n_vocab
            buffer = (ctypes.c_float * size).from_address(address)
            self._all = np.frombuffer(buffer, np.float32).reshape(self._max_rows, self._n_vocab)
            self._address = address
        return self._all[:n_rows]


def check_finite(logits: np.ndarray, name: str) -> None:
    """Refuse NaN and +inf logits (float32[rows, V]) once per decode, so that no verifier or
    sampler ever ranks garbage (-inf is a token of probability 0 and stays). The block's max
    is NaN when any entry is NaN and +inf when one is +inf: one SIMD pass (cheaper than a
    sum) decides; only a bad block is searched for its row."""
    if logits.size == 0 or logits.max() < np.inf:  # NaN < inf is False
        return
    bad = np.flatnonzero((np.isnan(logits) | (logits == np.inf)).any(axis=1))
    raise ModelOutputError(
        f"llama.cpp returned NaN or infinite logits from {name} (row {int(bad[0])} of "
        f"{len(logits)}): the model file or the compute backend is broken; try another "
        "quantization or backend")
