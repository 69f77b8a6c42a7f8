"""What the sampling, chat and tool options mean for Engine.generate (lsd run, chat, serve):
llama.cpp's spellings turned into the library's values, JSON options read and checked."""

from __future__ import annotations

from ..errors import ParameterError


def generation_kwargs(opts: dict) -> dict:
    """Engine.generate's keyword arguments from the sampling options."""
    out = {name: opts[name] for name in ("max_tokens", "temperature", "top_k", "top_p",
                                         "min_p", "seed", "stop", "grammar", "json_schema",
                                         "repeat_penalty", "repeat_last_n", "presence_penalty",
                                         "frequency_penalty")}
    out["logit_bias"] = parse_logit_bias(opts["logit_bias"]) or None
    out["reasoning"] = opts.get("reasoning_format", "auto") != "none"
    out["reasoning_budget"] = opts.get("reasoning_budget", -1)
    out["chat_template_kwargs"] = _json_option(opts.get("chat_template_kwargs"),
                                               "chat_template_kwargs", dict)
    if opts.get("tools_file"):
        out["tools"] = _json_option(_read_option_file(opts["tools_file"]), "tools", list)
        choice = opts.get("tool_choice") or "auto"
        out["tool_choice"] = choice if choice in ("auto", "none", "required") else {
            "type": "function", "function": {"name": choice}}
    return out


def _read_option_file(path: str) -> str:
    try:
        return open(path, encoding="utf-8").read()  # noqa: SIM115 - one read
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError(f"invalid tools: cannot read {path}: {exc}",
                             param="tools") from None


def _json_option(text: str | None, name: str, kind: type):
    """A JSON option's value (None when not given); ParameterError names the option."""
    import json

    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParameterError(f"invalid {name}: not JSON ({exc})", param=name) from None
    if not isinstance(value, kind):
        raise ParameterError(f"invalid {name}: a JSON {kind.__name__}", param=name)
    return value


def parse_logit_bias(items: tuple[str, ...]) -> list[list]:
    """llama.cpp's TOKEN(+|-)BIAS items -> [[token id, bias], ...] (bias -inf: banned)."""
    import re

    out = []
    for item in items:
        found = re.fullmatch(r"\s*(\d+)\s*([+-])\s*(inf|[0-9.]+)\s*", item)
        if not found:
            raise ParameterError(f"invalid logit_bias: {item!r} (TOKEN+BIAS or TOKEN-BIAS, "
                                 "e.g. 15043+1 or 15043-inf)", param="logit_bias")
        token, sign, size = found.groups()
        out.append([int(token), (-1.0 if sign == "-" else 1.0) * float(size)])
    return out
