"""Run `lsd serve`: listen, start the engine process, serve until SIGTERM / Ctrl-C, then
let in-flight answers finish (up to the grace period) and exit cleanly."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable
from functools import partial

import uvicorn

from ..errors import LsdError
from .app import ServerSettings, ServerState, create_app
from .scheduler import EngineUnavailable, Scheduler
from .worker import WorkerSettings


class ServeError(LsdError):
    """The server could not start (port taken, models that do not load)."""


class _Server(uvicorn.Server):
    """uvicorn, told first when a signal asks it to stop; and it exits normally after a
    clean shutdown instead of re-raising the signal (an exit code 0 for SIGTERM)."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig, frame) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)
        if hasattr(self, "_captured_signals"):  # uvicorn >= 0.29 re-raises it after serving
            self._captured_signals.clear()


def listen(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free port); ServeError when it cannot be had."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def begin_shutdown(state: ServerState, grace: float, notify: Callable[[str], None]) -> None:
    """Refuse new requests; in-flight ones get `grace` seconds, then end with an error."""
    if state.shutting_down:
        return
    state.shutting_down = True
    scheduler = state.scheduler
    pending = scheduler.queue_length + scheduler.processing
    if pending:
        notify(f"shutting down: finishing {pending} request(s) (at most {grace:.0f} s)")
    asyncio.get_running_loop().call_later(grace, scheduler.cancel_all,
                                          "the server is shutting down")


def report_event(notify: Callable[[str], None], metrics, kind: str, data: dict) -> None:
    """The scheduler's news about the engine process: a line for the operator, a metric."""
    if kind == "restart":
        metrics.restarts.inc()
        notify(f"the engine process died (exit code {data['exitcode']}); restarting it")
    elif kind == "restart_failed":
        notify(f"restart {data['attempt']} failed: {data['message']}")
    elif kind == "restarted":
        notify("the engine process is back")
    elif kind == "failed":
        notify(f"giving up: {data['message']}")


async def serve_async(worker: WorkerSettings, settings: ServerSettings, host: str, port: int,
                      max_queue: int, grace: float, notify: Callable[[str], None],
                      on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until a signal; ServeError when the port or the models fail."""
    sock = listen(host, port)
    scheduler = Scheduler(worker, max_queue, round_timeout=settings.round_timeout)
    app = create_app(settings, scheduler)
    state: ServerState = app.state.lsd
    scheduler.on_event = partial(report_event, notify, state.metrics)
    config = uvicorn.Config(app, lifespan="off", log_level="warning",
                            timeout_graceful_shutdown=int(grace) + 5)
    server = _Server(config, lambda: begin_shutdown(state, grace, notify))
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    bound = sock.getsockname()
    notify(f"lsd serve: loading {settings.model_name}; listening on "
           f"http://{_url_host(host)}:{bound[1]} (/health answers 503 until ready)")
    starting = asyncio.ensure_future(scheduler.start())
    await asyncio.wait({starting, serving}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # SIGTERM / Ctrl-C while the models load: stop loading
        starting.cancel()
        await scheduler.stop()
        sock.close()
        return
    try:
        info = starting.result()
    except EngineUnavailable as exc:
        server.should_exit = True
        await serving
        raise ServeError(str(exc)) from None
    for line in info.get("notices", []):
        notify(line)
    notify("placement: " + "; ".join(f"{role} {where}"
                                     for role, where in info["placement"].items()))
    draft = f", draft {info['draft']}" if info.get("draft") else ""
    notify(f"lsd serve: {settings.model_name}{draft} ready at "
           f"http://{_url_host(host)}:{bound[1]}/v1 (context {info['n_ctx']} tokens)")
    page = f"http://{_page_host(host)}:{bound[1]}/"
    notify(f"chat page: {page}")
    if on_ready is not None:  # (a browser may take its time, or a terminal: not this loop)
        threading.Thread(target=on_ready, args=(page,), daemon=True).start()
    try:
        await serving
    finally:
        await scheduler.stop()
        sock.close()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _page_host(host: str) -> str:
    """Where a browser on this machine reaches the server (not a wildcard address)."""
    return "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else \
        _url_host(host)


def serve(worker: WorkerSettings, settings: ServerSettings, host: str, port: int,
          max_queue: int, grace: float, notify: Callable[[str], None],
          on_ready: Callable[[str], None] | None = None) -> None:
    """Blocking `serve_async`; `on_ready` gets the chat page's URL once the model is loaded
    (lsd serve --open: the browser)."""
    # asyncio's "socket.send() raised exception." only says that a client left mid-stream,
    # which the server handles (the generation stops at the next round)
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    asyncio.run(serve_async(worker, settings, host, port, max_queue, grace, notify, on_ready))
