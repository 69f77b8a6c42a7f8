"""A validated request body -> the engine's Job. Every setting is checked here, in the HTTP
process (a bad request is a 400 before it waits in the queue): the sampler, penalties and
biases, logprobs, tools and tool_choice, the messages (tool turns answer calls made before
them), grammars, and lsd's speculation settings. A sampling field of OpenAI's or
llama-server's that lsd does not implement is refused by name, never ignored.
"""

from __future__ import annotations

import json
import math

from ..chat.templates import check_template_kwargs, normalize_messages
from ..chat.tools import choose_tools, parse_tools
from ..config import MAX_TOP_LOGPROBS
from ..errors import GrammarError, ParameterError
from ..grammars import shipped_grammars
from ..limits import (
    MAX_STOP_CHARS,
    MAX_STOP_STRINGS,
    MAX_TOOLS,
    REQUEST_MAX_BUDGET,
    REQUEST_MAX_ENTROPY_TOP_K,
    REQUEST_MAX_EXCEPTIONS,
    REQUEST_MAX_GATE,
    REQUEST_MAX_K,
    REQUEST_MIN_THETA,
    REQUEST_MIN_WINDOW,
    TOOLS_MAX_BYTES,
    check_grammar,
    check_schema,
)
from ..request import Request
from .protocol import (
    ChatRequest,
    CompletionRequest,
    Defaults,
    Job,
    RequestError,
    _Common,
)

# llama-server's samplers lsd does not implement, and the value that leaves each off
REFUSED = {"typical_p": 1.0, "mirostat": 0, "dry_multiplier": 0.0, "xtc_probability": 0.0,
           "top_n_sigma": -1.0, "dynatemp_range": 0.0, "ignore_eos": False,
           "samplers": None, "penalize_nl": False}
DRAFTER_FIELDS = ("drafter", "k", "p_min")
RULE_FIELDS = ("rule", "theta", "window", "entropy_top_k", "entropy", "gate", "max_exceptions",
               "budget")
REASONING_FORMATS = ("auto", "deepseek", "deepseek-legacy", "none")


def refuse_unsupported(req: _Common) -> None:
    """Features lsd does not implement are refused, not silently ignored."""
    if req.n not in (None, 1):
        raise RequestError(400, f"invalid n: {req.n} (lsd returns one choice: n must be 1)",
                           "n")
    for name, off in REFUSED.items():
        value = (req.model_extra or {}).get(name, off)
        if value != off and value is not None:
            raise RequestError(400, f"{name} is not supported (lsd has no such sampler; "
                               f"leave it out or {off!r})", name)
    if getattr(req, "echo", False):
        raise RequestError(400, "echo is not supported", "echo")
    if getattr(req, "suffix", None):
        raise RequestError(400, "suffix (fill-in-the-middle) is not supported", "suffix")
    if getattr(req, "best_of", None) not in (None, 1):
        raise RequestError(400, "best_of must be 1", "best_of")


def chat_messages(req: ChatRequest, system: str | None) -> list[dict]:
    """The messages as the engine takes them (normalized and checked: a tool turn must
    answer a call made before it), with --system first when the chat brings none."""
    raw = [m.model_dump(exclude_none=True) for m in req.messages]
    for message in raw:
        message.setdefault("content", None)
        if message["role"] == "developer":  # OpenAI's newer name for the system role
            message["role"] = "system"
    messages = normalize_messages(raw)
    if system is not None and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": system})
    return messages


def constraint(req: _Common, defaults: Defaults) -> dict:
    """grammar / json_schema for Engine.generate. A request's grammar is GBNF text or a
    shipped grammar's name, never a path: a client must not make the server read files."""
    fmt = req.response_format
    given = [name for name, value in (("grammar", req.grammar), ("json_schema", req.json_schema),
             ("response_format", fmt if fmt and fmt.type != "text" else None)) if value]
    if len(given) > 1:
        raise RequestError(400, f"give one of {', '.join(given)}, not several", given[1])
    if req.grammar is not None:
        if req.grammar not in shipped_grammars():
            if "::=" not in req.grammar:
                raise RequestError(400, "invalid grammar: GBNF text (rules with ::=) or the "
                                   "name of a shipped grammar", "grammar")
            check_grammar(req.grammar, "grammar", "grammar")
        return {"grammar": req.grammar, "json_schema": None}
    if req.json_schema is not None:
        check_schema(req.json_schema, "json_schema", "json_schema")
        return {"grammar": None, "json_schema": req.json_schema}
    if fmt is not None and fmt.type == "json_object":
        return {"grammar": "json_object", "json_schema": None}
    if fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise RequestError(400, "invalid response_format.json_schema: it needs a schema",
                               "response_format.json_schema")
        check_schema(fmt.json_schema.schema_, "response_format.json_schema",
                     "response_format.json_schema")
        return {"grammar": None, "json_schema": fmt.json_schema.schema_}
    return {name: defaults.generate.get(name) for name in ("grammar", "json_schema")}


