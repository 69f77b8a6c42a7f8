"""The devices this llama.cpp build sees (ggml's backend registry, through ctypes), where a
model may go, and llama.cpp's RPC servers as devices.

llama-cpp-python exposes no device API, so this calls libggml directly (the copy libllama
links). `llama_model_params.devices` is a NULL-terminated device list
(NULL: every device); llama-cpp-python leaves it unset, `device_array` fills it.
"""

from __future__ import annotations

import ctypes
import socket
import struct
from dataclasses import dataclass, field

import llama_cpp as ll

from ..errors import LsdError, ParameterError

DEVICE_KINDS = ("CPU", "GPU", "IGPU", "ACCEL", "META")  # enum ggml_backend_dev_type
OFFLOAD_KINDS = ("GPU", "IGPU")  # devices that take layers (RPC devices report GPU)
RPC_CMD_HELLO = 14  # ggml-rpc.cpp: always 14, in every protocol version
RPC_CONN_CAPS_SIZE = 24  # ggml-rpc transport.h (protocol 7)
RPC_PROTO_MAJOR = 7  # ggml-rpc.h of the vendored llama.cpp this package is built against
RPC_PROTO_MINOR = 0  # llama.cpp aborts on a server of a higher minor version
RPC_TIMEOUT = 3.0  # seconds a pre-check waits for a connection or an answer
RPC_INSTALL = ('CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall --no-cache-dir '
               "llama-cpp-python")


class DeviceError(LsdError):
    """A device or RPC server that cannot be used (the message says which and why)."""


@dataclass(frozen=True)
class Device:
    """One device of ggml's registry."""

    name: str  # llama.cpp's name: CPU, CUDA0, Metal, RPC0 (description: its host:port), ...
    description: str
    kind: str  # one of DEVICE_KINDS
    backend: str  # the registry it belongs to: CPU, CUDA, Metal, RPC, ...
    free: int  # bytes
    total: int
    handle: int = field(default=0, compare=False, repr=False)  # ggml_backend_dev_t

    @property
    def takes_layers(self) -> bool:
        return self.kind in OFFLOAD_KINDS


_lib: ctypes.CDLL | None = None  # libggml, bound on first use (never at import)


def _ggml() -> ctypes.CDLL:
    """libggml as llama_cpp loaded it, with the signatures used here."""
    global _lib
    if _lib is not None:
        return _lib
    # The symbols are looked up through libllama's own handle (dlsym searches a library's
    # dependencies too), so that they are the libggml copy libllama uses: a wheel holds
    # libggml.so, .so.0 and .so.0.x as separate files, and opening libggml.so by name would
    # load a second registry that llama.cpp never reads.
    lib = ctypes.CDLL(ll.llama_cpp._lib._name)
    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    signatures = {
        "ggml_backend_dev_count": ([], sz), "ggml_backend_dev_get": ([sz], vp),
        "ggml_backend_dev_name": ([vp], cp), "ggml_backend_dev_description": ([vp], cp),
        "ggml_backend_dev_type": ([vp], ctypes.c_int),
        "ggml_backend_dev_memory": ([vp, ctypes.POINTER(sz), ctypes.POINTER(sz)], None),
        "ggml_backend_dev_backend_reg": ([vp], vp), "ggml_backend_reg_name": ([vp], cp),
        "ggml_backend_reg_by_name": ([cp], vp), "ggml_backend_register": ([vp], None),
        "ggml_backend_reg_get_proc_address": ([vp, cp], vp),
        "ggml_backend_load_all": ([], None),
    }
    for name, (argtypes, restype) in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype
    ll.llama_backend_init()
    if lib.ggml_backend_dev_count() == 0:  # a build whose backends are loadable modules
        lib.ggml_backend_load_all()
    _lib = lib
    return lib


def list_devices(memory: bool = False) -> list[Device]:
    """Every device of the registry, in registry order (RPC servers once added). Memory is
    asked only with `memory`: an RPC device answers it over a new connection, with no
    timeout and an abort on failure (`lsd devices` asks; placement decisions do not)."""
    lib = _ggml()
    devices = []
    for i in range(lib.ggml_backend_dev_count()):
        handle = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        if memory:
            lib.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(handle)
        devices.append(Device(
            name=lib.ggml_backend_dev_name(handle).decode(),
            description=(lib.ggml_backend_dev_description(handle) or b"").decode(),
            kind=DEVICE_KINDS[kind] if 0 <= kind < len(DEVICE_KINDS) else str(kind),
            backend=lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(handle)).decode(),
            free=free.value, total=total.value, handle=handle))
    return devices


def select_devices(spec: str | None, devices: list[Device]) -> list[Device] | None:
    """The devices a model may use: None (all of them), [] ("none": the CPU only), or the
    named ones (llama.cpp's `--device` syntax: comma-separated names)."""
    if spec is None or spec.strip() == "":
        return None
    names = [name.strip() for name in spec.split(",") if name.strip()]
    if names == ["none"]:
        return []
    by_name = {device.name.lower(): device for device in devices}  # as ggml: any case
    chosen = []
    for name in names:
        device = by_name.get(name.lower())
        if device is None or not device.takes_layers:
            usable = ", ".join(d.name for d in devices if d.takes_layers) or "none in this build"
            raise ParameterError(f"invalid device: {name!r} (devices that take layers: "
                                 f"{usable}; 'none' keeps the model on the CPU)", param="device")
        chosen.append(device)
    return chosen


