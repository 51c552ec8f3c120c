"""`waypost server` closes connections that stop in the middle of a request's headers
(`--header-timeout`), with real sockets against a real server process, while complete
requests on other connections are answered.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.cli import run
from tests.helpers.servers import WAYPOST, server

pytestmark = pytest.mark.timeout(240)

STALLED = 300  # connections left mid-headers at once
SAFETY = 60.0  # seconds a socket read may block before the test gives up on it


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    db = f"sqlite:///{tmp_path / 'connections.db'}"
    with server(tmp_path, db, "--api-only", "--header-timeout", "1") as url:
        yield url


def _connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(SAFETY)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes the connection (its read ends) without an answer."""
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    finally:
        sock.close()


def test_connections_stopped_mid_headers_are_closed_and_others_still_answered(
    base: str,
) -> None:
    stalled = []
    for n in range(STALLED):
        sock = _connect(base)
        # A request line and part of the headers, then nothing more.
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Part: {n}".encode())
        stalled.append(sock)
    silent = _connect(base)  # a connection that never sends a byte
    # While they wait, a complete request is answered at once.
    assert httpx.get(f"{base}/healthz", timeout=SAFETY).status_code == 200
    assert all(_closed_by_server(sock) for sock in stalled)
    assert _closed_by_server(silent)
    assert httpx.get(f"{base}/readyz", timeout=SAFETY).status_code == 200


def test_a_kept_alive_connection_stopping_in_its_next_request_is_closed(base: str) -> None:
    sock = _connect(base)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = b""
    while b'"ok"' not in answer:
        chunk = sock.recv(4096)
        assert chunk, answer
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")  # the next request stops mid-headers
    assert _closed_by_server(sock)


def test_headers_sent_in_pieces_within_the_timeout_are_answered(base: str) -> None:
    sock = _connect(base)
    for piece in (b"GET /hea", b"lthz HTTP/1.1\r\n", b"Host: x\r\n", b"Connection: close\r\n\r\n"):
        sock.sendall(piece)
    answer = b""
    while chunk := sock.recv(4096):
        answer += chunk
    sock.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:100]


def test_a_trusted_proxy_that_is_no_network_is_refused_at_start(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    proxies = ("--trusted-proxy", "10.0.0.0/8,proxy.example")
    proc = run([str(WAYPOST), "server", "--db", db, *proxies], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--trusted-proxy" in proc.stderr
    assert "not 'proxy.example'" in proc.stderr
