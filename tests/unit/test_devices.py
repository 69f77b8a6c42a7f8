"""Device choice without a GPU: 'auto' offload, device names, RPC endpoint pre-checks against
loopback sockets that behave like a closed port, a silent server, an HTTP server, an RPC
server of this protocol version and one of another."""

from __future__ import annotations

import socket
import time

import pytest
from fakerpc import FakeServer, http_answer, rpc_answer, silent_answer

from lsd_local.backend.devices import (
    Device,
    DeviceError,
    check_rpc_server,
    list_devices,
    offload_layers,
    parse_endpoint,
    select_devices,
)
from lsd_local.errors import ParameterError

CPU = Device("CPU", "a CPU", "CPU", "CPU", 8 << 30, 8 << 30)
CUDA0 = Device("CUDA0", "H100", "GPU", "CUDA", 70 << 30, 80 << 30)
CUDA1 = Device("CUDA1", "H100", "GPU", "CUDA", 70 << 30, 80 << 30)
RPC = Device("RPC0", "10.0.0.2:50052", "GPU", "RPC", 1 << 30, 1 << 30)
BLAS = Device("BLAS", "OpenBLAS", "ACCEL", "BLAS", 0, 0)


def test_auto_offloads_everything_only_where_a_gpu_may_take_layers():
    assert offload_layers("auto", None, [CPU, BLAS]) == 0  # a CPU build (RPC compiled or not)
    assert offload_layers("auto", None, [CPU, CUDA0]) == -1
    assert offload_layers("all", None, [CPU, CUDA0]) == -1
    assert offload_layers("auto", [], [CPU, CUDA0]) == 0  # --device none
    assert offload_layers("auto", None, [CPU, RPC]) == -1  # RPC servers are devices too
    assert offload_layers(12, None, [CPU]) == 12 and offload_layers(-1, [], [CPU]) == -1
    with pytest.raises(ParameterError, match="n_gpu_layers"):
        offload_layers("most", None, [CPU])


def test_device_names_follow_llama_cpp():
    devices = [CPU, CUDA0, CUDA1, RPC]
    assert select_devices(None, devices) is None and select_devices("", devices) is None
    assert select_devices("none", devices) == []
    assert select_devices("CUDA1,RPC0", devices) == [CUDA1, RPC]
    with pytest.raises(ParameterError) as info:
        select_devices("CUDA2", devices)
    assert "CUDA2" in str(info.value) and "CUDA0, CUDA1, RPC0" in str(info.value)
    with pytest.raises(ParameterError, match="'CPU'"):  # as in llama.cpp: the CPU is implied
        select_devices("CPU", devices)
    with pytest.raises(ParameterError, match="none in this build"):
        select_devices("CUDA0", [CPU])
    assert select_devices("cuda1", devices) == [CUDA1]  # any case, as ggml's by_name


def test_this_machine_lists_its_cpu():
    devices = list_devices(memory=True)
    assert devices[0].kind == "CPU" and devices[0].total > 0
    assert list_devices()[0].total == 0  # memory is asked only when wanted (RPC: see doc)


@pytest.mark.parametrize("endpoint", ["localhost", "host:", ":50052", "host:0", "h:70000",
                                      "h:port"])
def test_malformed_endpoints(endpoint):
    with pytest.raises(ParameterError, match="HOST:PORT"):
        parse_endpoint(endpoint)


def test_endpoints():
    assert parse_endpoint("10.0.0.2:50052") == ("10.0.0.2", 50052)
    assert parse_endpoint("gpu-box:50052") == ("gpu-box", 50052)
    for ipv6 in ("[::1]:50052", "::1:50052", "fe80::1:50052"):  # llama.cpp's client: IPv4
        with pytest.raises(ParameterError, match="IPv4"):
            parse_endpoint(ipv6)


def test_an_rpc_server_of_this_version_passes():
    server = FakeServer(rpc_answer(7))
    try:
        assert check_rpc_server(f"127.0.0.1:{server.port}") == (7, 0, 2)
    finally:
        server.close()


@pytest.mark.parametrize(("answer", "words"), [
    (rpc_answer(6), "speaks protocol 6.0.2"),
    (rpc_answer(7, 1), "speaks protocol 7.1.2"),  # a newer minor: llama.cpp would abort
    (http_answer, "is not a llama.cpp RPC server"),
    (silent_answer, "did not answer within"),
])
def test_bad_endpoints_are_one_clear_error_within_seconds(answer, words):
    server = FakeServer(answer)
    start = time.monotonic()
    try:
        with pytest.raises(DeviceError, match=words):
            check_rpc_server(f"127.0.0.1:{server.port}", timeout=0.5)
    finally:
        server.close()
    assert time.monotonic() - start < 5


def test_a_closed_port_is_one_clear_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: the port is closed
        with pytest.raises(DeviceError, match=f"cannot reach RPC server 127.0.0.1:{port}"):
            check_rpc_server(f"127.0.0.1:{port}", timeout=0.5)
