"""Compile the numba kernels once per machine and load them once per process, never inside
a request (see jit.py for what call sites do meanwhile: the numpy references).

When an engine starts loading its models, `process_warmup().start()` checks numba's on-disk
cache. Every kernel there: a background thread loads them while llama.cpp loads the models
(outside the GIL), ~0.1 s. One missing: nothing happens until the first request ends; then a
separate process compiles them all into the cache on idle CPU time only (SCHED_IDLE) and a
thread loads them once it is done. Compiling during a request cost too much on a 2-core CPU:
in-process it held the GIL (the old first run decoded at a quarter of its warm speed), and
even a niced process stalls llama.cpp's threads, which wait for each other at every layer (a
50-token prompt took 2.2 s instead of 0.1). The compiling process outlives a short `lsd run`,
so the next run finds the cache. `python -m lsd_local.warmup` is that process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from .drafters.lookup import lookup_kernel, lookup_match
from .jit import claim_warmup, mark_ready, wait_ready
from .verify._rows import row_argmax, row_argmax_prob, row_entropy, row_top
from .verify.asd import asd_kernel
from .verify.fly import fly_kernel
from .verify.strict import strict_kernel


def kernel_calls() -> list[tuple[object, tuple]]:
    """One call of every kernel with the argument types the engine passes (C-contiguous
    float32 logits, int32 tokens, Python int/float/bool scalars): exactly the
    specializations a request needs, so none is compiled inside one."""
    logits = np.zeros((3, 8), np.float32)
    logits[:, 1] = 1.0
    draft = np.array([1, 2], np.int32)
    loose = np.zeros(2, np.uint8)
    tokens = (np.arange(20) % 5).astype(np.int32)
    out = np.zeros(8, np.int32)
    row = logits[0]
    return [(strict_kernel, (logits, draft)),
            (fly_kernel, (logits, draft, 0.6, 1, 3, False, loose)),
            (asd_kernel, (logits, draft, 0.0, 2.0, 2, 6.0, loose)),
            (lookup_match, (tokens, 12, 6, 8, out)), (lookup_kernel, (tokens, 12, 6, 8, out)),
            (row_argmax, (row,)), (row_top, (row, 4)), (row_argmax_prob, (row,)),
            (row_entropy, (row, row[1], 3, False))]


def _cached(kernel) -> bool:
    """Whether numba's disk cache holds a current compilation of `kernel` (its index is
    empty when missing or older than the source). Numba internals: any surprise means no."""
    try:
        return bool(kernel._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 - an internal API of numba; assume nothing is cached
        return False


def compile_in_background_process() -> subprocess.Popen:
    """Start compiling every kernel into the disk cache in a separate process that runs on
    idle CPU time only and outlives this one if it must."""
    package_parent = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH"))
                                        if p)
    proc = subprocess.Popen([sys.executable, "-m", "lsd_local.warmup"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    lowest_priority(proc.pid)  # at once: its imports already compete with llama.cpp
    return proc


def lowest_priority(pid: int) -> None:
    """Run `pid` only on otherwise idle CPU time (Linux SCHED_IDLE), else at nice 19.
    llama.cpp's threads wait for each other at every layer: a competitor that takes a core
    even briefly stalls all of them (a prompt of 50 tokens took 2.2 s instead of 0.1)."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):
        pass
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, pid, 19)


class KernelWarmup:
    """The kernels' warm-up in this process (numba's compiled code is process-wide, so is
    this). `start` when models start loading; `request_ended` after each generation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._compile_pending = False

    def start(self) -> None:
        """Load cached kernels in a background thread while the models load; when the cache
        lacks one, remember to compile after the first request (never during it)."""
        if not claim_warmup():
            return
        if all(_cached(kernel) for kernel, _ in kernel_calls()):
            threading.Thread(target=_load_kernels, name="lsd-kernel-load", daemon=True).start()
        else:
            with self._lock:
                self._compile_pending = True

    def request_ended(self) -> None:
        """A generation ended: if the kernels still need compiling, start that now, in a
        separate process on idle CPU time that outlives this one if it must (a short
        `lsd run` exits at once; the next run finds the cache)."""
        with self._lock:
            if not self._compile_pending:
                return
            self._compile_pending = False
        proc = compile_in_background_process()
        threading.Thread(target=_load_after, args=(proc,), name="lsd-kernel-compile",
                         daemon=True).start()


@functools.cache
def process_warmup() -> KernelWarmup:
    """This process's warm-up (created on first use, never at import)."""
    return KernelWarmup()


def load_kernels_now(timeout: float | None = None) -> bool:
    """Compile the kernels if the cache lacks them, load them and wait (benchmarks: every
    timed request runs on the same code). False if they were not ready within `timeout`."""
    warmup = process_warmup()
    warmup.start()
    warmup.request_ended()
    return wait_ready(timeout)


def _load_kernels() -> None:
    try:
        for kernel, args in kernel_calls():
            kernel(*args)
    except Exception:  # noqa: BLE001 - keep the numpy references for this process
        return
    mark_ready()


def _load_after(proc: subprocess.Popen) -> None:
    proc.wait()
    _load_kernels()


def _lock_path() -> Path:
    """One lock per installed copy of lsd: two processes never compile the same kernels."""
    digest = hashlib.sha256(str(Path(__file__).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"lsd-warmup-{digest}.lock"


def main() -> None:
    """`python -m lsd_local.warmup`: compile every kernel into numba's cache, politely. A
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