def sampling(req: _Common, defaults: Defaults, max_tokens: int | None) -> dict:
    """The sampler, penalties, biases and stop strings for Engine.generate."""
    base = defaults.generate
    pick = {name: getattr(req, name) if getattr(req, name) is not None else base[name]
            for name in ("temperature", "top_k", "top_p", "min_p", "seed", "repeat_penalty",
                         "repeat_last_n", "presence_penalty", "frequency_penalty")}
    stop = _stops(req.stop if req.stop is not None else base["stop"])
    limit = max_tokens if max_tokens is not None else base["max_tokens"]
    limit = defaults.max_tokens_limit if limit is None else min(limit, defaults.max_tokens_limit)
    return dict(pick, stop=stop, max_tokens=limit,
                logit_bias=_bias(req.logit_bias if req.logit_bias is not None
                                 else base.get("logit_bias")), logprobs=_logprobs(req))


def _stops(stop: str | list[str]) -> list[str]:
    stop = [stop] if isinstance(stop, str) else list(stop)
    if any(not s for s in stop):
        raise RequestError(400, "invalid stop: empty strings never match", "stop")
    if len(stop) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in stop):
        raise RequestError(400, f"invalid stop: at most {MAX_STOP_STRINGS} strings of at most "
                           f"{MAX_STOP_CHARS} characters each", "stop")
    return stop


def _bias(spec) -> object:
    """logit_bias as it came, its biases checked (the token ids are the engine's to check)."""
    if spec is None:
        return None
    values = spec.values() if isinstance(spec, dict) else [
        pair[1] if isinstance(pair, list) and len(pair) == 2 else "?" for pair in spec]
    for value in values:
        if value is not False and (isinstance(value, (str, bool)) or not isinstance(
                value, (int, float)) or not math.isfinite(value) or abs(value) > 100):
            raise ParameterError(f"invalid logit_bias: {value!r} (a number within [-100, 100] "
                                 "or false; lists take [token, bias] pairs)", param="logit_bias")
    return dict(spec) if isinstance(spec, dict) else [list(pair) for pair in spec]


def _logprobs(req: _Common) -> int | None:
    """None (not asked), or how many alternatives each token comes with."""
    if isinstance(req, ChatRequest):
        top = req.top_logprobs
        if top is not None and not req.logprobs:
            raise ParameterError("invalid top_logprobs: it needs logprobs: true",
                                 param="top_logprobs")
        asked = (top or 0) if req.logprobs else None
        name = "top_logprobs"
    else:
        given = req.logprobs if req.logprobs is not None else req.n_probs
        asked = None if given in (None, False) else int(given)
        name = "logprobs"
    if asked is not None and not 0 <= asked <= MAX_TOP_LOGPROBS:
        raise ParameterError(f"invalid {name}: {asked} (0 to {MAX_TOP_LOGPROBS})", param=name)
    return asked


def chat_options(req: ChatRequest, defaults: Defaults) -> dict:
    """tools, tool_choice, parallel_tool_calls, reasoning and template kwargs, checked (the
    server's --reasoning-format and --chat-template-kwargs where the request says none)."""
    if req.tools is not None:
        _check_tools_size(req.tools)
        choose_tools(parse_tools(req.tools), req.tool_choice)  # (ParameterError names them)
    elif req.tool_choice not in (None, "none", "auto"):
        raise ParameterError("invalid tool_choice: it needs tools", param="tool_choice")
    if req.reasoning_format not in (None, *REASONING_FORMATS):
        raise ParameterError(f"invalid reasoning_format: {req.reasoning_format!r} (one of "
                             f"{', '.join(REASONING_FORMATS)})", param="reasoning_format")
    kwargs = {**(defaults.generate.get("chat_template_kwargs") or {}),
              **(req.chat_template_kwargs or {})}
    if req.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", req.reasoning_effort)
    check_template_kwargs(kwargs)
    reasoning = defaults.generate.get("reasoning", True) if req.reasoning_format is None \
        else req.reasoning_format != "none"
    budget = req.reasoning_budget if req.reasoning_budget is not None else \
        defaults.generate.get("reasoning_budget", -1)
    return {"tools": req.tools, "tool_choice": req.tool_choice,
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "reasoning": reasoning, "chat_template_kwargs": kwargs,
            "reasoning_budget": budget}


