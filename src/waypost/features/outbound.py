"""Outbound HTTP: one request to one origin, under one deadline, to a checked address.

Used by `http` steps and by the webhook sender. Written on asyncio streams
rather than urllib for two reasons:

- A deadline covers the whole exchange: resolving, connecting, TLS, sending
  and every byte of the answer. The caller wraps `exchange` in
  `asyncio.timeout`; cancelling it closes the socket at once. A blocking read
  on a thread honours only a per-read timeout, so a server trickling one byte
  at a time held the thread for ever.
- The connection goes to an address the caller has already checked, while the
  URL's host is kept for TLS (SNI and the certificate) and the Host header: a
  name cannot resolve to one address for the check and another for the
  connection.

The answer is read up to a byte limit. Redirects are not followed, no proxy is
used, and every request is sent with `Connection: close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.parser
import email.policy
import functools
import re
import socket
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, TypeVar

from waypost.errors import ConfigurationError

from .scrubbing import scrub as scrub  # where the webhook sender and http steps take it

T = TypeVar("T")

_LINE_LIMIT = 64 * 1024  # one status or header line
_HEAD_LIMIT = 64 * 1024  # all header lines together
_MAX_HEADERS = 200
_BODY_METHODS = ("POST", "PUT", "PATCH")
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~\-]{1,100}")


class ProtocolError(Exception):
    """The answer was not well-formed HTTP/1.x (or ended early)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a URL points: scheme, host (lower case, IDNA), port, and the request target."""

    scheme: str
    host: str
    port: int
    request_target: str  # path and query, as sent on the request line

    @classmethod
    def parse(cls, url: str) -> Target:
        """Raise ValueError (whose message never quotes the URL) if it is not usable."""
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be http(s)://host/...")
        if parts.username is not None or parts.password is not None:
            # Also keeps "http://allowed@other/" from naming one host and reaching another.
            raise ValueError("must not hold credentials; send them as headers")
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            raise ValueError("has a bad port") from None
        try:
            host = parts.hostname.rstrip(".").encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise ValueError("has a host name that cannot be encoded") from None
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        if any(ord(ch) <= 0x20 or ord(ch) >= 0x7F for ch in target):
            raise ValueError("holds spaces, control or non-ASCII characters: percent-encode them")
        return cls(scheme, host, port, target)

    @property
    def default_port(self) -> bool:
        return self.port == (443 if self.scheme == "https" else 80)

    @property
    def authority(self) -> str:
        """host[:port] as in a Host header (IPv6 in brackets, the default port left out)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.default_port else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.authority}"

    @property
    def url(self) -> str:
        """The URL in one normal form: what signatures cover."""
        return self.origin + self.request_target


def origin_of(url: str) -> str:
    """scheme://host[:port] of a URL: paths are often secrets in themselves (chat webhooks)."""
    try:
        return Target.parse(url).origin
    except ValueError:
        parts = urllib.parse.urlsplit(url)
        return f"{parts.scheme}://{parts.hostname or ''}"


@dataclass(frozen=True, slots=True)
class Response:
    """An answer: status, headers and at most `limit + 1` bytes of the body."""

    status: int
    headers: Message
    body: bytes


class Resolver:
    """Looks host names up on threads of its own, at most `per_key` lookups per key at once.

    The system's resolver cannot be interrupted: a lookup whose call has given
    up (its deadline passed) holds its thread until the resolver answers. It
    keeps counting against its key (a tenant) until then, so one tenant's slow
    names take at most `per_key` of the threads, and none of the threads the
    engine's loop shares with other work.
    """

    def __init__(self, threads: int = 8, per_key: int = 2) -> None:
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="waypost-dns")
        self._limit = PerKeyLimit(per_key)

    async def addresses(self, key: str, host: str, port: int) -> list[str]:
        """The addresses of `host`, in the resolver's order (no duplicates, no IPv6 zone)."""
        loop = asyncio.get_running_loop()
        await self._limit.acquire(key)
        try:
            lookup = loop.run_in_executor(
                self._threads,
                functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM),
            )
        except BaseException:
            self._limit.release(key)
            raise
        lookup.add_done_callback(functools.partial(self._done, key))
        infos = await asyncio.shield(lookup)  # a cancelled call leaves the lookup running
        found: list[str] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            address = str(sockaddr[0]).partition("%")[0]  # scoped addresses are local anyway
            if address not in found:
                found.append(address)
        return found

    def _done(self, key: str, lookup: asyncio.Future[Any]) -> None:
        self._limit.release(key)
        if not lookup.cancelled():
            lookup.exception()  # looked at: a lookup nobody awaits any more logs nothing


