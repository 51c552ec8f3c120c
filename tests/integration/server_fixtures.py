"""An engine's HTTP server on a real socket, on the engine's own event loop, for tests."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import uvicorn

import waypost as wp
from tests.helpers import eventually
from waypost.model import operations as ops
from waypost.observability import Metrics
from waypost.server.app import create_app


class Api:
    """An HTTP client of the server, as one API key's principal.

    Every client made during a test is closed when its `serve` fixture ends, even when
    the test failed before closing it (an unclosed socket would otherwise surface as an
    error in whichever later test the garbage collector happens to run in).
    """

    opened: list[Api] = []

    def __init__(self, base: str, key: str | None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.Client(base_url=base, headers=headers, timeout=30)
        Api.opened.append(self)
        self.base = base
        self.key = key

    def __getattr__(self, name: str) -> Any:  # get, post, ...
        return getattr(self.http, name)

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()


def make_key(engine: wp.Engine, tenant: str, principal: str, *roles: str) -> str:
    """A new API key of `principal` in `tenant` (the tenant created if need be)."""
    local = engine.aio.local(tenant)
    known = {t.tenant for t in engine.execute(ops.ListTenants(), local)}
    if tenant not in known:
        engine.execute(ops.CreateTenant(tenant=tenant), local)
    new = engine.execute(ops.CreateKey(principal=principal, roles=list(roles)), local)
    key: str = new.key
    return key


@contextmanager
def run_commanders(
    engine: wp.Engine, base: str, outsider_role: str
) -> Iterator[tuple[Api, Api, Api]]:
    """Clients of olga (operator in acme), sam (starter in acme) and oscar (an
    `outsider_role` of tenant other), closed when the block ends."""
    apis = (
        Api(base, make_key(engine, "acme", "olga", "operator")),
        Api(base, make_key(engine, "acme", "sam", "starter")),
        Api(base, make_key(engine, "other", "oscar", outsider_role)),
    )
    try:
        yield apis
    finally:
        for api in apis:
            api.http.close()


def serve_metered(
    make_engine: Callable[..., wp.Engine], serve: Callable[..., str], *code: Any, **options: Any
) -> tuple[wp.Engine, str]:
    """An engine serving `code` that keeps metrics (its store watched), and the base URL of
    its server, which shows the series by tenant, workflow and queue to whoever holds the
    token `scrape-secret`. `ttl` goes to the store's watch; other `options` to the engine."""
    watch = {"ttl": options.pop("ttl")} if "ttl" in options else {}
    metrics = Metrics()
    engine = make_engine(*code, observer=metrics, **options)
    metrics.watch_store(engine.aio.store, engine.aio.clock, **watch)
    return engine, serve(engine, metrics=metrics, metrics_token="scrape-secret")


def metrics_text(base: str) -> str:
    """What /metrics shows the holder of the token `scrape-secret`."""
    with Api(base, None) as anyone:
        text: str = anyone.get("/metrics", headers={"Authorization": "Bearer scrape-secret"}).text
    return text


# Who most tests of the HTTP surface act as: name -> (tenant, principal, *roles).
STAFF = {
    "admin": ("acme", "root", "admin"),
    "ops": ("acme", "olga", "operator"),
    "viewer": ("acme", "vic", "viewer"),
    "other": ("globex", "gus", "admin"),
}


def make_keys(engine: wp.Engine, *staff: str, **more: tuple[str, ...]) -> dict[str, str]:
    """New API keys by name: each of `staff` as `STAFF` says, then each of `more` as
    (tenant, principal, *roles)."""
    people = {**{name: STAFF[name] for name in staff}, **more}
    return {name: make_key(engine, *who) for name, who in people.items()}


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """`serve(engine)` starts the engine's HTTP server on a free port; its base URL."""
    running: list[tuple[uvicorn.Server, Any, socket.socket]] = []

    def start(engine: wp.Engine, **options: Any) -> str:
        app = create_app(engine.aio, **options)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        done = asyncio.run_coroutine_threadsafe(
            server.serve(sockets=[sock]),
            engine._loop.loop,
        )
        eventually(lambda: server.started or done.done(), "the server to start")
        running.append((server, done, sock))
        return f"http://127.0.0.1:{port}"

    yield start
    while Api.opened:
        Api.opened.pop().http.close()
    for server, done, sock in running:
        server.should_exit = True
        done.result(30)
        sock.close()
