"""The engine process of `lsd serve`: it owns the models and runs up to `--parallel` jobs at
once, side by side (sidebyside.py: one decode scores every job's block).

llama.cpp aborts the whole process on some failures (a lost RPC server, a failed GPU
allocation), so the HTTP process never loads a model itself: it starts this process, sends
it jobs over a pipe and reads back, per round, the text each round released. A reader thread
takes messages off the pipe while the main thread generates, so that a new job starts at the
next round and a cancel (the client went away, the server shuts down) is seen there.

Messages (messages.py) to the HTTP process: Ready | LoadFailed | Received (from here on a
crash is this job's) | Progress (a llama_decode returned: not stuck) | Started | Delta (one
round: event_payload's dict) | Done | Failed. From it: RunJob | Cancel | Stop.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..config import LEARNED_SAVE_EVERY, EngineSettings
from ..errors import (
    ContextOverflowError,
    GrammarError,
    LsdError,
    ModelOutputError,
    ParameterError,
)
from ..stats import Origin
from .messages import (
    Cancel,
    Delta,
    Done,
    Failed,
    LoadFailed,
    Progress,
    Ready,
    Received,
    RunJob,
    Started,
    Stop,
)

PROGRESS_EVERY = 1.0  # seconds between progress messages during one job


@dataclass(frozen=True)
class WorkerSettings:
    """How the engine process loads its models (plain values: they cross a process)."""

    target: Path
    draft: Path | None
    engine: EngineSettings
    state_cache: int  # conversations kept in RAM
    state_cache_bytes: int


def worker_main(conn, settings: WorkerSettings) -> None:
    """Entry point of the engine process."""
    # Ctrl-C in the terminal reaches the whole process group; the HTTP process decides when
    # this one stops (after in-flight answers), so neither signal may end it midway.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if not settings.engine.load.verbose:
        # an abort (a lost RPC server) would attach gdb for a backtrace: seconds of delay
        # and pages of log before the restart; --verbose keeps it for whoever debugs
        os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    from ..engine import Engine

    try:
        with warnings.catch_warnings():  # notices travel in the ready message
            warnings.simplefilter("ignore")
            engine = Engine.from_settings(settings.target, settings.draft, settings.engine)
    except LsdError as exc:
        conn.send(LoadFailed(str(exc)))
        return
    engine.keep_conversations(settings.state_cache, settings.state_cache_bytes)
    # auto's costs measured before the first request, so that none waits for it
    started = time.perf_counter()
    try:
        if engine.calibrate():
            engine.notices.append(f"auto measured what drafting costs on this machine "
                                  f"({time.perf_counter() - started:.1f} s)")
            engine.save_learned()  # (kept at once: a server killed later measures no more)
    except LsdError as exc:  # (the server serves; the first request measures, or fails)
        engine.reset()
        engine.notices.append(f"auto could not measure what drafting costs before the "
                              f"first request ({exc})")
    conn.send(Ready({"pid": os.getpid(), "n_ctx": engine.target.n_ctx,
                         "notices": list(engine.notices), "placement": engine.placement,
                         "draft": engine.draft_model.path.name if engine.draft_model else None,
                         "parallel": engine.parallel}))
    inbox: queue.Queue = queue.Queue()
    cancelled: set[str] = set()
    threading.Thread(target=_read_pipe, args=(conn, inbox, cancelled), daemon=True).start()
    for model in (engine.target, engine.draft_model):
        if model is not None:  # (every decode says the engine is not stuck)
            model.on_decoded = ProgressReporter(conn)
    serve_jobs(engine, conn, inbox, cancelled)
    engine.close()


def serve_jobs(engine, conn, inbox: queue.Queue, cancelled: set[str]) -> None:
    """Run jobs until "stop" (then finish the running ones): up to engine.parallel at once,
    each started as soon as it arrives and a sequence is free."""
    running: dict[str, Running] = {}
    waiting: list = []  # jobs read but not started (every sequence busy)
    token_text = token_texts(engine.target.vocab)
    stopping, saved = False, time.monotonic()
    while not (stopping and not running):
        try:  # wait for work only when there is none
            item = inbox.get(block=not running and not waiting)
            waiting.append(item)
            while True:
                waiting.append(inbox.get_nowait())
        except queue.Empty:
            pass
        while waiting and len(running) < engine.parallel:
            job = waiting.pop(0)
            if job is None:
                stopping = True
                continue
            conn.send(Received(job.id))  # from here on a crash is this job's
            run = start_job(engine, job, conn)
            if run is not None:
                running[job.id] = run
        if running:
            advance(engine, running, conn, cancelled, token_text)
        if not running and time.monotonic() - saved > LEARNED_SAVE_EVERY:
            engine.save_learned()  # (a killed process loses little)
            saved = time.monotonic()


class ProgressReporter:
    """Tells the HTTP process's watchdog, at most once a second, that a llama_decode
    returned (a long prefill is many of them; a round stuck inside C is none)."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.sent = time.monotonic()

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.sent >= PROGRESS_EVERY:
            self.sent = now
            self.conn.send(Progress())


