"""Whether this process may call the numba kernels yet, or must use their numpy references.

Numba compiles a kernel on its first call (seconds, once per machine: the result is cached on
disk) and loads it from that cache in every new process (a fraction of a second; measured in
docs/benchmarks.md, "The first run"). Neither may land inside a request: the engine warms the
kernels up off the request path (warmup.py) and, until they are loaded, every call site takes
the numpy reference of the kernel, which returns the same answer (tests assert kernel ==
reference on many random inputs) a little slower. Compiled code is process-wide state in numba,
so this flag is process-wide too. It starts set: code that never starts a warm-up (tests, a
library user calling a verifier directly) calls the kernels as before.
"""

from __future__ import annotations

import threading

_ready = threading.Event()  # set: the kernels are loaded (or no warm-up was ever started)
_ready.set()
_settled = threading.Event()  # set: the warm-up ended, loaded or failed
_settled.set()
_started = threading.Lock()  # taken by the first warm-up of this process, never released


def kernels_ready() -> bool:
    """True when the numba kernels may be called without compiling or loading them."""
    return _ready.is_set()


def kernel_or(kernel, reference):
    """The one way a call site chooses: `kernel` once the kernels are loaded, else
    `reference`, a function with the same arguments and results (its numpy reference, or
    the kernel's own code run as Python: numba's `kernel.py_func`)."""
    return kernel if _ready.is_set() else reference


def claim_warmup() -> bool:
    """True for the first caller in this process, who must warm up and then `mark_ready` or
    `mark_failed`; until then every call site uses the numpy references."""
    if not _started.acquire(blocking=False):
        return False
    _ready.clear()
    _settled.clear()
    return True


def mark_ready() -> None:
    """The kernels are loaded: call sites switch to them from their next call."""
    _ready.set()
    _settled.set()


def mark_failed() -> None:
    """The kernels could not be compiled or loaded: this process keeps the numpy references."""
    _settled.set()


def wait_ready(timeout: float | None = None) -> bool:
    """Wait until the warm-up has ended; True when the kernels are loaded (False when it
    failed or `timeout` seconds passed first)."""
    _settled.wait(timeout)
    return _ready.is_set()
