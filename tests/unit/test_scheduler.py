"""The Scheduler's bookkeeping around engine processes that die, against fake engine
processes (no llama.cpp, no subprocess): a death while loading is one failed attempt (never
a storm of restarts), a job the engine never took is sent again, bad jobs fail alone."""

from __future__ import annotations

import asyncio

import pytest

from lsd_local.request import Request
from lsd_local.server import deaths
from lsd_local.server import scheduler as sched
from lsd_local.server.messages import (
    Done,
    Failed,
    LoadFailed,
    Progress,
    Ready,
    Received,
    RunJob,
    Started,
)
from lsd_local.server.protocol import Job


class FakeWorker:
    """Stands in for _Worker: follows a script of what each spawned engine process does."""

    script: list[str] = []  # per spawn: "ready", "dies" (while loading), "fails" (load error)
    parallel = 1  # what the engine says it runs side by side
    spawned: list[FakeWorker] = []

    def __init__(self, settings, loop, on_message, on_exit) -> None:
        self.on_message, self.on_exit, self.loop = on_message, on_exit, loop
        self.sent: list[tuple] = []
        self.stopped = False
        self.killed = False
        self.stalled = False
        plan = FakeWorker.script.pop(0) if FakeWorker.script else "ready"
        FakeWorker.spawned.append(self)
        if plan == "ready":
            loop.call_soon(on_message, self, Ready({"n_ctx": 64, "parallel": FakeWorker.parallel}))
        elif plan == "fails":
            loop.call_soon(on_message, self, LoadFailed("cannot load x.gguf"))
        else:
            loop.call_soon(on_exit, self, -6)

    def send(self, message: tuple) -> None:
        self.sent.append(message)

    def stop(self, wait: float = 0) -> None:
        self.stopped = True

    def die(self) -> None:
        self.loop.call_soon(self.on_exit, self, -9)

    @property
    def process(self):
        return self  # the watchdog kills the process

    def kill(self) -> None:
        self.killed = True
        self.die()


@pytest.fixture
def fake_workers(monkeypatch):
    FakeWorker.script, FakeWorker.spawned, FakeWorker.parallel = [], [], 1
    monkeypatch.setattr(sched, "_Worker", FakeWorker)
    monkeypatch.setattr(sched, "RESTART_BACKOFF", 0.0)
    return FakeWorker


def job() -> Job:
    return Job("completion", Request("a"))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def until(condition, hang: float = 60.0) -> None:
    """Wait for `condition()` (the scheduler's threads and tasks get the time they need);
    the limit only bounds a hang."""
    async def poll():
        while not condition():
            await asyncio.sleep(0.005)
    await asyncio.wait_for(poll(), hang)


def test_a_death_while_loading_at_start_is_a_clear_error(fake_workers):
    async def main():
        fake_workers.script = ["dies"]
        scheduler = sched.Scheduler(None, max_queue=4)
        with pytest.raises(sched.EngineUnavailable, match="exited with code -6 while loading"):
            await scheduler.start()
        await settle()
        assert len(fake_workers.spawned) == 1  # no restart of a process that never started
    asyncio.run(main())


