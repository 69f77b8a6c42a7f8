"""What a conversation's messages become for a family's chat template, where it expects them
otherwise than OpenAI sends them (chat/templates.py renders them): earlier tool calls and
results as text for a template that shows no tools, system messages in the user's turn for
one that refuses them (Gemma 2), the 9-character call ids Mistral's templates demand, and
an earlier turn's reasoning as `thinking` (LFM2). llama.cpp makes them so as well."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone

from ..utf8 import utf8_bytes
from .glmcalls import is_hy3
from .kimi3calls import is_kimi3
from .listcalls import LIST_FORMATS


def with_thinking(messages: list[dict]) -> list[dict]:
    """Each assistant turn's `reasoning_content` also as `thinking` (where a template reads
    it, as llama.cpp gives it to LFM2's)."""
    return [{**m, "thinking": m["reasoning_content"]}
            if isinstance(m.get("reasoning_content"), str) and "thinking" not in m else m
            for m in messages]


NO_SYSTEM = "System role not supported"  # what Gemma 2's template raises on a system message


def system_into_user(messages: list[dict]) -> list[dict]:
    """Each system message's text at the head of the user turn after it, for a template that
    refuses the role (Gemma 2's), as llama.cpp does for a first one; with no user turn
    after it, a user turn of its own; an empty one is left out."""
    out, pending = [], []
    for message in messages:
        if message.get("role") == "system":
            pending += [message["content"]] if message.get("content") else []
            continue
        if pending and message.get("role") == "user":
            message = {**message, _JOINS: True,
                       "content": "\n\n".join([*pending, message.get("content") or ""])}
            pending = []
        out.append(message)
    if pending:
        out.append({"role": "user", _JOINS: True, "content": "\n\n".join(pending)})
    return _joined_user_turns(out)


def tool_turns_as_text(messages: list[dict]) -> list[dict]:
    """Earlier calls and their results as text, for a template that shows no tools (Gemma's
    refuses any role but user and model, in turn): a call as the JSON the fallback asks
    for, a result as a user turn (joined to the user turns next to it), as llama.cpp's
    polyfills write them."""
    out: list[dict] = []
    names, changed = {}, False
    for message in messages:
        changed = changed or bool(message.get("tool_calls")) or message.get("role") == "tool"
        if message.get("tool_calls"):
            calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                     for c in message["tool_calls"]]
            names.update((c.get("id"), c["function"]["name"]) for c in message["tool_calls"])
            text = json.dumps({"tool_calls": calls}, ensure_ascii=False)
            message = {"role": "assistant",
                       "content": f"{message['content']}\n{text}" if message.get("content")
                       else text}
        elif message.get("role") == "tool":
            response = {"tool": names.get(message.get("tool_call_id"), ""),
                        "content": message.get("content")}
            message = {"role": "user", _JOINS: True,
                       "content": json.dumps({"tool_response": response}, ensure_ascii=False)}
        out.append(message)
    return _joined_user_turns(out) if changed else messages


_JOINS = "lsd joins"  # a user turn lsd made from another role: joined to user turns beside it


def _joined_user_turns(messages: list[dict]) -> list[dict]:
    """User turns side by side as one where lsd made one of them (a template that checks
    that roles alternate); the user's own turns stay apart, so that a conversation's
    earlier prompts stay its prefix."""
    out: list[dict] = []
    parts: list[list] = []
    for message in messages:
        user = message.get("role") == "user"
        if user and out and out[-1].get("role") == "user" and (
                message.get(_JOINS) or out[-1].get(_JOINS)):
            parts[-1].append(message["content"])
            out[-1] = {**out[-1], _JOINS: True}
        else:
            out.append(message)
            parts.append([message.get("content")])
    return [{**{k: v for k, v in m.items() if k != _JOINS},
             "content": "\n\n".join(p) if len(p) > 1 else m.get("content")}
            if m.get("role") == "user" else m for m, p in zip(out, parts, strict=True)]


# Mistral's templates refuse a tool call id that is not 9 letters and digits
NINE_CHAR_IDS = re.compile(r"id\W{0,3}\s*\|\s*length\)?\s*!=\s*9\b")
_NINE_CHARS = re.compile(r"[A-Za-z0-9]{9}")


