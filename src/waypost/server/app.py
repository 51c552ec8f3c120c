"""waypost's HTTP server: the API (v1), the approval page, health checks.

A thin adapter over the one door. Each route authenticates the caller (an API key
becomes a `Principal`), parses the request into an operation, executes it with
`AsyncEngine.execute`, and answers JSON; a `WaypostError` becomes its status
(`server/errors.py`). No route decides anything the engine does not: the same
operations answer the embedded API and the CLI.

The web console (`console/`) is served at `/` beside them.

`create_app(engine)` serves an engine the caller opens and closes;
`app_from_settings(settings)` opens one for the app's lifetime (what
`waypost server` runs, in each of its processes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from waypost.client.engine import AsyncEngine
from waypost.engine import tracing
from waypost.errors import WaypostError
from waypost.features.senders import senders_from_url
from waypost.model.logs import configure_logging, logger
from waypost.observability import Metrics
from waypost.runtime.registry import items_in_modules

from . import api, approval_page, console, metrics_route
from .answers import JsonAnswer
from .compute import FORWARDED, SWITCH_INTERVAL, ComputeProcesses
from .console.pages import (
    FormUnreadable,
    SignInNeeded,
    TenantClosed,
    form_unreadable,
    sign_in_needed,
    tenant_closed,
)
from .console.security import ConsoleSecret
from .errors import answer, error_body, logged_path
from .fairness import MAX_IN_FLIGHT, CallerShare
from .paths import EncodedSlashes
from .proxies import AnswerHeaders, ForwardedFor, TrustedProxies

log = logger("waypost.server")

MAX_BODY = 4 * 1024 * 1024  # bytes of request body a route reads at most
SETTINGS_VARIABLE = "WAYPOST_SERVER_SETTINGS"


@dataclass(frozen=True)
class ServerSettings:
    """How `waypost server` opens its engine (passed to each server process as JSON)."""

    db: str
    apps: list[str] = field(default_factory=list)
    serve: bool = True  # run workers and the scheduler in the server processes
    engine_options: dict[str, Any] = field(default_factory=dict)
    max_body: int = MAX_BODY
    notify: str = "log"  # where approval notifications go (see `senders_from_url`)
    metrics: bool = True  # serve GET /metrics
    metrics_token: str | None = None  # then a scrape must bring it as a bearer token
    log_format: str = "text"  # how each process logs (`configure_logging`)
    # The console's cookie key (hex), one for every process of the server; "" draws one.
    console_secret: str = field(default="", repr=False)
    # Networks of proxies whose X-Forwarded-For/-Proto/-Host are believed (none: no one's).
    trusted_proxies: list[str] = field(default_factory=list)
    # Processes beside each server process for a tenant's expensive work (compute.py);
    # 0: that work runs in the server process itself, on its compute lane.
    compute_processes: int = 1
    # Requests of one caller in progress at once in each process (fairness.py); 0: no bound.
    max_requests_in_flight: int = MAX_IN_FLIGHT

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerSettings:
        return cls(**json.loads(text))


def create_app(
    engine: AsyncEngine | None = None,
    *,
    max_body: int = MAX_BODY,
    lifespan: Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]] | None = None,
    metrics: Metrics | None = None,
    metrics_token: str | None = None,
    console_secret: ConsoleSecret | None = None,
    trusted_proxies: TrustedProxies | None = None,
    max_requests_in_flight: int = MAX_IN_FLIGHT,
) -> FastAPI:
    """The ASGI application serving `engine` (or the one `lifespan` opens); GET /metrics
    answers from `metrics` (the engine's observer), with `metrics_token` if given.
    Requests from `trusted_proxies` are taken as the client their `X-Forwarded-*` headers
    name (`proxies.py`); one caller has `max_requests_in_flight` in progress at most
    (`fairness.py`)."""
    app = FastAPI(
        title="waypost",
        version="1",
        summary="Durable workflows: runs, definitions and approvals of one tenant per API key.",
        lifespan=lifespan,
        docs_url=None,  # the interactive pages load scripts from elsewhere
        redoc_url=None,
        default_response_class=JsonAnswer,
    )
    if engine is not None:
        app.state.engine = engine
    app.state.metrics = metrics
    app.state.metrics_token_digest = (
        metrics_route.token_digest(metrics_token) if metrics_token else None
    )
    for router in api.ROUTERS:
        app.include_router(router)
    app.include_router(metrics_route.router)
    app.include_router(approval_page.router)
    app.state.console_secret = console_secret or ConsoleSecret.random()
    app.include_router(console.router())
    app.add_exception_handler(SignInNeeded, sign_in_needed)
    app.add_exception_handler(FormUnreadable, form_unreadable)
    app.add_exception_handler(TenantClosed, tenant_closed)
    app.add_exception_handler(WaypostError, _waypost_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
    app.add_middleware(BodyLimit, limit=max_body)
    app.add_middleware(EncodedSlashes)
    app.add_middleware(AnswerHeaders)
    app.add_middleware(CallerShare, max_in_flight=max_requests_in_flight)
    app.add_middleware(ForwardedFor, proxies=trusted_proxies or TrustedProxies())  # outermost
    return app


def app_from_settings(settings: ServerSettings) -> FastAPI:
    """An app that opens (and serves, unless told not to) its own engine while it lives."""
    metrics = Metrics() if settings.metrics else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        notifier = senders_from_url(settings.notify)
        options = dict(settings.engine_options)
        compute = _compute_processes(settings, metrics)
        if compute is not None:
            options["serve_definitions"] = False  # the compute processes serve them
        else:
            # The lane's threads run here: hand the interpreter's lock back to the loop
            # every 0.5 ms, not every 5, while they work (as a compute process does).
            sys.setswitchinterval(SWITCH_INTERVAL)
        if metrics is not None:
            options["observer"] = metrics
        engine = AsyncEngine(settings.db, notifier=notifier, **options)
        for item in _load(settings.apps):
            engine.register(item)
        if metrics is not None:
            metrics.watch_store(engine.store, engine.clock)
        async with engine:
            app.state.engine = engine
            if compute is not None:
                await compute.start()
                engine.forward(FORWARDED, compute.call)
            try:
                if settings.serve:
                    async with engine.running():
                        yield
                else:
                    yield
            finally:
                if compute is not None:
                    await compute.stop(float(settings.engine_options.get("shutdown_grace", 30)))

    secret = ConsoleSecret.from_text(settings.console_secret) if settings.console_secret else None
    return create_app(
        max_body=settings.max_body,
        lifespan=lifespan,
        metrics=metrics,
        metrics_token=settings.metrics_token,
        console_secret=secret,
        trusted_proxies=TrustedProxies.parse(settings.trusted_proxies),
        max_requests_in_flight=settings.max_requests_in_flight,
    )


def app_from_environment() -> FastAPI:
    """The app of the settings `waypost server` put in the environment (uvicorn's factory).

    Each process (`--workers N` starts new ones) sets up its logging and, when the
    environment names an OTLP endpoint, its tracer provider."""
    settings = ServerSettings.from_json(os.environ[SETTINGS_VARIABLE])
    configure_logging(settings.log_format, tracing.log_ids)
    tracing.configure_from_environment()
    return app_from_settings(settings)


def _compute_processes(
    settings: ServerSettings, metrics: Metrics | None
) -> ComputeProcesses | None:
    """The compute processes of one server process, if it has any (not yet started)."""
    if settings.compute_processes < 1:
        return None
    limit = settings.engine_options.get("compute_cpu_limit", 10.0)
    backstop = 3 * float(limit or 10.0) + 30.0
    what = {
        "backstop": backstop,
        "db": settings.db,
        "apps": settings.apps,
        "engine_options": settings.engine_options,
        "notify": settings.notify,
        "serve": settings.serve,
        "log_format": settings.log_format,
    }
    return ComputeProcesses(
        json.dumps(what),
        count=settings.compute_processes,
        observer=metrics,
        backstop=backstop,
        max_waiting=int(settings.engine_options.get("max_compute_waiting", 8)),
    )


def _load(apps: list[str]) -> list[Any]:
    return items_in_modules(apps)


# == errors ============================================================================
async def _waypost_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, WaypostError)
    status, body, headers = answer(exc)
    return JsonAnswer(body, status_code=status, headers=headers)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = [
        {
            "path": ".".join(str(p) for p in err.get("loc", ()) if p != "body"),
            "message": str(err.get("msg", ""))[:200],
        }
        for err in exc.errors()[:50]
    ]
    if any(err.get("type") == "json_invalid" for err in exc.errors()):
        what = "the request body is not valid JSON"
        return JsonAnswer(error_body("bad_json", what, {"problems": problems}), status_code=400)
    what = "the request is not as the API expects"
    body = error_body("invalid_request", what, {"problems": problems})
    return JsonAnswer(body, status_code=422)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    codes = {400: "bad_json", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
    code = codes.get(exc.status_code, "http_error")
    message = str(exc.detail) if exc.status_code != 404 else "no such route"
    if exc.status_code == 400:
        # The framework's answer to a body its JSON parser gave up on: bytes that are not
        # UTF-8, or nesting deeper than the parser goes (a RecursionError caught there).
        message = "the request body is not JSON the API can read: UTF-8 text, not nested too deep"
    return JsonAnswer(error_body(code, message), status_code=exc.status_code, headers=exc.headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    path = logged_path(request.url.path)
    log.error("unexpected %s answering %s %s", type(exc).__name__, request.method, path)
    # Sent from outside the middleware that adds these to every other answer.
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
    return JsonAnswer(error_body("internal", "internal error"), status_code=500, headers=headers)


# == request bodies are bounded =========================================================
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BodyLimit:
    """Refuses a request body over `limit` bytes with 413: at once by its Content-Length,
    or as soon as a streamed body passes the limit (the route never holds more)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            response = JsonAnswer(
                error_body("too_large", f"the request body is over {self.limit} bytes"),
                status_code=413,
                headers={"Connection": "close"},
            )
            await response(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise StarletteHTTPException(
                        413, f"the request body is over {self.limit} bytes"
                    )
            return message

        await self.app(scope, counted, send)
