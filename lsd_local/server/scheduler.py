"""The HTTP process's side of the engine: it starts the engine process, queues requests in
arrival order (bounded), hands them over as the engine has room (its --parallel sequences
side by side), routes each round's message back to the request that waits for it, and
restarts the engine process when it dies.

Runs on the server's asyncio loop; one thread per engine process blocks on the pipe and
hands each message to the loop.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..limits import SERVE_ROUND_TIMEOUT
from .deaths import death_message, repeated_signal
from .messages import (
    Cancel,
    Done,
    Failed,
    LoadFailed,
    Progress,
    Ready,
    Received,
    RunJob,
    Stop,
)
from .protocol import Job
from .worker import WorkerSettings, worker_main

STOP_WAIT = 10.0  # seconds the engine process gets to exit after "stop", then it is killed
# a lost RPC host may take a minute to come back: failed loads in a row before the server
# gives up (then /health stays 503), and the pause before attempt n: BACKOFF * 2**(n-1) s,
# at most RESTART_PAUSE_MAX (1, 2, 4, ... 30: about 2 minutes in all)
RESTART_ATTEMPTS = 8
RESTART_BACKOFF = 1.0
RESTART_PAUSE_MAX = 30.0


class QueueFull(Exception):
    """More requests wait than --max-queue allows."""


class EngineUnavailable(Exception):
    """The engine process could not be (re)started."""


@dataclass
class Ticket:
    """One request's place in line and the messages the engine sends for it."""

    job: Job
    messages: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: bool = False
    finished: bool = False
    received: bool = False  # the engine took it: a crash from here on is this request's
    retried: bool = False  # sent again once after the engine died before taking it
    stalled: bool = False  # the watchdog ended it (no progress for --round-timeout)
    last_progress: float = 0.0  # loop time of the engine's last message for it
    done: asyncio.Event = field(default_factory=asyncio.Event)  # its last message is queued


class _Worker:
    """One engine process and the thread that reads its pipe."""

    def __init__(self, settings: WorkerSettings, loop: asyncio.AbstractEventLoop,
                 on_message: Callable, on_exit: Callable) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a threaded process
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=worker_main, args=(child_conn, settings),
                                       name="lsd-engine", daemon=True)
        self.process.start()
        child_conn.close()
        self.send_lock = threading.Lock()
        self.stalled = False  # the watchdog killed it
        threading.Thread(target=self._read, args=(loop, on_message, on_exit),
                         name="lsd-engine-pipe", daemon=True).start()

    def _read(self, loop, on_message, on_exit) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            loop.call_soon_threadsafe(on_message, self, message)
        self.process.join()
        loop.call_soon_threadsafe(on_exit, self, self.process.exitcode)

    def send(self, message) -> None:
        try:
            with self.send_lock:
                self.conn.send(message)
        except (OSError, EOFError):  # it died; the reader thread reports that
            pass

    def stop(self, wait: float = STOP_WAIT) -> None:
        """Ask it to exit after its job; kill it when it does not."""
        self.send(Stop())
        self.process.join(wait)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


