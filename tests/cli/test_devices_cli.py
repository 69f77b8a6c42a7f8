"""Devices from the command line: `lsd devices`, where each model runs, llama.cpp's flag
spellings, bad device names and RPC servers as one-line errors."""

from __future__ import annotations

import json
import socket

import llama_cpp
import pytest
from click.testing import CliRunner
from fakerpc import FakeServer, rpc_answer

from lsd_local.cli import cli


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_devices_lists_the_cpu():
    result = invoke("devices")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].split()[:3] == ["NAME", "TYPE", "BACKEND"]
    assert any(line.split()[:2] == ["CPU", "CPU"] for line in result.stdout.splitlines())
    rows = [json.loads(line) for line in invoke("devices", "--json").stdout.splitlines()]
    assert rows[0]["type"] == "CPU" and rows[0]["total_bytes"] > 0


def test_llama_cpp_spellings_give_the_same_answer(tiny_pair):
    # (prompt lookup: auto's choices follow measured timings and the draft model's depend on
    # whether its kernels are compiled yet; with sampling, another draft consumes the seeded
    # randomness otherwise: lossless in distribution, not identical. The draft flags are
    # still parsed and the draft model loaded.)
    ours = invoke("run", "--json", "-m", tiny_pair[0], "--draft", tiny_pair[1], "--ctx", "256",
                  "--drafter", "lookup",
                  "--threads", "2", "--max-tokens", "12", "--seed", "3", "--temperature",
                  "0.8", "--n-gpu-layers", "0", "--draft-n-gpu-layers", "0", "--p-min", "0.5",
                  "--no-repack", "the cat")
    theirs = invoke("run", "--json", "-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "256",
                    "--drafter", "lookup",
                    "-t", "2", "-n", "12", "-s", "3", "--temp", "0.8", "-ngl", "0", "-ngld",
                    "0", "-sm", "layer", "-mg", "0", "--draft-p-min", "0.5", "-nr", "the cat")
    assert ours.exit_code == theirs.exit_code == 0, theirs.output
    assert json.loads(ours.stdout)["text"] == json.loads(theirs.stdout)["text"]
    assert json.loads(theirs.stdout)["stats"]["generated_tokens"] == 12


def test_help_shows_one_spelling():
    text = invoke("run", "--help").stdout
    assert "--n-gpu-layers" in text and "--temperature" in text and "--ctx" in text
    for alias in ("-ngl", "--temp ", "-md", "-ngld", "-devd", "--ctx-size", "--draft-p-min",
                  "-nr"):
        assert alias not in text, alias


def test_placement_is_said_once_and_in_json(tiny_pair):
    result = invoke("run", "--json", "-m", tiny_pair[0], "--draft", tiny_pair[1], "--drafter",
                    "model", "--ctx", "256", "--max-tokens", "4", "the cat")
    assert result.exit_code == 0, result.output
    assert "placement: target CPU; draft CPU" in result.stderr
    assert json.loads(result.stdout)["placement"] == {"target": "CPU", "draft": "CPU"}


@pytest.mark.parametrize("option", ["--device", "--draft-device", "-dev"])
def test_unknown_device_names_the_ones_that_exist(tiny_pair, option):
    result = invoke("run", "-m", tiny_pair[0], "--draft", tiny_pair[1], "--drafter", "model",
                    "--ctx", "256", option, "CUDA7", "hi")
    assert result.exit_code == 2 and "invalid device: 'CUDA7'" in result.output
    assert "Traceback" not in result.output


def test_device_none_keeps_the_model_on_the_cpu(tiny_pair):
    result = invoke("run", "-m", tiny_pair[0], "--ctx", "256", "--device", "none",
                    "--max-tokens", "3", "hi")
    assert result.exit_code == 0 and "placement: target CPU" in result.stderr


def test_rpc_endpoints_are_checked_before_llama_cpp_sees_them(tiny_pair):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: a closed port
        port = sock.getsockname()[1]
        result = invoke("run", "-m", tiny_pair[0], "--ctx", "256", "--rpc",
                        f"127.0.0.1:{port}", "hi")
    assert result.exit_code == 1
    assert f"cannot reach RPC server 127.0.0.1:{port}" in result.output
    result = invoke("run", "-m", tiny_pair[0], "--rpc", "nowhere", "hi")
    assert result.exit_code == 2 and "HOST:PORT" in result.output


@pytest.mark.skipif(llama_cpp.llama_supports_rpc(), reason="this llama-cpp-python has RPC")
def test_rpc_without_an_rpc_build_names_the_install_command(tiny_pair):
    server = FakeServer(rpc_answer(7))  # a server that passes the check
    try:
        result = invoke("run", "-m", tiny_pair[0], "--ctx", "256", "--rpc",
                        f"127.0.0.1:{server.port}", "hi")
    finally:
        server.close()
    assert result.exit_code == 1
    assert 'CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall' in result.output


def test_a_tensor_split_longer_than_llama_cpp_reads_is_refused(tiny_pair):
    import llama_cpp

    too_many = ",".join(["1"] * (llama_cpp.llama_max_devices() + 1))
    result = invoke("run", "-m", tiny_pair[0], "--ctx", "256", "-ts", too_many, "hi")
    assert result.exit_code == 2 and "invalid tensor_split" in result.output
    result = invoke("run", "-m", tiny_pair[0], "--ctx", "256", "-ts", "3,1", "--max-tokens",
                    "2", "hi")  # shorter lists are padded with zeros for llama.cpp
    assert result.exit_code == 0, result.output
