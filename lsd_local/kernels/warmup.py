"""Compile the numba kernels once per machine and load them once per process, never inside
a request (see jit.py for what call sites do meanwhile: the numpy references).

When an engine starts loading its models, `process_warmup().start()` checks numba's on-disk
cache for the exact compilations a request needs (argument types, this CPU, this source). All
there: a background thread loads them while llama.cpp loads the models (outside the GIL), in a
fraction of a second. One missing: nothing happens until the first request ends; then a
separate process compiles them all into the cache on idle CPU time only (Linux SCHED_IDLE,
Windows idle class, else nice 19), and once it has succeeded and no request is running, a
thread loads them. Compiling during a request cost too much on a 2-core CPU: in-process it held
the GIL, and even a niced process stalls llama.cpp's threads, which wait for each other at
every layer (measured: docs/benchmarks.md, "The first run"). The compiling process outlives a
short `lsd run`, so the next run finds the cache. `python -m lsd_local.kernels.warmup` is that
process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numba
import numpy as np

from ..config import RUN_CAP
from .asd import asd_kernel
from .fly import fly_kernel
from .jit import claim_warmup, mark_failed, mark_ready, wait_ready
from .lookup import lookup_match
from .rows import row_entropy, row_top, row_top_share
from .suffix import HASH_N, MAX_CANDIDATES, index_add, index_find

LOAD_TIMEOUT = 600.0  # seconds load_kernels_now waits by default (a compile takes a few)


def kernel_calls() -> list[tuple[object, tuple]]:
    """One call of every kernel on the request path, with the argument types the engine
    passes (C-contiguous float32 logits, int32 tokens, Python int/float/bool scalars):
    exactly the specializations a request needs, so none is compiled inside one."""
    logits = np.zeros((3, 8), np.float32)
    logits[:, 1] = 1.0
    draft = np.array([1, 2], np.int32)
    loose = np.zeros(2, np.uint8)
    tokens = (np.arange(20) % 5).astype(np.int32)
    out = np.zeros(8, np.int32)
    row = logits[0]
    targets = logits.argmax(axis=1)  # int64[K+1], as the verifiers pass it
    ring = np.zeros(16, np.int32)
    chain, table = np.full(16, -1, np.int64), np.full(16, -1, np.int64)
    return [(index_add, (ring, chain, table, 0, tokens, HASH_N)),
            (index_find, (ring, chain, table, 0, tokens, HASH_N, 6, 8, RUN_CAP,
                          MAX_CANDIDATES, out)),
            (fly_kernel, (logits, targets, draft, 0.6, 1, 3, False, loose)),
            (asd_kernel, (logits, targets, draft, 0.0, 2.0, 2, 6.0, loose)),
            (lookup_match, (tokens, 12, 6, 8, RUN_CAP, out)), (row_top, (row, 4)),
            (row_entropy, (row, row[1], 3, False)), (row_top_share, (row, 10))]


def _cached(kernel, args: tuple) -> bool:
    """Whether numba's disk cache holds `kernel` compiled for these argument types, this
    CPU and this source (numba's own index key). Numba internals: any surprise means no."""
    try:
        cache = kernel._cache
        signature = tuple(numba.typeof(a) for a in args)
        key = cache._index_key(signature, kernel.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - an internal API of numba; assume nothing is cached
        return False


def all_cached() -> bool:
    """Every kernel a request needs is in numba's disk cache."""
    return all(_cached(kernel, args) for kernel, args in kernel_calls())


def compile_in_background_process() -> subprocess.Popen:
    """Start compiling every kernel into the disk cache in a separate process that runs on
    idle CPU time only and outlives this one if it must. It starts in the folder that holds
    this copy of lsd_local, so that `-m` imports this copy and no other."""
    package_parent = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "lsd_local.kernels.warmup"], cwd=package_parent,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            creationflags=getattr(subprocess, "IDLE_PRIORITY_CLASS", 0))
    lowest_priority(proc.pid)  # at once: its imports already compete with llama.cpp
    return proc


def lowest_priority(pid: int) -> None:
    """Run `pid` only on otherwise idle CPU time (Linux SCHED_IDLE), else at nice 19.
    llama.cpp's threads wait for each other at every layer: a competitor that takes a core
    even briefly stalls all of them."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):
        pass
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, pid, 19)


class KernelWarmup:
    """The kernels' warm-up in this process (numba's compiled code is process-wide, so is
    this). `start` when models start loading; `request_started` / `request_ended` around
    each generation."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._in_flight = 0  # requests running now
        self._compile_pending = False

    def start(self) -> None:
        """Load cached kernels in a background thread while the models load; when the cache
        lacks one, remember to compile after the first request (never during it)."""
        if not claim_warmup():
            return
        if all_cached():
            threading.Thread(target=_load_kernels, name="lsd-kernel-load", daemon=True).start()
            return
        with self._idle:
            self._compile_pending = True

    def request_started(self) -> None:
        with self._idle:
            self._in_flight += 1

    def request_ended(self) -> None:
        """A generation ended: if the kernels still need compiling, start that now."""
        with self._idle:
            self._in_flight = max(0, self._in_flight - 1)
            self._idle.notify_all()
        self.compile_now()

    def compile_now(self) -> None:
        """Start the pending compile (if any) in its own process, and a thread that loads
        the result once it succeeded and no request is running."""
        with self._idle:
            if not self._compile_pending:
                return
            self._compile_pending = False
        try:
            proc = compile_in_background_process()
        except OSError:  # no process to be had: stay on the numpy references
            mark_failed()
            return
        threading.Thread(target=self._load_after, args=(proc,), name="lsd-kernel-compile",
                         daemon=True).start()

    def _load_after(self, proc: subprocess.Popen) -> None:
        if proc.wait() != 0 or not all_cached():  # loading now would compile in-process
            mark_failed()
            return
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0)
        _load_kernels()


_WARMUP = KernelWarmup()  # numba's compiled kernels are process-wide, so is their warm-up


def process_warmup() -> KernelWarmup:
    """This process's warm-up."""
    return _WARMUP


def load_kernels_now(timeout: float | None = LOAD_TIMEOUT) -> bool:
    """Compile the kernels if the cache lacks them, load them and wait (benchmarks: every
    timed request runs on the same code). False if they failed or took over `timeout`."""
    _WARMUP.start()
    _WARMUP.compile_now()
    return wait_ready(timeout)


def _load_kernels() -> None:
    try:
        for kernel, args in kernel_calls():
            kernel(*args)
    except Exception:  # noqa: BLE001 - keep the numpy references for this process
        mark_failed()
        return
    mark_ready()


def _lock_path() -> Path:
    """One lock per installed copy of lsd: two processes never compile the same kernels."""
    digest = hashlib.sha256(str(Path(__file__).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"lsd-warmup-{digest}.lock"


def main() -> None:
    """`python -m lsd_local.kernels.warmup`: compile every kernel into numba's cache, politely. A
    second one started meanwhile (two quick `lsd run`s) waits for the first, then only loads
    what it compiled."""
    lowest_priority(0)  # started by hand too
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError, ImportError):  # no lock: compile anyway
            import fcntl

            lock = stack.enter_context(open(_lock_path(), "a"))  # noqa: SIM115
            fcntl.flock(lock, fcntl.LOCK_EX)
        for kernel, args in kernel_calls():
            kernel(*args)


if __name__ == "__main__":
    main()