def _check_tools_size(tools: list) -> None:
    if len(tools) > MAX_TOOLS:
        raise ParameterError(f"invalid tools: {len(tools)} tools (at most {MAX_TOOLS})",
                             param="tools")
    size = len(json.dumps(tools, ensure_ascii=False).encode("utf-8", "surrogateescape"))
    if size > TOOLS_MAX_BYTES:
        raise ParameterError(f"invalid tools: {size} bytes of JSON (at most {TOOLS_MAX_BYTES})",
                             param="tools")


def _check_request_bounds(changes: dict) -> None:
    """A request may not make a loose rule keep any draft (its draft may be other clients'
    text from the suffix index), nor draft past REQUEST_MAX_K tokens a round."""
    bounds = {"k": (lambda v: v == "auto" or v <= REQUEST_MAX_K, f"at most {REQUEST_MAX_K}"),
              "theta": (lambda v: v >= REQUEST_MIN_THETA, f"at least {REQUEST_MIN_THETA}"),
              "window": (lambda v: v >= REQUEST_MIN_WINDOW, f"at least {REQUEST_MIN_WINDOW}"),
              "entropy_top_k": (lambda v: v <= REQUEST_MAX_ENTROPY_TOP_K,
                                f"at most {REQUEST_MAX_ENTROPY_TOP_K}"),
              "gate": (lambda v: v <= REQUEST_MAX_GATE, f"at most {REQUEST_MAX_GATE}"),
              "max_exceptions": (lambda v: v <= REQUEST_MAX_EXCEPTIONS,
                                 f"at most {REQUEST_MAX_EXCEPTIONS}"),
              "budget": (lambda v: v <= REQUEST_MAX_BUDGET, f"at most {REQUEST_MAX_BUDGET}")}
    for name, value in changes.items():
        if name in bounds and not bounds[name][0](value):
            raise ParameterError(f"invalid {name}: {value!r} (a request may set "
                                 f"{bounds[name][1]})", param=name)


def speculation(req: _Common, defaults: Defaults):
    """The request's drafter and rule settings: None where it sets none of their fields (the
    engine then keeps the ones it was loaded with)."""
    dcfg = rcfg = None
    changes = {name: getattr(req, name) for name in DRAFTER_FIELDS
               if getattr(req, name) is not None}
    _check_request_bounds(changes)
    if changes:
        if "drafter" in changes and "k" not in changes:
            changes["k"] = None  # another drafter without k: its own default K
        dcfg = defaults.drafter.with_changes(**changes)
    changes = {name: getattr(req, name) for name in RULE_FIELDS
               if getattr(req, name) is not None}
    _check_request_bounds(changes)
    if changes:
        rcfg = defaults.rule.with_changes(**changes)
    return dcfg, rcfg


def make_job(req: _Common, defaults: Defaults, arrived: float) -> Job:
    """The engine's job for a validated request; RequestError for a bad setting."""
    refuse_unsupported(req)
    try:
        if isinstance(req, ChatRequest):
            limit = (req.max_completion_tokens if req.max_completion_tokens is not None
                     else req.max_tokens)
            kind, prompt = "chat", chat_messages(req, defaults.system)
            extra = chat_options(req, defaults)
        else:
            limit = req.max_tokens
            kind, prompt, extra = "completion", _completion_prompt(req), {}
        drafter, rule = speculation(req, defaults)
        request = Request(prompt, **sampling(req, defaults, limit), **constraint(req, defaults),
                          **extra, drafter=drafter, rule=rule)
        request.check()  # (what needs the model, the engine process checks)
    except (ParameterError, GrammarError) as exc:
        raise RequestError(400, str(exc), exc.param) from None
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    timeouts = [t for t in (req.timeout, defaults.request_timeout) if t is not None]
    return Job(kind, request, stream=bool(req.stream),
               include_usage=include_usage, rounds=bool(req.stream and req.lsd_rounds),
               timeout=min(timeouts, default=None), arrived=arrived)


def _completion_prompt(req: CompletionRequest) -> str:
    prompt = req.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise RequestError(400, "invalid prompt: one prompt per request (a list of one "
                               "string at most)", "prompt")
        prompt = prompt[0]
    return prompt
