"""The real interactive terminal: `lsd chat` in a pseudo-terminal (colours, Ctrl-C, Ctrl-D)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")


class Terminal:
    """A child process on a pty; read until a marker appears or a deadline passes."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # child
            # a background runner (nohup, CI) may ignore SIGINT, and Python keeps an ignored
            # SIGINT ignored: restore the default so that Ctrl-C raises KeyboardInterrupt
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execvpe(argv[0], argv, env)
        self.output = b""

    def read_until(self, marker: bytes, timeout: float = 60.0, since: int = 0) -> bytes:
        """Read until `marker` appears after offset `since` of the output."""
        return self._read_while(lambda: marker not in self.output[since:], timeout,
                                f"{marker!r}")

    def read_bytes(self, n: int, since: int, timeout: float = 120.0) -> bytes:
        """Read until at least n bytes arrived after offset `since`."""
        return self._read_while(lambda: len(self.output) - since < n, timeout, f"{n} bytes")

    def _read_while(self, waiting, timeout: float, what: str) -> bytes:
        """Read the terminal while `waiting()` holds; fail at the deadline or at its end."""
        deadline = time.monotonic() + timeout
        while waiting():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what} not seen in {self.output[-500:]!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"exited before {what}: {self.output[-500:]!r}")
                self.output += chunk
        return self.output

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                if ready:
                    self.output += os.read(self.fd, 4096)
            except OSError:
                pass
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("lsd chat did not exit")


def chat(model, no_color: bool) -> Terminal:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    if no_color:
        env["NO_COLOR"] = "1"
    argv = [sys.executable, "-m", "lsd_local", "chat", str(model), "--show-drafts",
            "--max-tokens", "100000", "--ctx", "32768", "--drafter", "lookup", "-k", "8"]
    return Terminal(argv, env)


GREEN = b"\x1b[32m"


@pytest.mark.parametrize("no_color", [False, True])
def test_ctrl_c_stops_the_answer_and_ctrl_d_exits(tiny_pair, no_color):
    term = chat(tiny_pair[0], no_color)
    term.read_until(b">>> ")
    term.send(b"the cat is\r")
    start = len(term.output)
    if no_color:  # nothing to wait for but text: enough of it that drafts were kept
        term.read_bytes(2000, since=start)
    else:  # wait for the event the test is about: a draft token shown in green
        term.read_until(GREEN, since=start)
    term.send(b"\x03")  # Ctrl-C in the middle of a long answer
    term.read_until(b"[interrupted]", since=start)
    term.read_until(b">>> ", timeout=30, since=start)
    answer = term.output[start:]
    assert (GREEN in answer) != no_color
    summary = re.search(rb"tau ([0-9.]+)", answer)
    assert summary and float(summary.group(1)) > 1.0  # drafts were kept: colours had a cause
    term.send(b"/stats\r")
    term.read_until(b"session: 1 answers")
    # wait for the next prompt: readline discards typed-ahead input when it starts reading
    term.read_until(b">>> ", since=term.output.index(b"session: 1 answers"))
    term.send(b"\x04")  # Ctrl-D at the prompt exits
    assert term.wait() == 0


def test_run_model_on_a_terminal_starts_the_chat(tiny_pair):
    """`lsd run MODEL` without a prompt on a terminal is `lsd chat MODEL` (as `ollama run`)."""
    argv = [sys.executable, "-m", "lsd_local", "run", str(tiny_pair[0]), "--max-tokens", "5"]
    term = Terminal(argv, dict(os.environ))
    term.read_until(b">>> ")
    term.send(b"hello\r")
    answered = len(term.output)
    term.read_until(b"tokens,", since=answered)
    term.read_until(b">>> ", since=answered)  # readline drops input typed before it reads
    term.send(b"\x04")
    assert term.wait() == 0
