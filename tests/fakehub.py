"""A local HTTP server that answers like the Hugging Face Hub's `resolve` endpoint (HEAD with
commit/etag/size headers, GET with Range) and its model listing, with faults on demand: drop the
connection after N bytes (per GET), ignore Range, damage bytes, redirect to a CDN, run a hook
mid-file and hold the rest back. huggingface_hub and lsd's downloader talk to it through
HF_ENDPOINT, so downloads are tested end to end without the internet."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """files: {"org/name/file.gguf": bytes}."""

    def __init__(self, files: dict[str, bytes], host: str = "127.0.0.1") -> None:
        self.files = files
        # base URL of another server (a CDN): HEAD answers 302 there with the Hub's X-Linked-*
        # headers, as the Hub does for LFS files; with redirect_gets_only, only GETs do
        self.redirect_to: str | None = None
        self.redirect_gets_only = False
        self.auth: list[tuple[str, str | None]] = []  # (method, Authorization header)
        self.drops: list[int] = []  # each GET takes the next: close after that many bytes
        self.refusals: list[int] = []  # each GET takes the next: answer with that status
        self.ignore_range = False
        self.damage_body = False  # GETs send one byte changed (the etag stays the true one)
        self.xet = False  # HEAD says the file is Xet-backed (X-Xet-Hash, refresh route)
        self.commit = COMMIT  # what main points at (a request for a commit gets that one)
        self.etag: str | None = None  # an ETag to send instead of the file's sha256
        self.delay = 0.0  # seconds between 64 KiB chunks
        self.hook: tuple[int, object] | None = None  # (bytes, callable): run once when sent
        self.hold = threading.Event()  # after the hook: send nothing more until it is set
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        self.server = ThreadingHTTPServer((host, 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def gets(self) -> list[str | None]:
        return [r for method, _, r in self.requests if method == "GET"]

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _file(self) -> bytes | None:
                match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/[^/]+/(.+)", self.path)
                return hub.files.get(f"{match[1]}/{match[2]}") if match else None

            def _headers(self, data: bytes, status: int, length: int, extra=()) -> None:
                self.send_response(status)
                wanted = re.search(r"/resolve/([0-9a-f]{40})/", self.path)
                self.send_header("X-Repo-Commit", wanted[1] if wanted else hub.commit)
                self.send_header("ETag", f'"{hub.etag or hashlib.sha256(data).hexdigest()}"')
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(length))
                for key, value in extra:
                    self.send_header(key, value)
                self.end_headers()

            def _status(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _missing(self, code: str = "EntryNotFound") -> None:
                self.send_response(404)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _redirect(self, data: bytes) -> None:
                self.send_response(302)
                self.send_header("Location", hub.redirect_to + self.path)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("X-Linked-Etag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self) -> None:
                hub.requests.append(("HEAD", self.path, None))
                hub.auth.append(("HEAD", self.headers.get("Authorization")))
                data = self._file()
                if data is None:
                    return self._missing()
                if hub.redirect_to and not hub.redirect_gets_only:
                    return self._redirect(data)
                xet = [("X-Xet-Hash", "ab" * 32), ("X-Xet-Refresh-Route",
                                                    f"{hub.endpoint}/api/xet-token")]
                self._headers(data, 200, len(data), xet if hub.xet else ())

            def _model_info(self) -> bool:
                """GET /api/models/{org}/{name}: the repo's files (huggingface_hub's
                model_info), for resolving owner/repo[:QUANT] names."""
                match = re.fullmatch(r"/api/models/([^/]+/[^/?]+)(?:/revision/main)?(\?.*)?",
                                     self.path)
                if not match:
                    return False
                files = {k.split("/", 2)[2]: v for k, v in hub.files.items()
                         if k.startswith(match[1] + "/")}
                if not files:
                    self._missing("RepoNotFound")
                    return True
                body = json.dumps({"id": match[1], "sha": COMMIT, "siblings": [
                    {"rfilename": name, "size": len(data)} for name, data in files.items()]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())
                return True

            def do_GET(self) -> None:
                if self._model_info():
                    return
                wanted = self.headers.get("Range")
                hub.requests.append(("GET", self.path, wanted))
                hub.auth.append(("GET", self.headers.get("Authorization")))
                data = self._file()
                if data is None:
                    return self._missing()
                if hub.redirect_to:
                    return self._redirect(data)
                sent_data = data[:-1] + bytes([data[-1] ^ 1]) if hub.damage_body else data
                if hub.refusals:  # e.g. 403: an expired signed URL
                    return self._status(hub.refusals.pop(0))
                start = 0
                if wanted and not hub.ignore_range:
                    start = int(re.fullmatch(r"bytes=(\d+)-", wanted)[1])
                    if start >= len(data):
                        return self._status(416)
                    body = sent_data[start:]
                    self._headers(data, 206, len(body),
                                  [("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")])
                else:
                    body = sent_data
                    self._headers(data, 200, len(body))
                limit = hub.drops.pop(0) if hub.drops else len(body)
                sent = 0
                while sent < min(limit, len(body)):
                    chunk = body[sent:min(sent + 65536, limit)]
                    try:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                    except OSError:
                        return
                    sent += len(chunk)
                    if hub.hook is not None and sent >= hub.hook[0]:
                        hook, hub.hook = hub.hook[1], None
                        hook()
                        hub.hold.wait(60)  # the client stays mid-file until the test says
                    if hub.delay:
                        time.sleep(hub.delay)
                if sent < len(body):
                    self.close_connection = True
                    self.connection.close()

        return Handler