def nine_char_ids(messages: list[dict]) -> list[dict]:
    """The messages with every tool call id (a call's `id`, a tool turn's `tool_call_id`)
    made 9 letters and digits, as Mistral's templates demand (ids from lsd or any other
    server are longer): one that is already so stays, any other becomes the first 9 hex
    digits of its SHA-256, the same in the call and in its result and in every turn, so
    that a conversation's prompt keeps its cached prefix. vLLM cuts them to their last 9."""
    out = []
    for message in messages:
        if message.get("tool_calls"):
            message = {**message, "tool_calls": [
                {**call, "id": _nine_chars(call.get("id"))} if isinstance(call, dict) else call
                for call in message["tool_calls"]]}
        if "tool_call_id" in message:
            message = {**message, "tool_call_id": _nine_chars(message["tool_call_id"])}
        out.append(message)
    return out


def _nine_chars(call_id: object) -> object:
    if call_id is None or isinstance(call_id, (dict, list, bool)):
        return call_id  # (the template's own check names what is wrong)
    text = str(call_id)  # (a number too)
    if _NINE_CHARS.fullmatch(text):
        return text
    return hashlib.sha256(utf8_bytes(text)).hexdigest()[:9]  # (lone surrogates too)


def thinking_switch(template: str | None, kwargs: dict) -> dict:
    """The template kwargs with `enable_thinking` (the switch most families read, and `lsd
    chat`'s /think) also given as MiniMax-M3's `thinking_mode` ("enabled" or "disabled"),
    Kimi K3's `thinking`, Cohere2 MoE's `reasoning` or Hy3's `reasoning_effort` (hy3_effort),
    unless the request sets that itself."""
    if is_hy3(template):
        return hy3_effort(kwargs)
    if not template or "enable_thinking" not in kwargs:
        return kwargs
    on = kwargs["enable_thinking"]
    if "thinking_mode" in template and "thinking_mode" not in kwargs:
        return {**kwargs, "thinking_mode": "enabled" if on else "disabled"}
    if is_kimi3(template) and "thinking" not in kwargs:
        return {**kwargs, "thinking": bool(on)}
    if COHERE2_TEXT in template and "reasoning" not in kwargs:
        return {**kwargs, "reasoning": bool(on)}
    return kwargs


# Hy3's template takes reasoning_effort "high", "low" or "no_think" (its default) and refuses
# any other: OpenAI's efforts are given as the nearest of those, enable_thinking as high or
# no_think
HY3_EFFORTS = {"none": "no_think", "no_think": "no_think", "minimal": "low", "low": "low",
               "medium": "high", "high": "high", "xhigh": "high"}


def hy3_effort(kwargs: dict) -> dict:
    """The template kwargs with `reasoning_effort` as Hy3's template reads it (a value it
    does not know is left for it to refuse, with its own message)."""
    effort = kwargs.get("reasoning_effort")
    if effort is None and "enable_thinking" in kwargs:
        effort = "high" if kwargs["enable_thinking"] else "no_think"
    if isinstance(effort, str) and effort in HY3_EFFORTS:
        return {**kwargs, "reasoning_effort": HY3_EFFORTS[effort]}
    return kwargs


COHERE2_TEXT = "<|START_TEXT|>"  # (Cohere2 MoE's answers; its template reads `reasoning`)
FIREFUNCTION_SIGN = LIST_FORMATS["firefunction"][0]  # (FireFunction v2's calls' opener)


def firefunction_kwargs(template: str | None, tools, kwargs: dict) -> dict:
    """The template kwargs with what FireFunction v2's template reads instead of `tools`, as
    llama.cpp gives them: `functions`, the tools' JSON text, and `datetime`, today in its
    format (at midnight: a prompt that changed every second would reuse no cached prefix,
    its first line being the system turn), unless the request sets them."""
    if not template or FIREFUNCTION_SIGN not in template:
        return kwargs
    today = datetime.now(timezone.utc).strftime("%b %d %Y 00:00:00 GMT")
    return {"functions": json.dumps(list(tools), indent=2, ensure_ascii=False) if tools else "",
            "datetime": today, **kwargs}


# What ends a family's turn where its GGUF may not mark it as an end of generation, or its
# model may spell it out (llama.cpp's "additional stops"): Ling 3's <|role_end|>, and
# poolside Laguna's </assistant>, which its model writes as text after tool calls
TURN_ENDS = (("<role>ASSISTANT</role>", "<|role_end|>"), ("laguna_glm_thinking", "</assistant>"))


def turn_ends(template: str | None) -> tuple[str, ...]:
    """Stop strings a chat answer in this template's family ends at, besides its end of
    generation tokens (shown as text where they are control tokens, to be found)."""
    return tuple(end for sign, end in TURN_ENDS if template and sign in template and
                 end in template)
