"""Beyond one machine (`pytest -m slow`): the target spread over llama.cpp RPC servers on
loopback. Needs an RPC-enabled llama-cpp-python (a Python with it: $LSD_RPC_PYTHON, default
~/.cache/lsd-peers/rpc-venv/bin/python) and rpc-server from the same llama.cpp
($LSD_RPC_SERVER, default ~/.cache/lsd-peers/build/bin/ggml-rpc-server); docs/devices.md says
how to build both. Skipped, with the reason, without them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
import serving

pytestmark = pytest.mark.slow

PEERS = Path(os.environ.get("LSD_PEERS_DIR", "~/.cache/lsd-peers")).expanduser()
RPC_PYTHON = Path(os.environ.get("LSD_RPC_PYTHON", PEERS / "rpc-venv/bin/python"))
RPC_SERVER = Path(os.environ.get("LSD_RPC_SERVER", PEERS / "build/bin/ggml-rpc-server"))
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rpc_tools():
    if not RPC_SERVER.exists():
        pytest.skip(f"no rpc-server at {RPC_SERVER} (docs/devices.md: build it)")
    if not RPC_PYTHON.exists():
        pytest.skip(f"no RPC-enabled llama-cpp-python at {RPC_PYTHON} (docs/devices.md)")
    check = subprocess.run([str(RPC_PYTHON), "-c", "import llama_cpp, sys; "
                            "sys.exit(0 if llama_cpp.llama_supports_rpc() else 1)"])
    if check.returncode:
        pytest.skip(f"{RPC_PYTHON}'s llama-cpp-python has no RPC backend")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RpcServer:
    """One rpc-server on a loopback port, started and waited for: until it answers the RPC
    HELLO (its stdout is block-buffered in a pipe, so no line says it is ready)."""

    def __init__(self, port: int | None = None) -> None:
        from lsd_local.backend.devices import DeviceError, check_rpc_server

        self.port = port or free_port()
        self.process = subprocess.Popen([str(RPC_SERVER), "-p", str(self.port), "-t", "1"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                check_rpc_server(self.endpoint, timeout=1.0)
                return
            except DeviceError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"rpc-server on {self.port} did not start") from None
                time.sleep(0.05)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def two_servers(rpc_tools):
    servers = [RpcServer(), RpcServer()]
    yield servers
    for server in servers:
        server.kill()


def lsd_run(model: Path, *args: str) -> dict:
    """`lsd run --json` with the RPC-enabled Python (this checkout's code)."""
    proc = subprocess.run([str(RPC_PYTHON), "-m", "lsd_local", "run", "--json", "-m",
                           str(model), "--threads", "2", *args],
                          capture_output=True, text=True, env={**os.environ,
                                                               "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    return {**json.loads(proc.stdout), "stderr": proc.stderr}


def test_tiny_target_over_two_rpc_servers_answers_like_the_local_run(tiny_pair, two_servers):
    args = ["--ctx", "256", "--max-tokens", "40", "--drafter", "none", "the cat is"]
    local = lsd_run(tiny_pair[0], *args)
    spread = lsd_run(tiny_pair[0], "--rpc", ",".join(s.endpoint for s in two_servers), *args)
    assert spread["text"] == local["text"]
    assert local["placement"]["target"] == "CPU"
    where = spread["placement"]["target"]
    assert where == "3/3 layers on RPC0, RPC1", where


def test_qwen_strict_speculation_is_lossless_through_rpc(qwen_pair, two_servers):
    """The target over two rpc-servers, the draft model on the local CPU."""
    rpc = ",".join(s.endpoint for s in two_servers)
    base = ["--rpc", rpc, "--ctx", "2048", "--max-tokens", "48", "--tensor-split", "1,1",
            "--draft", str(qwen_pair[1]),
            "Write a Python function that checks whether a number is prime."]
    plain = lsd_run(qwen_pair[0], "--drafter", "none", *base)
    drafted = lsd_run(qwen_pair[0], "--drafter", "model", "-k", "4", *base)
    assert drafted["placement"] == {"target": "29/29 layers on RPC0, RPC1", "draft": "CPU"}
    # batched verification may flip a near-tie of the logits; on this prompt none does
    assert drafted["text"] == plain["text"]
    assert drafted["stats"]["accepted"] > 0


def test_a_lost_rpc_server_ends_the_request_and_the_engine_comes_back(tiny_pair, rpc_tools):
    server = RpcServer()
    with serving.Server(tiny_pair[0], "--rpc", server.endpoint, "--ctx", "1024",
                        env={"PYTHONPATH": str(REPO)}, python=str(RPC_PYTHON)) as srv:
        expected = srv.client().completions.create(model="x", prompt="the cat",
                                                   max_tokens=20).choices[0].text
        server.kill()  # llama.cpp aborts the engine process on its next RPC call
        _, response = serving.stream_raw(srv.port, {"prompt": "a dog", "max_tokens": 50})
        event = serving.read_event(response)
        while event is not None and "error" not in event:
            event = serving.read_event(response)
        assert "engine process died" in json.loads(event)["error"]["message"]
        server = RpcServer(server.port)  # the machine is back; a restart attempt finds it
        srv.wait_for("the engine process is back")
        answer = srv.client().completions.create(model="x", prompt="the cat", max_tokens=20)
        assert answer.choices[0].text == expected
        assert srv.process.poll() is None  # the server itself never went down
    server.kill()
