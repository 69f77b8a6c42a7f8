"""Start `lsd serve` as a real subprocess on a free loopback port and talk to it.

Every wait is for an event: a line on the server's stderr (ready, restarting, back), a
chunk of a stream, the process's exit. The timeouts only bound a hang."""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

HANG = 120.0  # seconds after which a missing event is a failure, not a wait
READY_RE = re.compile(r"ready at http://127\.0\.0\.1:(\d+)/v1")


class Server:
    """`lsd serve MODEL ARGS` on 127.0.0.1 with --port 0; the port comes from its ready line."""

    def __init__(self, model: Path, *args: str, env: dict | None = None,
                 wait_ready: bool = True, python: str = sys.executable) -> None:
        command = [python, "-m", "lsd_local", "serve", str(model), "--port", "0", *args]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})})
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port: int | None = None
        if wait_ready:
            self.port = int(self.wait_for(READY_RE).group(1))

    def _read(self) -> None:
        for line in self.process.stderr:
            self.stderr.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern: re.Pattern | str, timeout: float = HANG) -> re.Match:
        """The next stderr line matching `pattern` (AssertionError if the server exits)."""
        pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        while True:
            line = self.lines.get(timeout=timeout)
            if line is None:
                raise AssertionError(f"the server exited ({self.process.wait()}) before "
                                     f"{pattern.pattern!r}:\n{''.join(self.stderr)}")
            match = pattern.search(line)
            if match:
                return match

    def all_stderr(self) -> str:
        """Everything the server wrote to stderr (waits for it to exit)."""
        self.process.wait(timeout=HANG)
        self._reader.join(HANG)
        return "".join(self.stderr)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self, api_key: str = "none", **kw):
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0,
                             timeout=HANG, **kw)

    def request(self, method: str, path: str, body: bytes | str | dict | None = None,
                headers: dict | None = None) -> tuple[int, dict, bytes]:
        """(status, headers, body) of one raw HTTP request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HANG)
        if isinstance(body, dict):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, dict(response.getheaders()), data

    def post(self, path: str, body, headers: dict | None = None) -> tuple[int, dict]:
        """POST JSON; (status, decoded JSON answer)."""
        status, _, data = self.request("POST", path, body,
                                       {"Content-Type": "application/json", **(headers or {})})
        return status, json.loads(data)

    def metric(self, name: str, labels: str = "") -> float:
        """One sample of /metrics (0 when absent)."""
        _, _, data = self.request("GET", "/metrics")
        for line in data.decode().splitlines():
            if line.startswith(name + (("{" + labels + "}") if labels else " ")):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def engine_pid(self) -> int:
        """The engine process (the server's child that is not multiprocessing's tracker)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        for pid in children.read_text().split():
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:
                return int(pid)
        raise AssertionError("no engine process")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the server and return its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=HANG)
        finally:
            if self.process.poll() is None:
                self.process.kill()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        if self.process.poll() is None:
            self.process.kill()
        self.process.stdout.close()


def stream_raw(port: int, body: dict, headers: dict | None = None):
    """POST a streaming request over a raw connection; returns (connection, response) so
    that a test can read part of the stream and then drop the connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG)
    conn.request("POST", "/v1/chat/completions" if "messages" in body else "/v1/completions",
                 body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json", **(headers or {})})
    return conn, conn.getresponse()


def read_event(response) -> str | None:
    """The data of the next SSE event (None at the end of the stream)."""
    data = None
    while True:
        line = response.fp.readline()
        if not line:
            return data
        line = line.decode().rstrip("\r\n")
        if line.startswith("data: "):
            data = line[len("data: "):]
        elif line == "" and data is not None:
            return data


def complete(server: Server, prompt: str, max_tokens: int, stream: bool) -> str:
    """A raw completion's text through the openai client, streamed or whole."""
    client = server.client()
    if stream:
        return "".join(chunk.choices[0].text for chunk in client.completions.create(
            model="x", prompt=prompt, max_tokens=max_tokens, stream=True))
    return client.completions.create(model="x", prompt=prompt,
                                     max_tokens=max_tokens).choices[0].text


def drop_stream(port: int, prompt: str, max_tokens: int) -> None:
    """Start a streamed completion and go away after its first event."""
    conn, response = stream_raw(port, {"prompt": prompt, "max_tokens": max_tokens})
    read_event(response)
    conn.close()
