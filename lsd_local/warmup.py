"""Compile the numba kernels once per machine and load them once per process, off the
request path (see jit.py for what call sites do meanwhile).

`start_warmup()` runs when an engine starts loading its models. A background thread checks
numba's on-disk cache: when every kernel is there it loads them (llama.cpp loads the models
at the same time, outside the GIL); when one is missing, a separate process at the lowest
CPU priority compiles them all into the cache (on a 2-core machine that costs the running
request less than compiling beside it under the same GIL), and the thread loads them once
it is done. The compiling process outlives a short `lsd run`, so the next run finds the
cache. `python -m lsd_local.warmup` is that process.
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

import numpy as np

from .drafters.lookup import lookup_kernel, lookup_match
from .jit import claim_warmup, mark_ready
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


def compile_in_background_process() -> int:
    """Compile every kernel into the disk cache in a separate, low-priority process that
    outlives this one if it must; return its exit code."""
    package_parent = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH"))
                                        if p)
    proc = subprocess.Popen([sys.executable, "-m", "lsd_local.warmup"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    return proc.wait()


def _warm() -> None:
    calls = kernel_calls()
    if not all(_cached(kernel) for kernel, _ in calls):
        compile_in_background_process()
    try:
        for kernel, args in calls:
            kernel(*args)
    except Exception:  # noqa: BLE001 - keep the numpy references for this process
        return
    mark_ready()


def start_warmup() -> None:
    """Warm the kernels up in a background thread (once per process; later calls return)."""
    if claim_warmup():
        threading.Thread(target=_warm, name="lsd-kernel-warmup", daemon=True).start()


def _lock_path() -> Path:
    """One lock per installed copy of lsd: two processes never compile the same kernels."""
    digest = hashlib.sha256(str(Path(__file__).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"lsd-warmup-{digest}.lock"


def main() -> None:
    """`python -m lsd_local.warmup`: compile every kernel into numba's cache, politely. A
    second one started meanwhile (two quick `lsd run`s) waits for the first, then only loads
    what it compiled."""
    with contextlib.suppress(OSError, AttributeError):
        os.nice(19)
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError, ImportError):  # no lock: compile anyway
            import fcntl

            lock = stack.enter_context(open(_lock_path(), "a"))  # noqa: SIM115
            fcntl.flock(lock, fcntl.LOCK_EX)
        for kernel, args in kernel_calls():
            kernel(*args)


if __name__ == "__main__":
    main()