def offload_layers(n_gpu_layers: int | str, allowed: list[Device] | None,
                   devices: list[Device]) -> int:
    """llama.cpp's n_gpu_layers for a setting: "auto" (and "all") put every layer on the
    allowed devices when one of them takes layers, else none; an integer is kept (-1: all)."""
    if isinstance(n_gpu_layers, int):
        return n_gpu_layers
    if n_gpu_layers not in ("auto", "all"):
        raise ParameterError(f"invalid n_gpu_layers: {n_gpu_layers!r} (an integer, 'auto' or "
                             "'all')", param="n_gpu_layers")
    pool = devices if allowed is None else allowed
    return -1 if any(device.takes_layers for device in pool) else 0


def device_array(allowed: list[Device] | None):
    """The NULL-terminated ggml_backend_dev_t array for llama_model_params.devices (None:
    leave it NULL, every device)."""
    if allowed is None:
        return None
    return (ctypes.c_void_p * (len(allowed) + 1))(*[d.handle for d in allowed], None)


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """host:port -> (host, port); ParameterError when malformed. llama.cpp's RPC client is
    IPv4 only and splits at the first ':', so an IPv6 address is refused here."""
    host, sep, port = endpoint.strip().partition(":")
    if ":" in port or "[" in host:
        raise ParameterError(f"invalid rpc: {endpoint!r} (llama.cpp's RPC client speaks IPv4 "
                             "only: HOST:PORT with an IPv4 address or a host name)",
                             param="rpc")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ParameterError(f"invalid rpc: {endpoint!r} (expected HOST:PORT)", param="rpc")
    return host, int(port)


def check_rpc_server(endpoint: str, timeout: float = RPC_TIMEOUT) -> tuple[int, int, int]:
    """Connect and say HELLO as llama.cpp's client does; returns the server's protocol
    version. DeviceError for an endpoint that is closed, silent, not an RPC server or
    speaks another protocol version: llama.cpp itself would abort the process on each."""
    host, port = parse_endpoint(endpoint)
    hello = struct.pack("<BQ", RPC_CMD_HELLO, RPC_CONN_CAPS_SIZE) + bytes(RPC_CONN_CAPS_SIZE)
    expected = 4 + RPC_CONN_CAPS_SIZE  # major, minor, patch, padding, conn_caps
    try:
        address = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
        with socket.create_connection(address, timeout=timeout) as sock:  # IPv4, as llama.cpp
            sock.settimeout(timeout)
            sock.sendall(hello)
            answer = _recv_exactly(sock, 8 + expected)
    except TimeoutError:
        raise DeviceError(f"RPC server {endpoint} did not answer within {timeout:.0f} s (it "
                          "serves one client at a time: busy with another? or not an "
                          "rpc-server)") from None
    except OSError as exc:
        raise DeviceError(f"cannot reach RPC server {endpoint}: "
                          f"{exc.strerror or exc}") from None
    size = struct.unpack("<Q", answer[:8])[0] if len(answer) >= 8 else None
    if size != expected or len(answer) != 8 + expected:
        raise DeviceError(f"{endpoint} is not a llama.cpp RPC server of this version (its "
                          "answer to HELLO is not one)")
    major, minor, patch = answer[8], answer[9], answer[10]
    if major != RPC_PROTO_MAJOR or minor > RPC_PROTO_MINOR:
        raise DeviceError(f"RPC server {endpoint} speaks protocol {major}.{minor}.{patch}; "
                          f"this llama.cpp speaks {RPC_PROTO_MAJOR}.{RPC_PROTO_MINOR}: build "
                          "rpc-server from the same llama.cpp version as llama-cpp-python")
    return major, minor, patch


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def add_rpc_servers(endpoints: list[str]) -> list[Device]:
    """Check each endpoint, then register it with ggml as a device (what llama.cpp's --rpc
    does); returns the devices the servers added. An endpoint this process added before is
    neither checked nor added again."""
    lib = _ggml()
    known = list_devices()
    before = {d.name for d in known}
    # one added before is in use by this process: rpc-server serves one client at a time,
    # so a second connection to check it would wait (an RPC device's description is its
    # endpoint)
    fresh = [e for e in dict.fromkeys(endpoints)
             if not any(d.backend == "RPC" and d.description == e for d in known)]
    for endpoint in fresh:
        check_rpc_server(endpoint)
    if not fresh:
        return []
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise DeviceError(f"this llama-cpp-python build has no RPC backend; rebuild it with "
                          f"{RPC_INSTALL}")
    add_server = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
    if not add_server:
        raise DeviceError("this llama.cpp build's RPC backend cannot add servers")
    add = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(add_server)
    for endpoint in fresh:
        server_reg = add(endpoint.encode())
        if not server_reg:
            raise DeviceError(f"llama.cpp could not add RPC server {endpoint}")
        lib.ggml_backend_register(server_reg)
    return [d for d in list_devices() if d.name not in before]
