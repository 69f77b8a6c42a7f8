"""OpenAI response objects for chat and text completions, whole and streamed (SSE chunks)."""

from __future__ import annotations

import json
import time

LSD_FIELDS = ("tau", "acceptance_rate", "rounds", "drafted", "accepted_exact",
              "accepted_loose", "draft_sources", "accepted_by_source",
              "decode_tokens_per_second", "prefill_seconds", "cached_prompt_tokens")


def usage(prompt_tokens: int, stats: dict) -> dict:
    """OpenAI's usage object; cached_tokens is the prompt prefix the KV cache already held."""
    completion = stats["generated_tokens"]
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": stats["cached_prompt_tokens"]},
            "completion_tokens_details": {"reasoning_tokens": stats["reasoning_tokens"]}}


def _entry(token: tuple[str, list[int]], logprob: float) -> dict:
    return {"token": token[0], "logprob": logprob, "bytes": token[1]}


def chat_logprobs(items: list[dict]) -> dict:
    """OpenAI chat's logprobs object for the worker's logprob items."""
    return {"content": [{**_entry(item["token"], item["logprob"]),
                         "top_logprobs": [_entry(t, p) for t, p in item["top"]]}
                        for item in items]}


def text_logprobs(items: list[dict], offset: int) -> dict:
    """OpenAI completions' logprobs object; `offset`: the text's length before them."""
    offsets = []
    for item in items:
        offsets.append(offset)
        offset += len(item["token"][0])
    return {"tokens": [item["token"][0] for item in items],
            "token_logprobs": [item["logprob"] for item in items],
            "top_logprobs": [{t[0]: p for t, p in item["top"]} for item in items],
            "text_offset": offsets}


class Answer:
    """A whole answer gathered from the worker's payloads: text, reasoning, tool calls."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict] = {}
        self.logprobs: list[dict] = []

    def add(self, payload: dict) -> None:
        self.text.append(payload["text"])
        self.reasoning.append(payload.get("reasoning", ""))
        for piece in payload.get("tool_calls", ()):
            call = self.calls.setdefault(piece["index"], {
                "id": piece["id"], "type": "function",
                "function": {"name": piece["name"], "arguments": ""}})
            call["function"]["arguments"] += piece["arguments"]
        self.logprobs += payload.get("logprobs", ())

    def message(self) -> dict:
        """The assistant message, as OpenAI returns it (content null when it only calls)."""
        text = "".join(self.text)
        message = {"role": "assistant", "content": text or (None if self.calls else "")}
        if any(self.reasoning):
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message


def tool_call_delta(piece: dict) -> dict:
    """OpenAI's streamed tool call piece: id, type and name first, then arguments."""
    if piece["name"] is not None:
        return {"index": piece["index"], "id": piece["id"], "type": "function",
                "function": {"name": piece["name"], "arguments": piece["arguments"]}}
    return {"index": piece["index"], "function": {"arguments": piece["arguments"]}}


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

    def whole(self, answer: Answer, finish: str, prompt_tokens: int, stats: dict,
              lsd: dict) -> dict:
        """The non-streaming response."""
        text = "".join(answer.text)
        if self.chat:
            logprobs = chat_logprobs(answer.logprobs) if answer.logprobs else None
            choice = {"index": 0, "message": answer.message(), "logprobs": logprobs,
                      "finish_reason": finish}
        else:
            logprobs = text_logprobs(answer.logprobs, 0) if answer.logprobs else None
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
        return {**self._envelope(False), "choices": [choice],
                "usage": usage(prompt_tokens, stats), "lsd": lsd}

    def chunk(self, payload: dict | None = None, finish: str | None = None,
              role: bool = False, lsd: dict | None = None, offset: int = 0) -> str:
        """One SSE event: a round's delta (content, reasoning, tool call pieces, logprobs),
        the role first, the finish reason last. `offset`: text given out before (for the
        completions' logprobs)."""
        payload = payload or {}
        items = payload.get("logprobs")
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else {}
            if payload.get("text"):
                delta["content"] = payload["text"]
            if payload.get("reasoning"):
                delta["reasoning_content"] = payload["reasoning"]
            if payload.get("tool_calls"):
                delta["tool_calls"] = [tool_call_delta(p) for p in payload["tool_calls"]]
            choice = {"index": 0, "delta": delta,
                      "logprobs": chat_logprobs(items) if items else None,
                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": payload.get("text", ""),
                      "logprobs": text_logprobs(items, offset) if items else None,
                      "finish_reason": finish}
        body = {**self._envelope(True), "choices": [choice]}
        if payload.get("round"):  # lsd_rounds: what the round did (an extension)
            body["lsd"] = {"round": payload["round"]}
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
