"""Only the user's own clients reach `lsd serve` (docs/server.md, Security).

Any web page the user visits can send requests to localhost. Three checks, before routing:
- `Host`: a page that rebinds its own name to 127.0.0.1 (DNS rebinding) reaches the server
  under that name and may read the answers as same-origin. Allowed: an IP address (rebinding
  needs a name), `localhost` and `*.localhost`, the name the server was bound to, this
  machine's host name, and `--allowed-host` names; else 403.
- `Origin`: a browser names the page that sends a request. Allowed: none (not a browser,
  or a navigation), the server's own origin (the chat page), and `--cors-origin` origins;
  else 403.
- `Content-Type` of a POST: `application/json` only, else 415. A page may send `text/plain`,
  a form or no type at all without a CORS preflight; JSON needs one, which lsd answers only
  for `--cors-origin` origins.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from starlette.responses import JSONResponse

from .protocol import RequestError

LOOPBACK_NAMES = ("localhost",)


def split_host(value: str) -> str:
    """The host name or address of a `Host` header value ("[::1]:8080" -> "::1"), lower case,
    without a trailing dot."""
    value = value.strip().lower()
    if value.startswith("["):  # "[::1]" or "[::1]:8080", nothing else after the bracket
        close = value.find("]")
        rest = value[close + 1:] if close >= 0 else ""
        if close < 0 or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return value  # (not an address: a name that is checked as one)
        return value[1:close]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_names(bound_host: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The names a `Host` header may carry besides addresses and *.localhost."""
    names = {*LOOPBACK_NAMES, *(name.lower().rstrip(".") for name in allowed)}
    if bound_host and not is_address(bound_host):
        names.add(bound_host.lower().rstrip("."))
    machine = socket.gethostname().lower()
    if machine:
        names |= {machine, f"{machine}.local"}
    return tuple(sorted(names))


def host_allowed(host: str, names: tuple[str, ...]) -> bool:
    if not host or is_address(host) or host.endswith(".localhost") or "*" in names:
        return True
    return host in names or any(name.startswith(".") and (host.endswith(name) or
                                                          host == name[1:]) for name in names)


def origin_allowed(origin: str, host_header: str, cors_origins: tuple[str, ...]) -> bool:
    """A browser's `Origin`: the server's own (same scheme-less host and port as `Host`), or
    one that --cors-origin names."""
    origin = origin.strip()
    if "*" in cors_origins or origin in cors_origins:
        return True
    scheme, _, netloc = origin.lower().partition("://")
    return scheme in ("http", "https") and bool(netloc) and netloc == host_header.lower()


def is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


@dataclass(frozen=True)
class GuardSettings:
    """What the guard lets through (built once, from lsd serve's flags)."""

    names: tuple[str, ...]  # host names allowed besides addresses and *.localhost
    cors_origins: tuple[str, ...]


CHECKED = (b"host", b"origin", b"content-type")


def refusal(raw_headers: list[tuple[bytes, bytes]], method: str, settings: GuardSettings
            ) -> RequestError | None:
    """Why a request is refused (None: it passes). `raw_headers`: the ASGI scope's."""
    names = [name.lower() for name, _ in raw_headers]
    doubled = [name.decode() for name in CHECKED if names.count(name) > 1]
    if doubled:  # (servers and middleware may read different copies)
        return RequestError(400, f"the {doubled[0]} header is given more than once")
    headers = {name.lower(): value for name, value in raw_headers}
    host_header = headers.get(b"host", b"").decode("latin-1")
    if not host_allowed(split_host(host_header), settings.names):
        return RequestError(403, f"Host {host_header[:100]!r} is not allowed: lsd serve answers "
                            "its own names and addresses (--allowed-host NAME adds one)",
                            kind="permission_error")
    origin = headers.get(b"origin")
    if origin is not None and not origin_allowed(origin.decode("latin-1"), host_header,
                                                 settings.cors_origins):
        return RequestError(403, f"cross-origin requests from {origin.decode('latin-1')[:100]!r}"
                            " are refused (--cors-origin ORIGIN allows a page)",
                            kind="permission_error")
    if method == "POST" and not is_json(headers.get(b"content-type", b"").decode("latin-1")):
        return RequestError(415, "request bodies must be JSON: send Content-Type: "
                            "application/json")
    return None


class Guard:
    """ASGI middleware that answers a refused request with OpenAI's error object."""

    def __init__(self, app, settings: GuardSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket"):
            refused = refusal(scope["headers"], scope.get("method", "GET"), self.settings)
            if refused is not None and scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            if refused is not None:
                response = JSONResponse(refused.body(), status_code=refused.status)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
