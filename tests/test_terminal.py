"""The real interactive terminal: `lsd chat` in a pseudo-terminal (colours, Ctrl-C, Ctrl-D)."""

from __future__ import annotations

import os
import pty
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
        deadline = time.monotonic() + timeout
        while marker not in self.output[since:]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{marker!r} not seen in {self.output[-500:]!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"exited before {marker!r}: {self.output[-500:]!r}")
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


@pytest.mark.parametrize("no_color", [False, True])
def test_ctrl_c_stops_the_answer_and_ctrl_d_exits(tiny_pair, no_color):
    term = chat(tiny_pair[0], no_color)
    term.read_until(b">>> ")
    term.send(b"the cat is\r")
    start = len(term.output)
    time.sleep(1.5)  # let the answer stream for a while
    term.send(b"\x03")  # Ctrl-C in the middle of a long answer
    term.read_until(b"[interrupted]")
    term.read_until(b">>> ", timeout=30)
    answer = term.output[start:]
    has_colour = b"\x1b[32m" in answer
    assert has_colour != no_color
    term.send(b"/stats\r")
    term.read_until(b"session: 1 answers")
    # wait for the next prompt: readline discards typed-ahead input when it starts reading
    term.read_until(b">>> ", since=term.output.index(b"session: 1 answers"))
    term.send(b"\x04")  # Ctrl-D at the prompt exits
    assert term.wait() == 0
