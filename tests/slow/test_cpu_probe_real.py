"""On a CPU that reports AMX (and a llama.cpp build that uses it), the real probe decides,
and `lsd run` then answers on the embedded model either way: with extra buffer types where
AMX works, without them where it traps (a VM whose hypervisor traps AMX). Skipped, with
the reason, where there is no AMX to probe."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lsd_local.backend import build_identity
from lsd_local.backend import cpu_probe as cp

pytestmark = pytest.mark.slow


def test_the_real_probe_decides_and_lsd_run_survives(tmp_path):
    cpuinfo = cp.read_cpuinfo()
    if not cp.reports_amx(cpuinfo):
        pytest.skip("this CPU does not report AMX: nothing can trap here")
    if not cp.build_uses_amx(build_identity()):
        pytest.skip("this llama.cpp build has no AMX kernels: nothing can trap here")
    result = cp.run_probe()
    assert result.outcome in ("ok", "trapped"), result.detail
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-m", "lsd_local", "run", "--drafter", "lookup",
                          "--max-tokens", "16", "Count to five."], capture_output=True,
                         text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert ("traps" in run.stderr) == (result.outcome == "trapped"), run.stderr
    print(f"probe: {result.outcome} in {result.seconds:.2f} s")
