"""The OpenAI request bodies lsd serves (pydantic models), the `Job` they become for the engine
process (server/jobs.py translates and validates, in the HTTP process, so that a bad request
is answered 400 before it waits in the queue).

Field names are OpenAI's; lsd's extras use llama-server's names where it has one (`top_k`,
`min_p`, `grammar`, `json_schema`) and lsd's own otherwise (`rule`, `drafter`, `k`, `theta`,
`window`, `entropy_top_k`, `entropy`, `gate`, `max_exceptions`, `budget`, `p_min`, `timeout`,
`lsd_rounds`).
Unknown fields are ignored, as OpenAI's API does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import DrafterConfig, RuleConfig
from ..limits import SERVE_MAX_TOKENS_LIMIT, SERVE_REQUEST_TIMEOUT
from ..request import Request


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


class _Request(_Body):
    # other fields are kept aside (model_extra): sampling fields lsd does not implement are
    # refused by name (server/jobs.py), everything else is ignored, as OpenAI's API does
    model_config = ConfigDict(extra="allow")


class TextPart(_Body):
    type: str
    text: str | None = None


class Message(_Body):
    role: str
    content: str | list[TextPart] | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant turn's calls
    tool_call_id: str | None = None  # a tool turn: the call it answers
    name: str | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class SchemaFormat(_Body):
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: SchemaFormat | None = None


class _Common(_Request):
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
    repeat_penalty: float | None = None  # llama-server's
    repeat_last_n: int | None = None  # llama-server's
    logit_bias: dict[str, float | bool] | list[list[Any]] | None = None
    logprobs: bool | int | None = None
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    response_format: ResponseFormat | None = None  # (llama-server takes it on both endpoints)
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
    # streamed chunks also carry each round's origin spans and counts (lsd's web page)
    lsd_rounds: bool | None = False


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    top_logprobs: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # llama-server's
    reasoning_effort: str | None = None  # to the template, where it reads it
    reasoning_format: str | None = None  # llama-server's: "none" keeps <think> in content
    reasoning_budget: int | None = None  # tokens inside <think> (-1: no limit)


class CompletionRequest(_Common):
    prompt: str | list[str]
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = None
    n_probs: int | None = None  # llama-server's logprobs


@dataclass(frozen=True)
class Defaults:
    """What `lsd serve` was started with: a field a request omits takes these values."""

    drafter: DrafterConfig
    rule: RuleConfig
    generate: dict  # Engine.generate's keyword arguments (max_tokens None: unlimited)
    system: str | None = None  # --system: prepended to chats that bring none
    max_tokens_limit: int = SERVE_MAX_TOKENS_LIMIT  # no answer is longer, whatever it asks
    request_timeout: float | None = SERVE_REQUEST_TIMEOUT  # seconds from arrival, at most


@dataclass
class Job:
    """One request for the engine process (picklable)."""

    kind: str  # "chat" or "completion"
    request: Request  # what Engine.generate takes (its drafter/rule None: the server's own)
    stream: bool = False
    include_usage: bool = False
    rounds: bool = False  # each chunk carries its round's origin spans and counts
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