async def exchange(
    target: Target,
    method: str,
    headers: Mapping[str, str],
    body: bytes | None,
    *,
    limit: int,
    addresses: Sequence[str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Response:
    """Send one request and read its answer (at most `limit + 1` bytes of body).

    With `addresses`, connects only to those (in order, the next on a connection
    error), never resolving the host again. An https certificate is checked
    against the URL's host and `tls`'s authorities (default: the system's).
    Raises OSError (ssl.SSLError included) for network trouble and
    ProtocolError for a malformed answer; the caller bounds the whole exchange
    with `asyncio.timeout`.
    """
    head = _request_head(target, method, headers, body)
    reader, writer = await _connect(target, addresses, tls)
    try:
        writer.write(head)
        if body:
            writer.write(body)
        await writer.drain()
        return await _read_response(reader, limit)
    finally:
        # No polite close: a slow peer must not hold the caller past its deadline.
        writer.transport.abort()


def run_with_deadline(call: Awaitable[T], seconds: float) -> T:
    """Run `call` on a new event loop (from a thread that has none), at most `seconds`."""

    async def bounded() -> T:
        async with asyncio.timeout(seconds):
            return await call

    return asyncio.run(bounded())


async def _connect(
    target: Target, addresses: Sequence[str] | None, tls: ssl.SSLContext | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    context = (tls or ssl.create_default_context()) if target.scheme == "https" else None
    last: OSError | None = None
    for address in addresses or [target.host]:
        try:
            return await asyncio.open_connection(
                address,
                target.port,
                ssl=context,
                server_hostname=target.host if context is not None else None,
                limit=_LINE_LIMIT,
            )
        except OSError as exc:
            last = exc
    assert last is not None  # at least one address was tried
    raise last


def _request_head(
    target: Target, method: str, headers: Mapping[str, str], body: bytes | None
) -> bytes:
    lines = [f"{method} {target.request_target} HTTP/1.1", f"Host: {target.authority}"]
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name) or "\r" in value or "\n" in value:
            raise ValueError("a header name or value is malformed")
        lines.append(f"{name}: {value}")
    if body is not None or method in _BODY_METHODS:
        lines.append(f"Content-Length: {len(body or b'')}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_response(reader: asyncio.StreamReader, limit: int) -> Response:
    while True:
        status = _status(await _line(reader))
        block = await _header_block(reader)
        if not (100 <= status < 200):
            break  # informational answers (100 Continue) come before the real one
    headers = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(block)
    if status in (204, 304):
        return Response(status, headers, b"")
    coding = ",".join(headers.get_all("Transfer-Encoding") or [])
    codings = [c.strip().lower() for c in coding.split(",")]
    if codings != [""]:
        if codings[-1] != "chunked":
            raise ProtocolError("the answer's transfer coding is not chunked")
        return Response(status, headers, await _chunked(reader, limit + 1))
    lengths = {v.strip() for v in headers.get_all("Content-Length") or []}
    if lengths:
        length = lengths.pop()
        if lengths or not length.isdigit():
            raise ProtocolError("the answer's Content-Length is malformed")
        return Response(status, headers, await _exactly(reader, min(int(length), limit + 1)))
    return Response(status, headers, await _until_closed(reader, limit + 1))


async def _line(reader: asyncio.StreamReader) -> bytes:
    try:
        line = await reader.readline()
    except (ValueError, asyncio.LimitOverrunError):
        raise ProtocolError("a line of the answer is too long") from None
    if not line.endswith(b"\n"):
        raise ProtocolError("the answer ended early")
    return line


def _status(line: bytes) -> int:
    match = re.fullmatch(rb"HTTP/1\.[01] ([0-9]{3})(?: [^\r\n]*)?\r?\n", line)
    if match is None:
        raise ProtocolError("the answer does not start with an HTTP/1.x status line")
    return int(match[1])


async def _header_block(reader: asyncio.StreamReader) -> bytes:
    lines: list[bytes] = []
    size = 0
    while True:
        line = await _line(reader)
        if line in (b"\r\n", b"\n"):
            return b"".join(lines)
        size += len(line)
        if size > _HEAD_LIMIT or len(lines) >= _MAX_HEADERS:
            raise ProtocolError("the answer's headers are too large")
        lines.append(line)


async def _exactly(reader: asyncio.StreamReader, n: int) -> bytes:
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError:
        raise ProtocolError("the answer ended early") from None


async def _until_closed(reader: asyncio.StreamReader, most: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < most:
        chunk = await reader.read(most - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


async def _chunked(reader: asyncio.StreamReader, most: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < most:
        text = (await _line(reader)).split(b";", 1)[0].strip()
        if not re.fullmatch(rb"[0-9A-Fa-f]{1,16}", text):
            raise ProtocolError("the answer's chunk size is malformed")
        length = int(text, 16)
        if length == 0:
            break  # trailers, if any, are not needed
        chunk = await _exactly(reader, min(length, most - size))
        chunks.append(chunk)
        size += len(chunk)
        if size < most:
            await _exactly(reader, 2)  # the CRLF after the chunk
    return b"".join(chunks)


class PerKeyLimit:
    """At most `limit` holders per key (a tenant) at once; the others wait their turn.

    For one event loop. A key's semaphore is dropped once nobody holds or waits
    for it, so idle keys cost nothing.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ConfigurationError("a limit of concurrent calls must be at least 1")
        self.limit = limit
        self._keys: dict[str, _Slots] = {}

    @contextlib.asynccontextmanager
    async def slot(self, key: str) -> AsyncIterator[None]:
        await self.acquire(key)
        try:
            yield
        finally:
            self.release(key)

    async def acquire(self, key: str) -> None:
        """Wait for a slot of `key` (cancelling the wait takes none)."""
        slots = self._keys.get(key)
        if slots is None:
            slots = self._keys[key] = _Slots(asyncio.Semaphore(self.limit))
        slots.users += 1
        try:
            await slots.semaphore.acquire()
        except BaseException:
            self._leave(key, slots)
            raise

    def release(self, key: str) -> None:
        """Give back a slot of `key` taken with `acquire`."""
        slots = self._keys[key]
        slots.semaphore.release()
        self._leave(key, slots)

    def _leave(self, key: str, slots: _Slots) -> None:
        slots.users -= 1
        if slots.users == 0:
            del self._keys[key]


@dataclass(slots=True)
class _Slots:
    semaphore: asyncio.Semaphore
    users: int = field(default=0)