def _read_pipe(conn, inbox: queue.Queue, cancelled: set[str]) -> None:
    """Jobs go to the inbox, cancels to the set the generating thread checks each round."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the HTTP process is gone: stop after the current job
            message = Stop()
        if isinstance(message, RunJob):
            inbox.put(message.job)
        elif isinstance(message, Cancel):
            cancelled.add(message.job_id)
        else:
            inbox.put(None)
            return


def _error_status(exc: LsdError) -> tuple[int, str | None]:
    """HTTP status and the request field at fault for an error the engine raised."""
    if isinstance(exc, ContextOverflowError):
        return 400, "messages"
    if isinstance(exc, GrammarError):
        return 400, exc.param or "response_format"
    if isinstance(exc, ParameterError):
        return 400, exc.param
    if isinstance(exc, ModelOutputError):
        return 500, None
    return 400, None


def _report(conn, job, exc: Exception) -> None:
    """An exception as the job's answer: lsd's errors with the status they call for, a bug
    as a 500 (and its traceback on stderr for the operator): it costs one answer, never
    the server."""
    if isinstance(exc, LsdError):
        status, param = _error_status(exc)
        conn.send(Failed(job.id, status, str(exc), param))
    else:  # its text may hold paths or data: the operator's log has it, the client not
        print(f"lsd serve: internal error in request {job.id}:", file=sys.stderr)
        traceback.print_exc()
        conn.send(Failed(job.id, 500, f"internal error in request {job.id} (logged on the "
                         "server)"))


@dataclass
class Running:
    """A job the engine generates now."""

    job: object  # protocol.Job
    gen: object  # generation.Generation
    rounds: object | None  # alone: the generation's iterator; side by side: None (outbox)
    deadline: float | None  # time.time() at which it ends with "length"


def start_job(engine, job, conn) -> Running | None:
    """Start one job's generation (None when it failed at once: its error is sent)."""
    try:
        gen = engine.generate(job.request)
    except Exception as exc:  # noqa: BLE001 - see _report
        _report(conn, job, exc)
        return None
    conn.send(Started(job.id, gen.stats.prompt_tokens))
    deadline = job.arrived + job.timeout if job.timeout else None
    running = Running(job, gen, iter(gen) if engine.parallel == 1 else None, deadline)
    if deadline is not None and time.time() >= deadline:  # its time went by in the queue
        _end_job(running, conn, timed_out=True)
        return None
    return running


def advance(engine, running: dict, conn, cancelled: set[str], token_text) -> None:
    """One round of every running job (side by side, one step of the engine; alone, the
    one job's next round), its text sent; jobs that ended leave `running`."""
    engine.step()  # (alone, a no-op: the iterator below runs the round)
    for job_id, run in list(running.items()):
        try:
            if run.rounds is None:
                events = run.gen.take_events()
            else:
                events = [event for event in (next(run.rounds, None),) if event is not None]
            for event in events:
                conn.send(Delta(job_id, event_payload(event, token_text, run.job.rounds)))
        except Exception as exc:  # noqa: BLE001 - see _report
            run.gen.close()
            del running[job_id]
            _report(conn, run.job, exc)
            continue
        timed_out = run.deadline is not None and time.time() >= run.deadline
        if run.gen.finished or job_id in cancelled or timed_out:
            del running[job_id]
            cancelled.discard(job_id)
            # (llama-server's t_max_predict_ms ends with "length" too)
            _end_job(run, conn, timed_out and not run.gen.finished)


def _end_job(run: Running, conn, timed_out: bool) -> None:
    run.gen.close()
    finish = "length" if timed_out else run.gen.finish_reason or "stop"
    conn.send(Done(run.job.id, finish, run.gen.stats.as_dict(), timed_out))


def token_texts(vocab):
    """token id -> (text, bytes) for logprobs (text as OpenAI shows it: invalid UTF-8 of a
    token that splits a character becomes U+FFFD; the bytes are exact)."""
    def text_of(token: int) -> tuple[str, list[int]]:
        data = vocab.token_bytes(token)
        return data.decode("utf-8", "replace"), list(data)
    return text_of


ORIGIN_CODES = {Origin.TARGET: "t", Origin.DRAFT_EXACT: "e", Origin.DRAFT_LOOSE: "l"}


def event_payload(event, token_text, rounds: bool = False) -> dict:
    """What one round sends to the HTTP process: the answer's text delta, reasoning, tool
    call pieces and logprobs (plain values: they cross the pipe); with `rounds`, the
    round's origin spans and counts too (lsd_rounds)."""
    payload = {"text": event.text}
    if rounds:
        payload["round"] = {
            "tokens": len(event.tokens), "drafted": event.n_drafted,
            "accepted": event.n_accepted, "loose": event.n_loose,
            "source": event.draft_source,
            "spans": [[text, ORIGIN_CODES[origin]] for text, origin in event.spans],
            "reasoning_spans": [[text, ORIGIN_CODES[origin]]
                                for text, origin in event.reasoning_spans]}
    if event.reasoning:
        payload["reasoning"] = event.reasoning
    if event.tool_calls:
        payload["tool_calls"] = [{"index": d.index, "id": d.id, "name": d.name,
                                  "arguments": d.arguments} for d in event.tool_calls]
    if event.logprobs is not None:
        payload["logprobs"] = [
            {"token": token_text(lp.token), "logprob": lp.logprob,
             "top": [(token_text(t), p) for t, p in lp.top]} for lp in event.logprobs]
    return payload
