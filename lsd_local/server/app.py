"""The HTTP side of `lsd serve`: an ASGI app (Starlette) with OpenAI's endpoints, /health,
/metrics and the chat page (page.py), in front of the Scheduler that owns the engine
process."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import pickle
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..config import SERVE_MAX_BODY, SERVE_RETRY_AFTER
from ..limits import SERVE_ROUND_TIMEOUT
from .guard import Guard, GuardSettings, host_names
from .jobs import make_job
from .messages import Delta, Failed
from .metrics import Metrics
from .page import is_public, page_routes
from .protocol import ChatRequest, CompletionRequest, Defaults, RequestError, parse
from .responses import SSE_DONE, Answer, Shaper, lsd_info, sse
from .scheduler import EngineUnavailable, QueueFull, Scheduler, Ticket

LOG = logging.getLogger("lsd.serve")


@dataclass(frozen=True)
class ServerSettings:
    """How `lsd serve` answers (the engine's own settings are in WorkerSettings)."""

    model_name: str  # what /v1/models and every response call the loaded model
    defaults: Defaults
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()  # host names besides loopback's and the bound one
    host: str = "127.0.0.1"  # the address or name the server listens on
    round_timeout: float = SERVE_ROUND_TIMEOUT  # the engine's watchdog (Scheduler)
    max_body: int = SERVE_MAX_BODY
    retry_after: int = SERVE_RETRY_AFTER


class ServerState:
    """What the endpoints share: settings, scheduler, metrics, shutting down or not."""

    def __init__(self, settings: ServerSettings, scheduler: Scheduler) -> None:
        self.settings = settings
        self.scheduler = scheduler
        self.metrics = Metrics()
        self.shutting_down = False
        self.started = time.time()


def error_response(exc: RequestError, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def read_json(request: Request, max_body: int):
    """The decoded body; 413 past `max_body` bytes (checked while reading: a chunked body
    has no length to trust), 400 for anything that is not JSON."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body:
        raise RequestError(413, f"the request body has {declared} bytes; the limit is "
                           f"{max_body} (--max-body)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            raise RequestError(413, f"the request body exceeds {max_body} bytes (--max-body)")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise RequestError(400, "the request body is nested too deeply") from None


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def next_message(state: ServerState, ticket: Ticket, watch: asyncio.Task):
    """The engine's next message for this request; None (and the request cancelled) when
    the client disconnected first."""
    getter = asyncio.ensure_future(ticket.messages.get())
    done, _ = await asyncio.wait({getter, watch}, return_when=asyncio.FIRST_COMPLETED)
    if getter in done:
        return getter.result()
    getter.cancel()
    state.scheduler.cancel(ticket)
    return None


def _submit(state: ServerState, job) -> Ticket:
    try:  # what crosses to the engine process must pickle (a schema nested 1000 deep does not)
        pickle.dumps(job)
    except RecursionError:
        raise RequestError(400, "the request is nested too deeply (json_schema?)") from None
    if state.shutting_down:
        raise RequestError(503, "the server is shutting down", kind="server_error")
    try:
        return state.scheduler.submit(job)
    except QueueFull as exc:
        raise RequestError(503, f"the server is busy: {exc}; retry later",
                           kind="server_error") from None
    except EngineUnavailable as exc:
        raise RequestError(503, str(exc), kind="server_error") from None


def _engine_error(message: Failed) -> RequestError:
    return RequestError(message.status, message.message, message.param,
                        "invalid_request_error" if message.status < 500 else "server_error")


async def completions(request: Request, body_model, endpoint: str) -> Response:
    state: ServerState = request.app.state.lsd
    try:
        body = await read_json(request, state.settings.max_body)
        job = make_job(parse(body_model, body), state.settings.defaults, time.time())
        ticket = _submit(state, job)
    except RequestError as exc:
        state.metrics.requests.labels(endpoint, str(exc.status)).inc()
        headers = {"Retry-After": str(state.settings.retry_after)} if exc.status == 503 else None
        return error_response(exc, headers)
    state.metrics.queue.set(state.scheduler.queue_length)
    watch = asyncio.ensure_future(_disconnected(request))
    first = await next_message(state, ticket, watch)
    if first is not None and watch.done():  # it left just as its answer started
        state.scheduler.cancel(ticket)
        first = None
    if first is None or isinstance(first, Failed):
        watch.cancel()
        status = 499 if first is None else first.status
        state.metrics.requests.labels(endpoint, str(status)).inc()
        return Response(status_code=499) if first is None else error_response(
            _engine_error(first))
    shaper = Shaper(job.kind, job.id, state.settings.model_name)
    if job.stream:
        watch.cancel()  # Starlette notices a streaming client's disconnect itself
        return EngineStream(state.scheduler, ticket,
                            stream(state, ticket, shaper, first.prompt_tokens, endpoint),
                            media_type="text/event-stream",
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    try:
        return await whole(state, ticket, shaper, first.prompt_tokens, watch, endpoint)
    finally:  # however it ends (the handler cancelled too), the engine stops on it
        watch.cancel()
        state.scheduler.cancel(ticket)


class EngineStream(StreamingResponse):
    """An SSE response that cancels its request in the engine however the response ends,
    even when the client left before the body iterator ever started."""

    def __init__(self, scheduler: Scheduler, ticket: Ticket, content, **kwargs) -> None:
        super().__init__(content, **kwargs)
        self.scheduler = scheduler
        self.ticket = ticket

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.scheduler.cancel(self.ticket)


async def whole(state: ServerState, ticket: Ticket, shaper: Shaper, prompt_tokens: int,
                watch: asyncio.Task, endpoint: str) -> Response:
    """Collect the answer and return it in one JSON object."""
    answer = Answer()
    ttft = None
    while True:
        message = await next_message(state, ticket, watch)
        if message is None:
            state.metrics.requests.labels(endpoint, "499").inc()
            return Response(status_code=499)
        if isinstance(message, Delta):
            answer.add(message.payload)
            if ttft is None and _visible(message.payload):
                ttft = _observe_ttft(state, ticket)
            continue
        if isinstance(message, Failed):
            state.metrics.requests.labels(endpoint, str(message.status)).inc()
            return error_response(_engine_error(message))
        state.metrics.record_stats(message.stats)
        state.metrics.requests.labels(endpoint, "200").inc()
        return JSONResponse(shaper.whole(answer, message.finish_reason, prompt_tokens,
                                         message.stats,
                                         lsd_info(message.stats, message.timed_out, ttft)))


def _visible(payload: dict) -> bool:
    """Whether a round gave the client anything of the answer (text, reasoning, a call,
    logprobs): what the time to the first token waits for."""
    return bool(payload["text"] or payload.get("reasoning") or payload.get("tool_calls")
                or payload.get("logprobs"))


def _observe_ttft(state: ServerState, ticket: Ticket) -> float:
    ttft = time.time() - ticket.job.arrived
    state.metrics.ttft.observe(ttft)
    return ttft


async def stream(state: ServerState, ticket: Ticket, shaper: Shaper, prompt_tokens: int,
                 endpoint: str) -> AsyncIterator[str]:
    """The answer as server-sent events. However the stream ends (the client left, the
    server shuts down), the request is cancelled in the engine at its next round."""
    status = "200"
    try:
        if shaper.chat:
            yield shaper.chunk(role=True)
        ttft, offset = None, 0
        while True:
            message = await ticket.messages.get()
            if isinstance(message, Delta):
                payload = message.payload
                if _visible(payload):
                    ttft = ttft or _observe_ttft(state, ticket)
                if _visible(payload) or payload.get("round"):  # lsd_rounds: every one
                    yield shaper.chunk(payload, offset=offset)
                    offset += len(payload["text"])
                continue
            if isinstance(message, Failed):
                status = str(message.status)
                yield sse(_engine_error(message).body())
                return
            state.metrics.record_stats(message.stats)
            yield shaper.chunk(finish=message.finish_reason,
                               lsd=lsd_info(message.stats, message.timed_out, ttft))
            if ticket.job.include_usage:
                yield shaper.usage_chunk(prompt_tokens, message.stats)
            yield SSE_DONE
            return
    except BaseException:
        status = "499"
        raise
    finally:
        state.scheduler.cancel(ticket)
        state.metrics.requests.labels(endpoint, status).inc()


async def chat_completions(request: Request) -> Response:
    return await completions(request, ChatRequest, "chat")


async def text_completions(request: Request) -> Response:
    return await completions(request, CompletionRequest, "completions")


async def list_models(request: Request) -> Response:
    state: ServerState = request.app.state.lsd
    info = state.scheduler.info
    model = {"id": state.settings.model_name, "object": "model",
             "created": int(state.started), "owned_by": "lsd",
             "meta": {"n_ctx": info.get("n_ctx"), "draft": info.get("draft")}}
    return JSONResponse({"object": "list", "data": [model]})


async def health(request: Request) -> Response:
    """200 while the engine can take requests (busy is not unhealthy), else 503."""
    state: ServerState = request.app.state.lsd
    scheduler = state.scheduler
    status = "shutting_down" if state.shutting_down else scheduler.state
    body = {"status": "ok" if status == "ready" else status,
            "queue": scheduler.queue_length, "processing": scheduler.processing}
    if status == "failed" and scheduler.failure:
        body["reason"] = scheduler.failure
    return JSONResponse(body, status_code=200 if status == "ready" else 503)


async def metrics(request: Request) -> Response:
    state: ServerState = request.app.state.lsd
    state.metrics.queue.set(state.scheduler.queue_length)
    state.metrics.busy.set(state.scheduler.processing)
    return Response(state.metrics.render(),
                    media_type="text/plain; version=0.0.4; charset=utf-8")


async def http_error(request: Request, exc: HTTPException) -> Response:
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return error_response(RequestError(exc.status_code, f"{request.method} {request.url.path}: "
                                       f"{exc.detail}", kind=kind))


async def internal_error(request: Request, exc: Exception) -> Response:
    """A fault of lsd's: its traceback goes to the operator's log, the client is told no more
    than that (an exception's text may hold paths or other clients' data)."""
    incident = uuid.uuid4().hex[:12]
    LOG.error("internal error %s on %s %s", incident, request.method, request.url.path,
              exc_info=exc)
    return error_response(RequestError(500, f"internal error {incident} (logged on the server)",
                                       kind="server_error"))


class BearerAuth:
    """With an API key, every endpoint but /health and the page's files needs
    `Authorization: Bearer KEY` (compared in constant time)."""

    def __init__(self, app, api_key: str) -> None:
        self.app = app
        self.expected = api_key.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] == "/health" or is_public(scope["path"]):
            return await self.app(scope, receive, send)
        scheme, _, given = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.expected):
            return await self.app(scope, receive, send)
        response = error_response(
            RequestError(401, "a valid API key is required (Authorization: Bearer KEY)",
                         kind="authentication_error"), {"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


def create_app(settings: ServerSettings, scheduler: Scheduler) -> Starlette:
    """The ASGI app; `app.state.lsd` holds the ServerState."""
    guard = GuardSettings(host_names(settings.host, settings.allowed_hosts),
                          settings.cors_origins)
    middleware = [Middleware(Guard, settings=guard)]  # outermost: before anything answers
    if settings.cors_origins:  # before the key: a preflight carries none
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                                     allow_methods=["GET", "POST", "OPTIONS"],
                                     allow_headers=["*"]))
    if settings.api_key:
        middleware.append(Middleware(BearerAuth, api_key=settings.api_key))
    routes = [Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/v1/completions", text_completions, methods=["POST"]),
              Route("/v1/models", list_models, methods=["GET"]),
              Route("/health", health, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"]), *page_routes()]
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={HTTPException: http_error, Exception: internal_error})
    app.state.lsd = ServerState(settings, scheduler)
    return app
