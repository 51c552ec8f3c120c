"""Each caller's share of a server process: requests in progress bounded per caller, the
rest waiting their turn without using the loop, and past the wait a quick 429."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from waypost.server.fairness import CallerShare, caller_of


class Slow:
    """An ASGI app whose requests stay in progress until released; counts them by caller."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.release = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        who = caller_of(scope)
        self.running[who] = self.running.get(who, 0) + 1
        self.most[who] = max(self.most.get(who, 0), self.running[who])
        try:
            await self.release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
        finally:
            self.running[who] -= 1


def request(key: str, path: str = "/v1/runs") -> dict[str, Any]:
    return {
        "type": "http",
        "path": path,
        "headers": [(b"authorization", f"Bearer {key}".encode())],
        "client": ("127.0.0.1", 1),
    }


async def call(app: Any, scope: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, None, send)
    status = sent[0]["status"]
    body = json.loads(sent[1]["body"])
    return status, {"body": body, "headers": dict(sent[0]["headers"])}


def test_a_caller_has_its_bound_in_progress_and_the_others_are_not_kept_behind_it() -> None:
    async def main() -> None:
        slow = Slow()
        app = CallerShare(slow, max_in_flight=3, max_waiting=10)
        a = [asyncio.ensure_future(call(app, request("a"))) for _ in range(8)]
        b = asyncio.ensure_future(call(app, request("b")))
        for _ in range(20):
            await asyncio.sleep(0)
        # a has 3 in progress and 5 waiting; b's one is in progress beside them.
        assert slow.running == {caller_of(request("a")): 3, caller_of(request("b")): 1}
        slow.release.set()
        answers = await asyncio.gather(*a, b)
        assert [status for status, _ in answers] == [200] * 9
        assert slow.most[caller_of(request("a"))] == 3
        assert app._shares == {}  # every place given back

    asyncio.run(main())


def test_past_the_wait_a_caller_is_refused_at_once_with_429() -> None:
    async def main() -> None:
        slow = Slow()
        app = CallerShare(slow, max_in_flight=2, max_waiting=2)
        held = [asyncio.ensure_future(call(app, request("a"))) for _ in range(4)]
        for _ in range(20):
            await asyncio.sleep(0)
        status, answer = await call(app, request("a"))
        assert status == 429
        assert answer["headers"][b"retry-after"] == b"1"
        assert answer["body"]["error"]["details"]["quota"] == "max_requests_in_flight"
        slow.release.set()
        assert [s for s, _ in await asyncio.gather(*held)] == [200] * 4

    asyncio.run(main())


def test_a_waiting_request_given_up_keeps_no_place() -> None:
    async def main() -> None:
        slow = Slow()
        app = CallerShare(slow, max_in_flight=1, max_waiting=5)
        first = asyncio.ensure_future(call(app, request("a")))
        waiting = asyncio.ensure_future(call(app, request("a")))
        for _ in range(10):
            await asyncio.sleep(0)
        waiting.cancel()  # the client went away while it waited
        await asyncio.gather(waiting, return_exceptions=True)
        slow.release.set()
        assert (await first)[0] == 200
        assert (await call(app, request("a")))[0] == 200
        assert app._shares == {}

    asyncio.run(main())


def test_waits_by_design_and_health_hold_no_place() -> None:
    async def main() -> None:
        slow = Slow()
        app = CallerShare(slow, max_in_flight=1, max_waiting=0)
        paths = ["/v1/runs/r1/result", "/v1/runs/r1/updates/approve", "/healthz", "/metrics"]
        waits = [asyncio.ensure_future(call(app, request("a", p))) for p in paths]
        for _ in range(10):
            await asyncio.sleep(0)
        assert slow.running[caller_of(request("a"))] == 4  # none of them counted
        slow.release.set()
        assert [s for s, _ in await asyncio.gather(*waits)] == [200] * 4

    asyncio.run(main())


def test_callers_are_told_apart_by_key_session_or_address_and_keep_no_secret() -> None:
    key = caller_of(request("secret-key"))
    assert key.startswith("key:") and "secret-key" not in key
    session = caller_of(
        {"headers": [(b"cookie", b"a=1; waypost_session=s3cr3t; b=2")], "client": ("1.2.3.4", 9)}
    )
    assert session.startswith("session:") and "s3cr3t" not in session
    same = caller_of({"headers": [(b"cookie", b"waypost_session=s3cr3t")], "client": None})
    assert same == session
    assert caller_of({"headers": [], "client": ("1.2.3.4", 9)}) == "address:1.2.3.4"
