"""The outbound HTTP client against scripted raw answers, and the scrubbing of credentials."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections.abc import Iterator

import pytest

from waypost.features.outbound import ProtocolError, Target, exchange, scrub


class RawServer:
    """Answers every connection with the given bytes, then closes it; keeps what it read."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data)
                conn.sendall(self.answer)

    def close(self) -> None:
        self.stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def raw() -> Iterator[list[RawServer]]:
    servers: list[RawServer] = []
    yield servers
    for server in servers:
        server.close()


def fetch(raw: list[RawServer], answer: bytes, limit: int = 1000) -> tuple[int, bytes]:
    server = RawServer(answer)
    raw.append(server)
    target = Target.parse(f"http://127.0.0.1:{server.port}/p?q=1")
    response = asyncio.run(exchange(target, "GET", {"X-A": "b"}, None, limit=limit))
    return response.status, response.body


def test_the_request_is_http_11_with_host_and_connection_close(raw: list[RawServer]) -> None:
    fetch(raw, b"HTTP/1.1 204 No Content\r\n\r\n")
    head = raw[0].requests[0].decode()
    lines = head.split("\r\n")
    assert lines[0] == "GET /p?q=1 HTTP/1.1"
    assert f"Host: 127.0.0.1:{raw[0].port}" in lines
    assert "X-A: b" in lines and "Connection: close" in lines


@pytest.mark.parametrize(
    ("answer", "status", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello-and-more", 200, b"hello"),
        (b"HTTP/1.0 201 Created\r\n\r\nuntil the end", 201, b"until the end"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nTrailer: x\r\n\r\n",
            200,
            b"hello!",
        ),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok",
            202,
            b"ok",
        ),
        (b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n", 204, b""),
    ],
)
def test_answers_are_read(raw: list[RawServer], answer: bytes, status: int, body: bytes) -> None:
    assert fetch(raw, answer) == (status, body)


def test_a_body_is_read_only_up_to_the_limit_and_one_byte(raw: list[RawServer]) -> None:
    big = b"x" * 5000
    assert fetch(raw, b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + big, 10)[1] == b"x" * 11
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n" + big + b"\r\n0\r\n\r\n"
    )
    assert fetch(raw, chunked, 10)[1] == b"x" * 11
    assert fetch(raw, b"HTTP/1.1 200 OK\r\n\r\n" + big, 10)[1] == b"x" * 11


@pytest.mark.parametrize(
    "answer",
    [
        b"",
        b"SMTP ready\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 70000 + b"\r\n\r\n",
    ],
)
def test_a_malformed_answer_is_a_protocol_error(raw: list[RawServer], answer: bytes) -> None:
    with pytest.raises(ProtocolError):
        fetch(raw, answer)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://host/", "http(s)"),
        ("http://user:pw@host/", "credentials"),
        ("http://host:99999/", "port"),
        ("http://host/a b", "percent-encode"),
        ("http://host/caf\u00e9", "percent-encode"),
    ],
)
def test_unusable_urls_are_refused_without_quoting_them(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)) as caught:
        Target.parse(url)
    assert "pw" not in str(caught.value)


def test_a_url_has_one_normal_form() -> None:
    for url in ("HTTPS://Example.COM:443/x?a=1#frag", "https://example.com./x?a=1"):
        assert Target.parse(url).url == "https://example.com/x?a=1"
    assert Target.parse("http://[::1]:8080").url == "http://[::1]:8080/"
    assert Target.parse("http://b\u00fccher.example/").host == "xn--bcher-kva.example"


TOKEN = "Fz2mQk4VbXc9.Ts8uLw0pRq3yZa6NdEe1GhJk7Mn5Bv"


@pytest.mark.parametrize(
    "text",
    [
        f"POST https://x/approve?token={TOKEN} failed",
        f"echo: {TOKEN[:20]}",  # cut short by a truncated message
        f"...{TOKEN[-15:]} and more",
        f'{{"approve_token": "{TOKEN}"}}',
    ],
)
def test_scrub_cuts_out_credentials_and_pieces_of_them(text: str) -> None:
    out = scrub(text, [TOKEN])
    assert "[redacted]" in out
    for i in range(len(TOKEN) - 12):
        assert TOKEN[i : i + 12] not in out


def test_scrub_leaves_other_text_and_handles_short_secrets() -> None:
    assert scrub("nothing to see", [TOKEN]) == "nothing to see"
    assert scrub("key=abc123, again abc123", ["abc123"]) == "key=[redacted], again [redacted]"
    assert scrub("x", ["", TOKEN]) == "x"
