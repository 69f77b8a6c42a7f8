"""First run: the numba kernels are compiled in another process and loaded off the request
path; until then the numpy references answer, token for token the same."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lsd_local

# Runs in a fresh process on a copy of the package (an empty numba cache): the first request
# must run on the numpy references and compile nothing; the compile starts when it ends.
FIRST_PROCESS = """
import json, sys
from lsd_local import Engine, jit
from lsd_local.warmup import _cached, kernel_calls

out = {}
with Engine.load(sys.argv[1], drafter="lookup", k=8, rule="fly", theta=0.0) as eng:
    gen = eng.generate("the cat is the cat is the", max_tokens=60)
    out["ready_during_first"] = [jit.kernels_ready() for _ in gen]
    out["first"] = gen.tokens
    out["compiled_in_process"] = sum(len(k.signatures) for k, _ in kernel_calls())
    out["ready"] = jit.wait_ready(600)
    out["cached"] = all(_cached(k) for k, _ in kernel_calls())
    gen = eng.generate("the cat is the cat is the", max_tokens=60)
    out["ready_during_second"] = [jit.kernels_ready() for _ in gen]
    out["second"] = gen.tokens
    out["drafted"] = gen.stats.drafted
print(json.dumps(out))
"""

# A later process: everything is cached, so nothing is compiled again.
LATER_PROCESS = """
import json, sys
import lsd_local.warmup as warmup
from lsd_local import Engine, jit

calls = []
warmup.compile_in_background_process = lambda: calls.append(1)
with Engine.load(sys.argv[1], drafter="lookup", k=8, rule="fly", theta=0.0) as eng:
    ready = jit.wait_ready(600)
    tokens = eng.generate("the cat is the cat is the", max_tokens=60).run().tokens
print(json.dumps({"ready": ready, "compiles": len(calls), "tokens": tokens}))
"""


def run_script(script: str, package_root: Path, model: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, str(model)], capture_output=True,
                          text=True, timeout=900, cwd=package_root,  # '' in sys.path
                          env={**os.environ, "PYTHONPATH": str(package_root)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_first_run_uses_numpy_until_the_kernels_are_compiled_elsewhere(tiny_pair, tmp_path):
    package = Path(lsd_local.__file__).parent
    shutil.copytree(package, tmp_path / "lsd_local",
                    ignore=shutil.ignore_patterns("__pycache__"))
    first = run_script(FIRST_PROCESS, tmp_path, tiny_pair[0])
    assert first["ready_during_first"] and not any(first["ready_during_first"])
    assert first["compiled_in_process"] == 0  # the request compiled nothing
    assert first["ready"] and first["cached"]  # the other process filled numba's cache
    assert all(first["ready_during_second"])
    assert first["first"] == first["second"] and first["drafted"] > 0
    later = run_script(LATER_PROCESS, tmp_path, tiny_pair[0])
    assert later == {"ready": True, "compiles": 0, "tokens": first["first"]}
