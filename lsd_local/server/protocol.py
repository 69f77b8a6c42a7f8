"""The OpenAI request bodies lsd serves (pydantic models) and their translation into a `Job`
for the engine process: every setting validated here, in the HTTP process, so that a bad
request is answered 400 before it waits in the queue.

Field names are OpenAI's; lsd's extras use llama-server's names where it has one (`top_k`,
`min_p`, `grammar`, `json_schema`) and lsd's own otherwise (`rule`, `drafter`, `k`, `theta`,
`window`, `entropy_top_k`, `entropy`, `gate`, `max_exceptions`, `budget`, `p_min`, `timeout`).
Unknown fields are ignored, as OpenAI's API does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import DrafterConfig, RuleConfig, sampler_settings
from ..errors import ParameterError
from ..grammars import shipped_grammars

UNLIMITED_TOKENS = 1 << 30  # "until EOS, a stop string or a full context"


class RequestError(Exception):
    """A request the server refuses: HTTP status, message, the field at fault."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.kind = kind

    def body(self) -> dict:
        """OpenAI's error object."""
        return {"error": {"message": str(self), "type": self.kind, "param": self.param,
                          "code": None}}


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Body):
    type: str
    text: str | None = None


class Message(_Body):
    role: str
    content: str | list[TextPart] | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class SchemaFormat(_Body):
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: SchemaFormat | None = None


class _Common(_Body):
    """Fields both endpoints take."""

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=0)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = 1
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: bool | int | None = None
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    # lsd's speculation settings
    rule: str | None = None
    drafter: str | None = None
    k: int | Literal["auto"] | None = None
    theta: float | None = None
    window: int | None = None
    entropy_top_k: int | None = None
    entropy: str | None = None
    gate: float | None = None
    max_exceptions: int | None = None
    budget: float | None = None
    p_min: float | None = None
    timeout: float | None = Field(default=None, gt=0)


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    response_format: ResponseFormat | None = None
    tools: list[Any] | None = None
    top_logprobs: int | None = None


class CompletionRequest(_Common):
    prompt: str | list[str]
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = None


@dataclass(frozen=True)
class Defaults:
    """What `lsd serve` was started with: a field a request omits takes these values."""

    drafter: DrafterConfig
    rule: RuleConfig
    generate: dict  # Engine.generate's keyword arguments (max_tokens None: unlimited)
    system: str | None = None  # --system: prepended to chats that bring none


@dataclass
class Job:
    """One request for the engine process (picklable)."""

    kind: str  # "chat" or "completion"
    prompt: str | list[dict]  # raw text, or chat messages
    generate: dict  # Engine.generate's keyword arguments
    drafter: DrafterConfig | None  # None: the engine's own (what lsd serve was started with)
    rule: RuleConfig | None
    stream: bool = False
    include_usage: bool = False
    timeout: float | None = None  # seconds from arrival
    arrived: float = 0.0  # time.time() when the server read the request
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])


