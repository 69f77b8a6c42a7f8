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

# Runs in a fresh process on a copy of the package (an empty numba cache). Requests of every
# kind (lookup, grammar, draft model with sampling, multilevel; strict, FLy, ASD) must run on
# the numpy references and compile nothing. The compile, which starts when a request ends, is
# held until all of them have run; then the kernels load and the same requests give the same
# tokens.
FIRST_PROCESS = """
import json, sys, threading
import lsd_local.kernels.warmup as warmup
from lsd_local import Engine
from lsd_local.kernels import jit
from lsd_local.kernels.warmup import all_cached, kernel_calls

release = threading.Event()
compile_elsewhere = warmup.compile_in_background_process
class HeldCompile:
    def wait(self):
        release.wait(600)
        return compile_elsewhere().wait()
warmup.compile_in_background_process = HeldCompile

def compiled():
    return sum(len(k.signatures) for k, _ in kernel_calls())

def requests(lookup, model):
    yield lookup, dict(prompt="the cat is the cat is the", max_tokens=60)
    yield lookup, dict(prompt="the cat is", max_tokens=40, grammar="root ::= [a-z ]+")
    yield model, dict(prompt="the cat is a", max_tokens=40, temperature=0.9, seed=1)
    yield model, dict(prompt="the cat is the cat", max_tokens=40, grammar="root ::= [a-z ]+",
                      temperature=0.7, seed=2)

def run_all(engines, rules):
    tokens, ready, counts, drafted = [], [], [], 0
    for (eng, kw), (drafter, rule) in zip(requests(*engines), rules):
        eng.configure(drafter=drafter, k=4, rule=rule, theta=0.0, gate=50.0, budget=50.0)
        kw = dict(kw)
        gen = eng.generate(kw.pop("prompt"), **kw)
        for _ in gen:
            ready.append(jit.kernels_ready())
            counts.append(compiled())
        tokens.append(gen.tokens)
        drafted += gen.stats.drafted
    return tokens, ready, counts, drafted

target, draft = sys.argv[1], sys.argv[2]
rules = [("lookup", "fly"), ("lookup", "asd"), ("model", "fly"), ("multilevel", "strict")]
with Engine.load(target, drafter="lookup") as lookup, \
        Engine.load(target, draft, drafter="model") as model:
    first, ready1, counts1, drafted = run_all((lookup, model), rules)
    release.set()
    ready = jit.wait_ready(600)
    second, ready2, counts2, _ = run_all((lookup, model), rules)
print(json.dumps({"first": first, "ready_first": ready1, "compiled_first": counts1,
                  "drafted": drafted, "ready": ready, "cached": all_cached(),
                  "second": second, "ready_second": ready2}))
"""

# A later process: everything is cached, so nothing is compiled again.
LATER_PROCESS = """
import json, sys
import lsd_local.kernels.warmup as warmup
from lsd_local import Engine
from lsd_local.kernels import jit

calls = []
warmup.compile_in_background_process = lambda: calls.append(1)
with Engine.load(sys.argv[1], drafter="lookup", k=4, rule="fly", theta=0.0) as eng:
    ready = jit.wait_ready(600)
    tokens = eng.generate("the cat is the cat is the", max_tokens=60).run().tokens
print(json.dumps({"ready": ready, "compiles": len(calls), "tokens": tokens}))
"""


def run_script(script: str, package_root: Path, *args: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True,
                          text=True, timeout=900, cwd=package_root,  # '' in sys.path
                          env={**os.environ, "PYTHONPATH": str(package_root)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_first_run_uses_numpy_until_the_kernels_are_compiled_elsewhere(tiny_pair, tmp_path):
    package = Path(lsd_local.__file__).parent
    shutil.copytree(package, tmp_path / "lsd_local",
                    ignore=shutil.ignore_patterns("__pycache__"))
    first = run_script(FIRST_PROCESS, tmp_path, *tiny_pair)
    assert first["ready_first"] and not any(first["ready_first"])
    assert not any(first["compiled_first"])  # no request compiled or loaded a kernel
    assert first["drafted"] > 0
    assert first["ready"] and first["cached"]  # the other process filled numba's cache
    assert first["ready_second"] and all(first["ready_second"])
    assert first["first"] == first["second"]  # numpy references and kernels agree
    later = run_script(LATER_PROCESS, tmp_path, tiny_pair[0])
    assert later["ready"] and later["compiles"] == 0
    assert later["tokens"] == first["first"][0]