class Scheduler:
    """Requests in arrival order through one engine process."""

    def __init__(self, settings: WorkerSettings, max_queue: int,
                 on_event: Callable[[str, dict], None] = lambda kind, data: None,
                 round_timeout: float = SERVE_ROUND_TIMEOUT) -> None:
        self.settings = settings
        self.max_queue = max_queue
        self.round_timeout = round_timeout  # the watchdog: seconds without progress
        self.on_event = on_event  # metrics and log lines: ("restart", {...}), ...
        self.state = "loading"  # loading | ready | restarting | failed | stopped
        self.failure: str | None = None  # why the state is "failed"
        self.info: dict = {}
        self.restarts = 0
        self._deaths: list[int | None] = []  # exit codes since a request last finished
        self._waiting: deque[Ticket] = deque()
        self._running: dict[str, Ticket] = {}  # sent to the engine, by job id
        self.capacity = 1  # jobs the engine runs side by side (its ready message says)
        self._watchers: set[asyncio.Task] = set()
        self._worker: _Worker | None = None
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._load_result: asyncio.Future | None = None
        self._dispatcher: asyncio.Task | None = None

    # --- life cycle ----------------------------------------------------------------------

    async def start(self) -> dict:
        """Start the engine process and wait until its models are loaded; EngineUnavailable
        with the loader's message when they cannot be."""
        await self._spawn()
        self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())
        return self.info

    async def _spawn(self) -> None:
        loop = asyncio.get_running_loop()
        self._load_result = loop.create_future()
        worker = self._worker = _Worker(self.settings, loop, self._on_message, self._on_exit)
        ok, detail = await self._load_result
        if not ok or self.state == "stopped":
            if self._worker is worker:
                self._worker = None
            await asyncio.to_thread(worker.stop, 1.0)
            raise EngineUnavailable(detail if not ok else "the server is stopping")
        self.info = detail
        self.capacity = max(1, int(detail.get("parallel", 1)))
        self.state = "ready"
        self._wake.set()  # (jobs may have waited for this process)
        self._ready.set()

    async def stop(self) -> None:
        """Stop dispatching and end the engine process (after its current round; at once
        while it loads)."""
        loading = self.state != "ready"
        self.state = "stopped"
        if self._dispatcher is not None:
            self._dispatcher.cancel()
        worker, self._worker = self._worker, None
        if worker is not None:
            await asyncio.to_thread(worker.stop, 1.0 if loading else STOP_WAIT)

    # --- requests ------------------------------------------------------------------------

    @property
    def queue_length(self) -> int:
        """Requests waiting for the engine (not counting those it runs)."""
        return len(self._waiting)

    @property
    def processing(self) -> int:
        """Requests the engine runs now."""
        return len(self._running)

    def submit(self, job: Job) -> Ticket:
        """Queue a job; QueueFull when --max-queue requests already wait."""
        if self.state in ("failed", "stopped"):
            raise EngineUnavailable(self.failure or f"the engine is {self.state}")
        idle = len(self._running) < self.capacity and not self._waiting and \
            self.state == "ready"
        if not idle and len(self._waiting) >= self.max_queue:
            raise QueueFull(f"{len(self._waiting)} requests are waiting (--max-queue)")
        ticket = Ticket(job)
        self._waiting.append(ticket)
        self._wake.set()
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """The client is gone (or the server is ending it): drop it from the line, or stop
        its generation at the next round."""
        if ticket.finished or ticket.cancelled:
            return
        ticket.cancelled = True
        if self._running.get(ticket.job.id) is ticket:
            if self._worker is not None:
                self._worker.send(Cancel(ticket.job.id))
        elif ticket in self._waiting:
            self._waiting.remove(ticket)
            self._finish(ticket, Failed(ticket.job.id, 499, "cancelled", None))

    def cancel_all(self, message: str) -> None:
        """End every request now with an error (the shutdown grace period is over)."""
        for ticket in list(self._waiting):
            self._waiting.remove(ticket)
            self._finish(ticket, Failed(ticket.job.id, 503, message, None))
        for current in list(self._running.values()):
            self.cancel(current)
            self._finish(current, Failed(current.job.id, 503, message, None))

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._ready.wait()
            if not self._waiting or len(self._running) >= self.capacity:
                self._wake.clear()
                await self._wake.wait()
                continue
            ticket = self._waiting.popleft()
            self._running[ticket.job.id] = ticket
            try:
                self._worker.send(RunJob(ticket.job))
            except Exception as exc:  # noqa: BLE001 - one bad job must not stop the line
                self._finish(ticket, Failed(ticket.job.id, 500,
                                      f"the job could not be sent to the engine: {exc}", None))
                continue
            watcher = loop.create_task(self._watch(ticket))  # till its end or its death
            self._watchers.add(watcher)
            watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, ticket: Ticket) -> None:
        """Wait for the ticket's end; kill the engine process when a job it took makes no
        progress (no llama_decode returns) for round_timeout seconds: stuck inside C."""
        loop = asyncio.get_running_loop()
        ticket.last_progress = loop.time()
        # (a ticket sent again gets a new event: this one frees the line; asyncio.wait, not
        # wait_for, which in Python 3.11 can swallow the cancel of a stopping server)
        waiter = asyncio.ensure_future(ticket.done.wait())
        try:
            while not waiter.done():
                left = ticket.last_progress + self.round_timeout - loop.time()
                if left <= 0:
                    if ticket.received and self._worker is not None and not ticket.stalled \
                            and not self._worker.stalled:
                        ticket.stalled = True
                        self._ready.clear()  # no next job for the process being killed
                        self._worker.stalled = True
                        self._worker.process.kill()  # _on_exit fails it and restarts
                    ticket.last_progress = loop.time()
                    continue
                await asyncio.wait({waiter}, timeout=left)
        finally:
            waiter.cancel()

    def _finish(self, ticket: Ticket, message: Done | Failed) -> None:
        if ticket.finished:
            return
        ticket.finished = True
        if self._running.get(ticket.job.id) is ticket:
            del self._running[ticket.job.id]
            self._wake.set()  # (room for the next one)
        ticket.messages.put_nowait(message)
        ticket.done.set()

    # --- messages from the engine process (on the loop) -----------------------------------

    def _on_message(self, worker: _Worker, message) -> None:
        if isinstance(message, (Ready, LoadFailed)):
            if self._load_result is not None and not self._load_result.done():
                self._load_result.set_result(
                    (True, message.info) if isinstance(message, Ready)
                    else (False, message.message))
            return
        if worker is not self._worker:
            return  # a late message of a process already gone
        now = asyncio.get_running_loop().time()
        if isinstance(message, Progress):  # a decode returned: every running job moves
            for running in self._running.values():
                running.last_progress = now
            return
        ticket = self._running.get(message.job_id)
        if ticket is None:
            return  # a late message of a request already ended
        ticket.last_progress = now
        ticket.received = True  # (any message about a job says the engine took it)
        if isinstance(message, Received):
            return
        if isinstance(message, (Done, Failed)):
            self._deaths.clear()  # the engine finished a request: earlier deaths were chance
            self._finish(ticket, message)
        else:
            ticket.messages.put_nowait(message)

    def _on_exit(self, worker: _Worker, exitcode: int | None) -> None:
        if self._load_result is not None and not self._load_result.done():
            # died while loading: _spawn reports it (at start, or to _restart's next try)
            self._load_result.set_result((False, f"the engine process exited with code "
                                                 f"{exitcode} while loading the models"))
            return
        if worker is not self._worker or self.state == "stopped":
            return
        self._worker = None
        self.state = "restarting"
        self._ready.clear()
        running = list(self._running.values())
        for current in running:
            if current.received:
                # this request's death: it fails, is never sent again, and does not count
                # towards giving up (a page must not be able to stop the server)
                self._finish(current, Failed(current.job.id, 500, death_message(
                    exitcode, current.stalled or worker.stalled, self.round_timeout), None))
        if any(current.received for current in running) or worker.stalled:
            reason = None  # a request's death, or the watchdog's kill: no one's own
        else:
            self._deaths.append(exitcode)
            reason = repeated_signal(self._deaths)
        for current in reversed([t for t in running if not t.received]):
            if current.retried or reason is not None:
                self._finish(current, Failed(current.job.id, 503, reason or "the engine "
                                       "process died twice before it could take this request",
                                       None))
            else:  # it died before taking this job: send it again, once
                current.retried = True
                del self._running[current.job.id]
                self._waiting.appendleft(current)
                current.done.set()  # ends its watcher; the dispatcher waits for the restart
                current.done = asyncio.Event()
                self._wake.set()
        if reason is not None:
            self.on_event("failed", {"message": reason})
            self._fail(reason)
            return
        self.on_event("restart", {"exitcode": exitcode})
        asyncio.get_running_loop().create_task(self._restart())

    async def _restart(self) -> None:
        for attempt in range(1, RESTART_ATTEMPTS + 1):
            try:
                await self._spawn()
            except EngineUnavailable as exc:
                if self.state == "stopped":
                    return
                self.on_event("restart_failed", {"attempt": attempt, "message": str(exc)})
                await asyncio.sleep(min(RESTART_BACKOFF * 2 ** (attempt - 1),
                                        RESTART_PAUSE_MAX))
                continue
            self.restarts += 1
            self.on_event("restarted", {"restarts": self.restarts})
            return
        if self.state == "stopped":
            return
        self._fail("the engine process could not be restarted")

    def _fail(self, reason: str) -> None:
        """Give up on the engine: /health says failed with `reason`, and every waiting and
        later request gets 503 naming it."""
        self.state = "failed"
        self.failure = reason
        for ticket in list(self._waiting):
            self._waiting.remove(ticket)
            self._finish(ticket, Failed(ticket.job.id, 503, reason, None))
