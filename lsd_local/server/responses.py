"""OpenAI response objects for chat and text completions, whole and streamed (SSE chunks)."""

from __future__ import annotations

import json
import time

LSD_FIELDS = ("tau", "acceptance_rate", "rounds", "drafted", "accepted_exact",
              "accepted_loose", "draft_sources", "decode_tokens_per_second", "prefill_seconds",
              "cached_prompt_tokens")


def usage(prompt_tokens: int, stats: dict) -> dict:
    """OpenAI's usage object; cached_tokens is the prompt prefix the KV cache already held."""
    completion = stats["generated_tokens"]
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": stats["cached_prompt_tokens"]}}


def lsd_info(stats: dict, timed_out: bool, ttft: float | None) -> dict:
    """What speculation did for this answer (the `lsd` object of each response)."""
    info = {name: stats[name] for name in LSD_FIELDS}
    info["timed_out"] = timed_out
    info["time_to_first_token"] = ttft
    return info


class Shaper:
    """Builds one request's objects: chat.completion(.chunk) or text_completion."""

    def __init__(self, kind: str, job_id: str, model: str) -> None:
        self.chat = kind == "chat"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + job_id
        self.model = model
        self.created = int(time.time())

    def _envelope(self, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat \
            else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, text: str, finish: str, prompt_tokens: int, stats: dict,
              lsd: dict) -> dict:
        """The non-streaming response."""
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return {**self._envelope(False), "choices": [choice],
                "usage": usage(prompt_tokens, stats), "lsd": lsd}

    def chunk(self, text: str | None = None, finish: str | None = None, role: bool = False,
              lsd: dict | None = None) -> str:
        """One SSE event with a text delta (and the finish reason on the last one)."""
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else (
                {} if text is None else {"content": text})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        body = {**self._envelope(True), "choices": [choice]}
        if lsd is not None:
            body["lsd"] = lsd
        return sse(body)

    def usage_chunk(self, prompt_tokens: int, stats: dict) -> str:
        """stream_options.include_usage: a last chunk with no choices and the usage."""
        return sse({**self._envelope(True), "choices": [],
                    "usage": usage(prompt_tokens, stats)})


def sse(body: dict) -> str:
    """One server-sent event carrying a JSON object."""
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


SSE_DONE = "data: [DONE]\n\n"