def parse(model: type[_Body], body: Any) -> _Body:
    """Validate a decoded JSON body; RequestError naming the first bad field."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise RequestError(400, f"invalid {where or 'body'}: {first['msg']}",
                           param=where or None) from None


def _refuse_unsupported(req: _Common) -> None:
    """Features lsd does not implement are refused, not silently ignored."""
    if req.n not in (None, 1):
        raise RequestError(400, f"invalid n: {req.n} (lsd returns one choice: n must be 1)",
                           "n")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise RequestError(400, f"{name} is not supported (leave it 0)", name)
    if req.logprobs or getattr(req, "top_logprobs", None):
        raise RequestError(400, "logprobs are not supported", "logprobs")
    if getattr(req, "tools", None):
        raise RequestError(400, "tools (function calling) are not supported", "tools")
    if getattr(req, "echo", False):
        raise RequestError(400, "echo is not supported", "echo")
    if getattr(req, "suffix", None):
        raise RequestError(400, "suffix (fill-in-the-middle) is not supported", "suffix")
    if getattr(req, "best_of", None) not in (None, 1):
        raise RequestError(400, "best_of must be 1", "best_of")


def _messages(req: ChatRequest, system: str | None) -> list[dict]:
    """Chat messages as the template wants them: content as one string."""
    out = []
    for i, message in enumerate(req.messages):
        content = message.content
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if part.type != "text" or part.text is None:
                    raise RequestError(400, f"invalid messages.{i}.content.{j}: only text "
                                       f"parts are supported (got {part.type!r})",
                                       f"messages.{i}.content")
                parts.append(part.text)
            content = "".join(parts)
        role = "system" if message.role == "developer" else message.role  # OpenAI's o1 name
        out.append({"role": role, "content": content or ""})
    if system is not None and not any(m["role"] == "system" for m in out):
        out.insert(0, {"role": "system", "content": system})
    return out


def _constraint(req: _Common, defaults: Defaults) -> dict:
    """grammar / json_schema for Engine.generate. A request's grammar is GBNF text or a
    shipped grammar's name, never a path: a client must not make the server read files."""
    fmt = getattr(req, "response_format", None)
    given = [name for name, value in (("grammar", req.grammar), ("json_schema", req.json_schema),
             ("response_format", fmt if fmt and fmt.type != "text" else None)) if value]
    if len(given) > 1:
        raise RequestError(400, f"give one of {', '.join(given)}, not several", given[1])
    if req.grammar is not None:
        if req.grammar not in shipped_grammars() and "::=" not in req.grammar:
            raise RequestError(400, "invalid grammar: GBNF text (rules with ::=) or the name "
                               "of a shipped grammar", "grammar")
        return {"grammar": req.grammar, "json_schema": None}
    if req.json_schema is not None:
        return {"grammar": None, "json_schema": req.json_schema}
    if fmt is not None and fmt.type == "json_object":
        return {"grammar": "json_object", "json_schema": None}
    if fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise RequestError(400, "invalid response_format.json_schema: it needs a schema",
                               "response_format.json_schema")
        return {"grammar": None, "json_schema": fmt.json_schema.schema_}
    return {name: defaults.generate.get(name) for name in ("grammar", "json_schema")}


def _generate_kwargs(req: _Common, defaults: Defaults, max_tokens: int | None) -> dict:
    base = defaults.generate
    pick = {name: getattr(req, name) if getattr(req, name) is not None else base[name]
            for name in ("temperature", "top_k", "top_p", "min_p", "seed")}
    sampler_settings(pick["temperature"], pick["top_k"], pick["top_p"], pick["min_p"])
    stop = req.stop if req.stop is not None else base["stop"]
    stop = [stop] if isinstance(stop, str) else list(stop)
    if any(not s for s in stop):
        raise RequestError(400, "invalid stop: empty strings never match", "stop")
    limit = max_tokens if max_tokens is not None else base["max_tokens"]
    return dict(pick, stop=stop, max_tokens=UNLIMITED_TOKENS if limit is None else limit,
                **_constraint(req, defaults))


DRAFTER_FIELDS = ("drafter", "k", "p_min")
RULE_FIELDS = ("rule", "theta", "window", "entropy_top_k", "entropy", "gate", "max_exceptions",
               "budget")


def _configs(req: _Common, defaults: Defaults
             ) -> tuple[DrafterConfig | None, RuleConfig | None]:
    """The request's drafter and rule settings: None where it sets none of their fields (the
    engine then keeps the ones it was loaded with)."""
    dcfg = rcfg = None
    changes = {name: getattr(req, name) for name in DRAFTER_FIELDS
               if getattr(req, name) is not None}
    if changes:
        if "drafter" in changes and "k" not in changes:
            changes["k"] = None  # another drafter without k: its own default K
        dcfg = defaults.drafter.with_changes(**changes)
    changes = {name: getattr(req, name) for name in RULE_FIELDS
               if getattr(req, name) is not None}
    if changes:
        rcfg = defaults.rule.with_changes(**changes)
    return dcfg, rcfg


def make_job(req: _Common, defaults: Defaults, arrived: float) -> Job:
    """The engine's job for a validated request; RequestError for a bad setting."""
    _refuse_unsupported(req)
    try:
        if isinstance(req, ChatRequest):
            limit = (req.max_completion_tokens if req.max_completion_tokens is not None
                     else req.max_tokens)
            kind, prompt = "chat", _messages(req, defaults.system)
        else:
            limit = req.max_tokens
            kind, prompt = "completion", _completion_prompt(req.prompt)
        generate = _generate_kwargs(req, defaults, limit)
        drafter, rule = _configs(req, defaults)
    except ParameterError as exc:
        raise RequestError(400, str(exc), exc.param) from None
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return Job(kind, prompt, generate, drafter, rule, stream=bool(req.stream),
               include_usage=include_usage, timeout=req.timeout, arrived=arrived)


def _completion_prompt(prompt: str | list[str]) -> str:
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise RequestError(400, "invalid prompt: one prompt per request (a list of one "
                               "string at most)", "prompt")
        prompt = prompt[0]
    return prompt
