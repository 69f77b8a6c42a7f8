"""Loopback TCP servers that answer like llama.cpp's rpc-server (of some protocol version), an
HTTP server, or nothing: for the RPC pre-check tests."""

from __future__ import annotations

import socket
import struct
import threading
import time

from lsd_local.backend.devices import RPC_CONN_CAPS_SIZE


class FakeServer:
    """A loopback TCP server; `answer(conn)` decides what it does with each connection."""

    def __init__(self, answer) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.answer = answer
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.answer(conn)

    def close(self) -> None:
        self.sock.close()


def rpc_answer(major: int, minor: int = 0):
    def answer(conn) -> None:
        request = b""
        while len(request) < 9 + RPC_CONN_CAPS_SIZE:
            request += conn.recv(64)
        assert request[0] == 14 and struct.unpack("<Q", request[1:9])[0] == RPC_CONN_CAPS_SIZE
        conn.sendall(struct.pack("<Q", 4 + RPC_CONN_CAPS_SIZE) + bytes([major, minor, 2, 0])
                     + bytes(RPC_CONN_CAPS_SIZE))
    return answer


def http_answer(conn) -> None:
    conn.recv(1024)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


def silent_answer(conn) -> None:
    conn.recv(1024)
    time.sleep(3)
