"""The Host, Origin and Content-Type checks of lsd serve (server/guard.py) on hand-made
headers: what a hostile page can send is refused, what the user's own clients send is not."""

from __future__ import annotations

import socket

import pytest

from lsd_local.server import guard

NAMES = guard.host_names("127.0.0.1", ("lsd.example.org", ".corp.test"))
SETTINGS = guard.GuardSettings(NAMES, ("http://app.test:3000",))


def headers(**values: str) -> list[tuple[bytes, bytes]]:
    return [(name.replace("_", "-").encode(), value.encode()) for name, value in values.items()]


@pytest.mark.parametrize("value,host", [
    ("127.0.0.1:8080", "127.0.0.1"), ("[::1]:8080", "::1"), ("LOCALHOST.", "localhost"),
    ("example.com", "example.com"), ("::1", "::1"), ("[::1", "[::1"),
    ("[::1]evil.example", "[::1]evil.example"), ("[::1]:x", "[::1]:x")])
def test_split_host(value, host):
    assert guard.split_host(value) == host


@pytest.mark.parametrize("host", [
    "127.0.0.1:8080", "localhost:8080", "[::1]:8080", "192.168.1.20:8080", "app.localhost",
    "lsd.example.org", "a.corp.test:443", "corp.test", socket.gethostname(), ""])
def test_the_users_own_names_and_addresses_pass(host):
    assert guard.refusal(headers(host=host), "GET", SETTINGS) is None


@pytest.mark.parametrize("host", ["evil.example:8080", "127.0.0.1.evil.example",
                                  "localhost.evil.example", "example.org", "xcorp.test",
                                  "[::1]evil.example"])
def test_a_foreign_host_name_is_refused(host):
    refused = guard.refusal(headers(host=host), "GET", SETTINGS)
    assert refused is not None and refused.status == 403 and "--allowed-host" in str(refused)


def test_a_star_allows_any_host():
    settings = guard.GuardSettings(guard.host_names("0.0.0.0", ("*",)), ())
    assert guard.refusal(headers(host="anything.example"), "GET", settings) is None


@pytest.mark.parametrize("origin,allowed", [
    ("http://127.0.0.1:8080", True),  # the chat page itself
    ("https://127.0.0.1:8080", True),
    ("http://app.test:3000", True),  # --cors-origin
    ("http://localhost:8080", False),  # another origin, although on this machine
    ("http://127.0.0.1:9999", False), ("https://evil.example", False), ("null", False),
])
def test_only_the_servers_own_origin_and_named_ones_pass(origin, allowed):
    refused = guard.refusal(headers(host="127.0.0.1:8080", origin=origin,
                                    content_type="application/json"), "POST", SETTINGS)
    assert (refused is None) is allowed
    if not allowed:
        assert refused.status == 403 and "--cors-origin" in str(refused)


@pytest.mark.parametrize("content_type,allowed", [
    ("application/json", True), ("application/json; charset=utf-8", True),
    ("Application/JSON", True), ("text/plain", False), ("text/plain;charset=UTF-8", False),
    ("application/x-www-form-urlencoded", False), ("multipart/form-data; boundary=x", False),
    (None, False)])
def test_post_bodies_must_be_json(content_type, allowed):
    given = headers(host="127.0.0.1:8080") if content_type is None else headers(
        host="127.0.0.1:8080", content_type=content_type)
    refused = guard.refusal(given, "POST", SETTINGS)
    assert (refused is None) is allowed
    if not allowed:
        assert refused.status == 415
    assert guard.refusal(given, "GET", SETTINGS) is None  # GETs carry no body


@pytest.mark.parametrize("name", ["Host", "Origin", "Content-Type"])
def test_a_checked_header_given_twice_is_refused(name):
    """Starlette and its middleware may read different copies of a doubled header."""
    given = headers(host="127.0.0.1:8080", content_type="application/json") + [
        (name.encode(), b"http://127.0.0.1:8080"), (name.lower().encode(), b"x")]
    refused = guard.refusal(given, "POST", SETTINGS)
    assert refused is not None and refused.status == 400 and name.lower() in str(refused)
