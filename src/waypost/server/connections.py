"""A deadline on a request's headers: a connection that stops mid-headers is closed.

uvicorn closes an idle kept-alive connection after `timeout_keep_alive`, but only once a
response was sent, and any byte received cancels that timer: a client that opens a
connection and sends part of a request line or headers (and then nothing, or a byte
now and then) holds it, and its file descriptor, for ever. ASGI middleware cannot
help, as the app sees a request only once its headers are complete.

`HeaderDeadline` is uvicorn's h11 protocol with one more timer: armed when a
connection opens and whenever a new request begins on it, disarmed once the
request's headers are complete. If it fires first, the connection is closed without
an answer. A request's body, and the time the app takes, are not bounded by it
(bodies are bounded in size by `BodyLimit`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 10.0  # seconds from a connection's (or a request's) first byte to its headers


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers are not complete
    within `header_timeout` seconds."""

    def __init__(self, *args: Any, header_timeout: float = HEADER_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout
        self.header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.header_deadline is None and self._between_requests():
            self._arm()  # a new request begins on a kept-alive connection
        super().data_received(data)
        if not self._between_requests():
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        """No request's headers are in: the client has not finished a request line and
        headers since the last response."""
        return self.conn.their_state is h11.IDLE

    def _arm(self) -> None:
        self._disarm()
        self.header_deadline = self.loop.call_later(self.header_timeout, self._headers_overdue)

    def _disarm(self) -> None:
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def _headers_overdue(self) -> None:
        self.header_deadline = None
        if self._between_requests() and not self.transport.is_closing():
            self.logger.debug("closing a connection whose request headers did not come in time")
            self.transport.close()


def protocol(header_timeout: float) -> Callable[..., asyncio.Protocol]:
    """What uvicorn's `http` option takes: `HeaderDeadline` with this timeout (a partial of
    the class, so that `--workers` processes receive it by reference)."""
    return functools.partial(HeaderDeadline, header_timeout=header_timeout)
