"""Whether llama.cpp may use its extra buffer types (repacked weights, AMX) on this CPU.

Some VMs list AMX in /proc/cpuinfo while the hypervisor traps it: ggml's AMX matrix multiply
then dies with SIGILL (`tilezero`), or on others with SIGSEGV (a general protection fault at
`ldtilecfg`), on the first batched decode of quantized weights, taking the process with it
(llama.cpp #28328, #28756). Loading without extra buffer types
(`use_extra_bufts = False`, llama.cpp's `-nr`) avoids it. Where the CPU reports AMX and this
llama.cpp build uses it, a child process loads a tiny generated model of a type that takes
the AMX path and makes one batched decode; its result is kept per machine and build in lsd's
cache dir, so the probe runs once, never on the warm path. `main` is that child.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import lsd_cache_dir
from .tinygguf import write_probe_model

AMX_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")
PROBE_FILE = "cpu-probe.json"
PROBE_TIMEOUT = 120.0  # seconds the child may take (a tiny model: about a second)
PROBE_TOKENS = 32  # one batch this long takes ggml's AMX tile kernels (a single row does not)
KEPT_RESULTS = 16  # machine/build pairs remembered in the file
# how a trapped AMX instruction kills the child: #UD (SIGILL), or #GP (SIGSEGV) on VMs that
# fault `ldtilecfg` (measured on one of ours: a general protection fault in libggml-cpu)
TRAP_SIGNALS = (signal.SIGILL, signal.SIGSEGV)
# in the key: results of probes that read SIGSEGV as "failed" (1), or as a trap without a
# control run (2), are old
PROBE_VERSION = "3"
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
REBUILD_HINT = (f"CMAKE_ARGS=\"-DCMAKE_C_FLAGS='{NO_AMX_FLAGS}' "
                f"-DCMAKE_CXX_FLAGS='{NO_AMX_FLAGS}'\" "
                "pip install --force-reinstall --no-cache-dir llama-cpp-python")


@dataclass(frozen=True)
class RepackDecision:
    """Whether models load with llama.cpp's extra buffer types, and why not."""

    use_extra_bufts: bool
    reason: str = ""  # why they are off ("" when on)
    notice: str | None = None  # one line for the user when lsd turned them off by itself

    def describe(self) -> str:
        """One line for `lsd devices`."""
        return "on" if self.use_extra_bufts else f"off ({self.reason})"


@dataclass(frozen=True)
class ProbeResult:
    """What the child process did: "ok", "trapped" (killed by TRAP_SIGNALS) or "failed"."""

    outcome: str
    detail: str = ""
    seconds: float = 0.0


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of /proc/cpuinfo's first processor (x86 "flags", Arm "Features")."""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def reports_amx(cpuinfo: str) -> bool:
    return bool(cpu_flags(cpuinfo) & set(AMX_FLAGS))


def build_uses_amx(build: str) -> bool:
    """llama.cpp's system info names AMX_INT8 when its CPU backend was compiled with it."""
    return "AMX_INT8 = 1" in build


def read_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: no such trap is known there
        return ""


def machine_key(cpuinfo: str, build: str) -> str:
    """This CPU (model name and flags), this llama.cpp build and the probe's version, hashed."""
    model = next((line.partition(":")[2].strip() for line in cpuinfo.splitlines()
                  if line.startswith("model name")), "")
    text = "\n".join([model, " ".join(sorted(cpu_flags(cpuinfo))), build, PROBE_VERSION])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def forced_off() -> bool:
    """LSD_NO_REPACK set to anything but 0/empty."""
    return os.environ.get("LSD_NO_REPACK", "") not in ("", "0")


def decide(no_repack: bool | None, cpuinfo: str, build: str, cache: Path,
           probe: Callable[[], ProbeResult]) -> RepackDecision:
    """no_repack True (--no-repack) or LSD_NO_REPACK: off; False: on, no probe; None: on
    unless this CPU reports AMX, this build uses it, and the probe (its cached result, else
    `probe()`, then cached) was killed by one of TRAP_SIGNALS."""
    if no_repack or (no_repack is None and forced_off()):
        return RepackDecision(False, "--no-repack" if no_repack else "LSD_NO_REPACK")
    if no_repack is False or not reports_amx(cpuinfo) or not build_uses_amx(build):
        return RepackDecision(True)
    key = machine_key(cpuinfo, build)
    result = _cached(cache, key)
    if result is None:
        result = probe()
        _store(cache, key, result)
    if result.outcome != "trapped":
        return RepackDecision(True)
    return RepackDecision(False, "this CPU reports AMX but traps it", notice=(
        f"this CPU reports AMX but traps it (a probe with extra buffer types was "
        f"{result.detail}): models load without extra buffer types, as llama.cpp's -nr, which is "
        f"slower for some weight types; for full speed rebuild llama-cpp-python without AMX: "
        f"{REBUILD_HINT}"))


