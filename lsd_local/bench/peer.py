"""llama-cpp-python's own high-level speculative decoding, as `lsd bench`'s peer column."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence

import llama_cpp as ll

from ..backend.model import physical_cores


class PeerLlama:
    """llama-cpp-python's own high-level speculative decoding, for `lsd bench`'s peer column:
    `Llama(draft_model=LlamaPromptLookupDecoding(num_pred_tokens))`, greedy chat completion."""

    def __init__(self, path: str | os.PathLike, n_ctx: int, n_threads: int | None,
                 num_pred_tokens: int = 10) -> None:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        # logits_all=True as llama-cpp-python itself forces with a draft model; passing it
        # explicitly also sizes its score buffer to n_ctx (else prompts > n_batch fail).
        with _extra_bufts_as_lsd():
            self.llm = ll.Llama(model_path=str(path), n_ctx=n_ctx, verbose=False,
                                logits_all=True, n_threads=n_threads or physical_cores(),
                                draft_model=LlamaPromptLookupDecoding(
                                    num_pred_tokens=num_pred_tokens))

    def generate(self, messages: Sequence[dict], max_tokens: int) -> tuple[str, float, float]:
        """(answer text, seconds to the first token, seconds from the first to the last)."""
        self.llm.reset()
        start = time.perf_counter()
        first = last = None
        parts = []
        for chunk in self.llm.create_chat_completion(list(messages), max_tokens=max_tokens,
                                                     temperature=0.0, stream=True):
            delta = chunk["choices"][0]["delta"].get("content")
            if delta:
                last = time.perf_counter()
                first = first or last
                parts.append(delta)
        if first is None:
            return "", time.perf_counter() - start, 0.0
        return "".join(parts), first - start, last - first

    def close(self) -> None:
        self.llm.close()


@contextlib.contextmanager
def _extra_bufts_as_lsd() -> Iterator[None]:
    """While a Llama loads: its model parameters with extra buffer types off where lsd loads
    so (a CPU that traps AMX: with them on, its first batch kills the process). Llama takes no
    such argument, so the default parameters it starts from are made so for that time."""
    from ..backend.cpu_probe import repack_off

    if not repack_off():
        yield
        return
    lowlevel = ll.llama_cpp
    default = lowlevel.llama_model_default_params

    def without_extra_bufts():
        params = default()
        params.use_extra_bufts = False
        return params

    lowlevel.llama_model_default_params = without_extra_bufts
    try:
        yield
    finally:
        lowlevel.llama_model_default_params = default