def test_deaths_while_restarting_count_as_attempts_then_fail(fake_workers):
    async def main():
        events = []
        scheduler = sched.Scheduler(None, max_queue=4, on_event=lambda k, d: events.append(k))
        await scheduler.start()
        fake_workers.script = ["dies", "fails"] * (sched.RESTART_ATTEMPTS // 2) + ["dies"]
        waiting = [scheduler.submit(job()) for _ in range(2)]
        await settle()
        scheduler._on_message(fake_workers.spawned[0], Started(waiting[0].job.id, 3))
        fake_workers.spawned[0].die()
        await until(lambda: scheduler.state == "failed")
        assert len(fake_workers.spawned) == 1 + sched.RESTART_ATTEMPTS
        assert events.count("restart") == 1
        assert events.count("restart_failed") == sched.RESTART_ATTEMPTS
        assert isinstance(await waiting[0].messages.get(), Started)
        first = await waiting[0].messages.get()
        # it was running when the engine died
        assert isinstance(first, Failed) and first.status == 500
        second = await waiting[1].messages.get()
        assert isinstance(second, Failed) and second.status == 503
    asyncio.run(main())


def test_a_job_the_dead_engine_never_took_is_sent_again(fake_workers):
    async def main():
        scheduler = sched.Scheduler(None, max_queue=4)
        await scheduler.start()
        ticket = scheduler.submit(job())
        await settle()
        assert fake_workers.spawned[0].sent == [RunJob(ticket.job)]
        fake_workers.spawned[0].die()  # before any message about this job
        await settle()
        assert scheduler.state == "ready" and fake_workers.spawned[1].sent == [
            RunJob(ticket.job)]
        scheduler._on_message(fake_workers.spawned[1], Started(ticket.job.id, 3))
        scheduler._on_message(fake_workers.spawned[1], Done(ticket.job.id, "stop", {}, False))
        assert isinstance(await ticket.messages.get(), Started)
        assert isinstance(await ticket.messages.get(), Done)
    asyncio.run(main())


def test_a_job_that_cannot_be_sent_fails_alone(fake_workers):
    async def main():
        scheduler = sched.Scheduler(None, max_queue=4)
        await scheduler.start()
        worker = fake_workers.spawned[0]

        def refuse(message):
            if message.job is bad.job:
                raise RecursionError("maximum recursion depth exceeded while pickling")
            worker.sent.append(message)
        worker.send = refuse
        bad, good = scheduler.submit(job()), scheduler.submit(job())
        await settle()
        assert (await bad.messages.get()).status == 500
        assert worker.sent == [RunJob(good.job)]
    asyncio.run(main())


async def run_and_die(scheduler, worker, code: int, finish: bool = False) -> sched.Ticket:
    """One request that the engine takes (and finishes, with `finish`), then its death."""
    ticket = scheduler.submit(job())
    await settle()
    scheduler._on_message(worker, Started(ticket.job.id, 3))
    if finish:
        scheduler._on_message(worker, Done(ticket.job.id, "stop", {}, False))
    worker.loop.call_soon(worker.on_exit, worker, code)
    return ticket


async def restarted(scheduler, fake_workers, spawned: int) -> None:
    """Until the engine is back (`spawned` processes so far) or the scheduler gave up."""
    await until(lambda: scheduler.state == "failed" or (
        scheduler.state == "ready" and len(fake_workers.spawned) >= spawned))


async def die_idle(worker, code: int) -> None:
    """The engine dies with no request in flight."""
    worker.loop.call_soon(worker.on_exit, worker, code)
    await settle()


def test_three_deaths_by_one_signal_in_a_row_stop_the_restarts(fake_workers):
    """Deaths that no request caused (the engine dies while idle) are the engine's own: three
    by one signal and it is not restarted again."""
    async def main():
        events = []
        scheduler = sched.Scheduler(None, max_queue=4, on_event=lambda k, d: events.append(k))
        await scheduler.start()
        for n in range(deaths.SAME_SIGNAL_DEATHS):
            await settle()
            await die_idle(fake_workers.spawned[-1], -4)
            await restarted(scheduler, fake_workers, n + 2)
        assert scheduler.state == "failed" and "SIGILL" in scheduler.failure
        assert "--no-repack" in scheduler.failure
        assert len(fake_workers.spawned) == deaths.SAME_SIGNAL_DEATHS  # no fourth process
        assert events.count("restart") == deaths.SAME_SIGNAL_DEATHS - 1
        assert events.count("failed") == 1
        with pytest.raises(sched.EngineUnavailable, match="SIGILL"):
            scheduler.submit(job())
    asyncio.run(main())


def test_requests_that_kill_the_engine_fail_alone_and_never_stop_the_server(fake_workers):
    """A hostile page must not be able to stop the server: a death during a request fails
    that request (naming the signal), is never retried and never counts towards giving up;
    the next request is served."""
    async def main():
        scheduler = sched.Scheduler(None, max_queue=4)
        await scheduler.start()
        for n in range(2 * deaths.SAME_SIGNAL_DEATHS):
            await settle()
            ticket = await run_and_die(scheduler, fake_workers.spawned[-1], -11)
            await restarted(scheduler, fake_workers, n + 2)
            assert isinstance(await ticket.messages.get(), Started)
            error = await ticket.messages.get()
            assert isinstance(error, Failed) and error.status == 500 and "SIGSEGV" in error.message
            assert "not retried" in error.message
        assert scheduler.state == "ready" and scheduler.failure is None
        sent = [m for w in fake_workers.spawned for m in w.sent if isinstance(m, RunJob)]
        assert len(sent) == 2 * deaths.SAME_SIGNAL_DEATHS  # each job went out once
        last = scheduler.submit(job())
        await settle()
        assert fake_workers.spawned[-1].sent[-1] == RunJob(last.job)
    asyncio.run(main())


def test_a_received_job_is_never_sent_again(fake_workers):
    async def main():
        scheduler = sched.Scheduler(None, max_queue=4)
        await scheduler.start()
        ticket = scheduler.submit(job())
        await settle()
        scheduler._on_message(fake_workers.spawned[0], Received(ticket.job.id))
        fake_workers.spawned[0].die()
        await restarted(scheduler, fake_workers, 2)
        error = await ticket.messages.get()
        assert isinstance(error, Failed) and error.status == 500
        assert "exit code" not in error.message
        assert not [m for m in fake_workers.spawned[1].sent if isinstance(m, RunJob)]
    asyncio.run(main())


def test_the_watchdog_restarts_an_engine_stuck_in_a_round(fake_workers):
    """No progress message for round_timeout after the engine took a job: its process is
    killed, the request fails naming the watchdog, the engine comes back."""
    async def main():
        scheduler = sched.Scheduler(None, max_queue=4, round_timeout=0.3)
        await scheduler.start()
        ticket = scheduler.submit(job())
        await settle()
        worker = fake_workers.spawned[0]
        scheduler._on_message(worker, Received(ticket.job.id))
        for _ in range(3):  # progress keeps it alive past the limit
            scheduler._on_message(worker, Progress())
            await asyncio.sleep(0.15)
        assert not worker.killed
        await until(lambda: worker.killed)
        await restarted(scheduler, fake_workers, 2)
        error = await ticket.messages.get()
        assert error.status == 500 and "--round-timeout" in error.message
        assert scheduler.state == "ready"
    asyncio.run(main())


@pytest.mark.parametrize("codes,finished", [
    ((-4, -4, -4), (False, True, False)),  # a request finished in between
    ((-4, -11, -4), (False, False, False)),  # not one signal
    ((1, 1, 1), (False, False, False)),  # exits, not signals
])
def test_deaths_that_are_not_one_repeated_signal_restart(fake_workers, codes, finished):
    async def main():
        scheduler = sched.Scheduler(None, max_queue=4)
        await scheduler.start()
        for n, (code, finish) in enumerate(zip(codes, finished, strict=True)):
            await settle()
            await run_and_die(scheduler, fake_workers.spawned[-1], code, finish)
            await restarted(scheduler, fake_workers, n + 2)
        assert scheduler.state == "ready" and scheduler.failure is None
        assert len(fake_workers.spawned) == len(codes) + 1
    asyncio.run(main())


def test_repeated_signal_names_the_signal_and_only_a_run_of_them():
    assert deaths.repeated_signal([-4, -4]) is None
    assert deaths.repeated_signal([-9, -4, -4, -4]).startswith(
        "the engine process was killed by SIGILL")
    assert "--no-repack" not in deaths.repeated_signal([-11, -11, -11])
    assert deaths.repeated_signal([None, None, None]) is None


def test_a_watchdog_kill_just_after_the_request_ended_costs_nobody(fake_workers):
    """The request's last message was already in the pipe when the watchdog killed the
    process: the next request goes to the new process, and the kill is no death of the
    engine's own (it does not count towards giving up)."""
    async def main():
        scheduler = sched.Scheduler(None, max_queue=4, round_timeout=0.2)
        await scheduler.start()
        first = scheduler.submit(job())
        await settle()
        worker = fake_workers.spawned[0]
        scheduler._on_message(worker, Received(first.job.id))

        def kill_after_done():
            worker.killed = True
            worker.loop.call_soon(scheduler._on_message, worker,
                                  Done(first.job.id, "stop", {}, False))
            worker.loop.call_soon(worker.on_exit, worker, -9)
        worker.kill = kill_after_done
        second = scheduler.submit(job())
        await until(lambda: worker.killed)
        await restarted(scheduler, fake_workers, 2)
        await settle()
        assert isinstance(await first.messages.get(), Done)
        assert RunJob(second.job) not in worker.sent
        assert RunJob(second.job) in fake_workers.spawned[1].sent
        assert scheduler._deaths == []
    asyncio.run(main())


def test_jobs_run_side_by_side_up_to_the_engines_sequences(fake_workers):
    """The engine says it runs two at once: two jobs go out at once, the third when one
    ends. When it dies, the job it had taken fails, the one it had not is sent again."""
    async def main():
        fake_workers.parallel = 2
        scheduler = sched.Scheduler(None, max_queue=4)
        await scheduler.start()
        worker = fake_workers.spawned[0]
        a, b, c = (scheduler.submit(job()) for _ in range(3))
        await settle()
        assert worker.sent == [RunJob(a.job), RunJob(b.job)] and scheduler.processing == 2
        scheduler._on_message(worker, Done(a.job.id, "stop", {}, False))
        await settle()
        assert worker.sent[-1] == RunJob(c.job) and scheduler.queue_length == 0
        scheduler._on_message(worker, Received(b.job.id))
        worker.die()
        await restarted(scheduler, fake_workers, 2)
        await settle()
        error = await b.messages.get()
        assert isinstance(error, Failed) and error.status == 500
        assert fake_workers.spawned[1].sent == [RunJob(c.job)]
    asyncio.run(main())