def repack_off() -> bool:
    """Whether this process loads models without extra buffer types (Model.load's decision
    when not told): what llama.cpp's tools run beside lsd are then given (-nr)."""
    from .model import build_identity

    return not repack_decision(None, build_identity()).use_extra_bufts


def repack_decision(no_repack: bool | None, build: str) -> RepackDecision:
    """This process's decision for `no_repack` (what every model load asks)."""
    return _decision(no_repack, forced_off(), build, lsd_cache_dir())


@functools.lru_cache(maxsize=8)
def _decision(no_repack: bool | None, env_forced: bool, build: str,
              cache_dir: Path) -> RepackDecision:
    # keyed by what decide reads besides the CPU, so that a changed setting is seen
    return decide(no_repack, read_cpuinfo(), build, cache_dir / PROBE_FILE, run_probe)


def _cached(cache: Path, key: str) -> ProbeResult | None:
    try:
        entry = json.loads(cache.read_text(encoding="utf-8"))["results"][key]
        return ProbeResult(str(entry["outcome"]), str(entry.get("detail", "")),
                           float(entry.get("seconds", 0.0)))
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or damaged: probe again
        return None


def _store(cache: Path, key: str, result: ProbeResult) -> None:
    """Write the file whole and rename it over the old one (never a half-written file)."""
    try:
        results = json.loads(cache.read_text(encoding="utf-8")).get("results", {})
        results = results if isinstance(results, dict) else {}
    except (OSError, ValueError, AttributeError):
        results = {}
    results.pop(key, None)
    results[key] = {"outcome": result.outcome, "detail": result.detail,
                    "seconds": round(result.seconds, 3), "when": int(time.time())}
    kept = dict(list(results.items())[-KEPT_RESULTS:])
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=cache.parent, delete=False,
                                         suffix=".tmp", encoding="utf-8") as f:
            json.dump({"format": 1, "results": kept}, f)
        os.replace(f.name, cache)
    except OSError:  # an unwritable cache dir: probe again next time, never fail a load
        pass


def run_probe(command: list[str] | None = None, timeout: float = PROBE_TIMEOUT) -> ProbeResult:
    """Run the probe child (or `command`) and say how it ended. The probe's SIGSEGV is a trap
    only if the same child without extra buffer types ends well (a crash of another kind
    must not turn them off for good)."""
    result = _run_child(command or child_command(False), timeout)
    if command is None and result.detail == f"killed by {signal.SIGSEGV.name}":
        control = _run_child(child_command(True), timeout)
        if control.outcome != "ok":
            return ProbeResult("failed", f"{result.detail}, and without extra buffer types "
                                         f"too ({control.detail})",
                               result.seconds + control.seconds)
    return result


def child_command(no_repack: bool) -> list[str]:
    """The probe child's command line (`no_repack`: the control, extra buffer types off)."""
    return [sys.executable, "-c",
            f"from lsd_local.backend.cpu_probe import main; main({no_repack})"]


def _run_child(command: list[str], timeout: float) -> ProbeResult:
    env = dict(os.environ, GGML_NO_BACKTRACE="1")  # a crash must not attach gdb
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=Path(__file__).resolve().parents[2],
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ProbeResult("failed", str(exc), time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if -done.returncode in TRAP_SIGNALS:
        return ProbeResult("trapped", f"killed by {signal.Signals(-done.returncode).name}",
                           seconds)
    if done.returncode != 0:
        return ProbeResult("failed", f"exit {done.returncode}: {done.stderr[-300:]}", seconds)
    return ProbeResult("ok", done.stdout.strip()[-200:], seconds)


def main(no_repack: bool = False) -> None:
    """The child: load a tiny Q8_0 model with extra buffer types on (off: `no_repack`),
    decode one batch."""
    import numpy as np

    from ..config import LoadOptions
    from .model import Model

    with tempfile.TemporaryDirectory() as folder:
        path = write_probe_model(Path(folder) / "probe.gguf")
        opts = LoadOptions(n_ctx=2 * PROBE_TOKENS, n_batch=PROBE_TOKENS, n_gpu_layers=0,
                           no_repack=no_repack)
        model = Model.load(path, opts)
        logits = model.decode(np.arange(3, 3 + PROBE_TOKENS, dtype=np.int32), 0, 2)
        print(f"decoded {PROBE_TOKENS} tokens; logits finite: {bool(np.isfinite(logits).all())}")
        model.close()

