"""Each caller's share of a server process: a bound on the requests it has in progress.

One event loop answers every tenant. A caller that keeps many requests going at once
(a client with many threads, or one that sends again the moment it is refused) would
otherwise have the loop spend its time on that caller's requests while everyone
else's wait in line behind them. Here each caller (its API key, its console session,
or, for neither, its address) has at most `max_in_flight` requests in progress; more
wait their turn, without using the loop, and past `max_waiting` more are refused at
once with 429 (`quota_exceeded`, `max_requests_in_flight`), before any route, sign-in
or database read. A caller whose requests wait on slow work (a heavy query answered by
a compute process) then waits itself, instead of turning the wait into a stream of
refusals that fills the loop. Requests that wait by design hold no place: a run's
result (`.../result`), an update's (`.../updates/...`), and the health and metrics
routes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]

MAX_IN_FLIGHT = 8
MAX_WAITING = 64
_SESSION = b"waypost_session="
_UNSHARED = re.compile(r"^/(healthz|readyz|metrics)$|^/v1/runs/[^/]+/(result|updates/[^/]+)$")


@dataclass
class _Share:
    running: int = 0
    waiting: list[asyncio.Future[None]] = field(default_factory=list)


def caller_of(scope: Scope) -> str:
    """Who sends a request, as its share is counted: its bearer key, its console session,
    or its address (digests: no secret is kept)."""
    for key, value in scope.get("headers") or ():
        if key == b"authorization":
            return "key:" + hashlib.sha256(value).hexdigest()
    for key, value in scope.get("headers") or ():
        if key == b"cookie" and _SESSION in value:
            session = value.split(_SESSION, 1)[1].split(b";", 1)[0]
            return "session:" + hashlib.sha256(session).hexdigest()
    client = scope.get("client")
    return f"address:{client[0] if client else ''}"


class CallerShare:
    """At most `max_in_flight` requests of one caller in progress (see the module)."""

    def __init__(
        self, app: App, max_in_flight: int = MAX_IN_FLIGHT, max_waiting: int = MAX_WAITING
    ) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.max_waiting = max_waiting
        self._shares: dict[str, _Share] = {}

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or self.max_in_flight < 1
            or _UNSHARED.match(scope.get("path", ""))
        ):
            await self.app(scope, receive, send)
            return
        who = caller_of(scope)
        share = self._shares.setdefault(who, _Share())
        if share.running >= self.max_in_flight:
            if len(share.waiting) >= self.max_waiting:
                await _refuse(send, self.max_in_flight)
                return
            turn = asyncio.get_running_loop().create_future()
            share.waiting.append(turn)
            try:
                await turn  # the place of a request that ended is handed over
            except BaseException:
                if turn in share.waiting:
                    share.waiting.remove(turn)
                elif turn.done() and not turn.cancelled():
                    self._done(who, share)  # handed over, then given up: pass it on
                raise
        else:
            share.running += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._done(who, share)

    def _done(self, who: str, share: _Share) -> None:
        while share.waiting:
            turn = share.waiting.pop(0)
            if not turn.done():
                turn.set_result(None)  # its place, handed over: `running` stays
                return
        share.running -= 1
        if not share.running:
            del self._shares[who]


async def _refuse(send: Any, most: int) -> None:
    body = json.dumps(
        {
            "error": {
                "code": "quota_exceeded",
                "message": f"this caller has {most} requests in progress and more waiting, "
                "the most a server process takes from one caller; try again shortly",
                "details": {"quota": "max_requests_in_flight", "retry_after": 1},
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"1"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
