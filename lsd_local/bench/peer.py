"""llama-cpp-python's own high-level speculative decoding, as `lsd bench`'s peer column."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

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
        self.llm = ll.Llama(model_path=str(path), n_ctx=n_ctx, verbose=False, logits_all=True,
                            n_threads=n_threads or physical_cores(),
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
