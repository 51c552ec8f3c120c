"""`Engine`: the synchronous face of `AsyncEngine`, derived from it.

The engine runs on its own event loop in a background thread; each method
here hands a coroutine to that loop and waits for its answer. Workflow code
and async activities run on that loop; sync activities in its thread pool.

The methods are not written twice: `blocking(AsyncEngine.x)` makes the
blocking `x` from the coroutine method, with its signature (which mypy sees
through `ParamSpec`) and docstring. Only what differs in kind — the
lifecycle (a context manager, signal handling, closing the loop) — is
written here; a test checks that every public coroutine method of
`AsyncEngine` has its blocking twin.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import signal
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, ParamSpec, Self, TypeVar

from waypost.errors import ConfigurationError
from waypost.model.definitions import Limits
from waypost.model.identity import Principal

from .blocking import Blocking as Blocking, blocking as blocking
from .engine import AsyncEngine, AsyncRunHandle
from .operator import OperatorBlocking
from .repairs import RepairBlocking

P = ParamSpec("P")
T = TypeVar("T")
U = TypeVar("U")
A = TypeVar("A")


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """An event loop for the engine: uvloop if installed (and asked for), else asyncio's."""
    if kind not in ("auto", "uvloop", "asyncio"):
        raise ConfigurationError(f"event_loop={kind!r}: use 'auto', 'uvloop' or 'asyncio'")
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ConfigurationError(
                    "event_loop='uvloop' needs uvloop: pip install 'waypost[uvloop]'"
                ) from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class LoopThread:
    """An event loop running in a daemon thread of its own; `call` waits for a coroutine's
    answer there (what a blocking face of an async object runs on)."""

    def __init__(self, kind: str = "auto", name: str = "waypost") -> None:
        self.loop = new_event_loop(kind)
        self.closed = False
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], closed: str = "closed") -> T:
        """The coroutine's answer, run on the loop in a copy of the caller's context (as
        `asyncio.to_thread` does the other way): the caller's active span, for one,
        is the parent of the run it starts."""
        if self.closed:
            coro.close()
            raise RuntimeError(closed)
        context = contextvars.copy_context()
        return context.run(asyncio.run_coroutine_threadsafe, coro, self.loop).result()

    def stop(self) -> None:
        self.closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class LoopFace(Blocking):
    """A blocking face of an async object `aio` that runs on a `LoopThread` of its own
    (the `Engine`, the `Client`): closing it closes `aio`, then stops the loop."""

    _loop: LoopThread

    def close(self) -> None:
        """Close it: an engine stops serving (gracefully) and closes the database, a
        client its connections to the server."""
        if self._loop.closed:
            return
        try:
            self._call(self.aio.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handle(engine: Engine, handle: AsyncRunHandle) -> RunHandle:
    return RunHandle(engine, handle.run_id, handle.tenant)


class Engine(LoopFace, OperatorBlocking, RepairBlocking):
    """The waypost engine for ordinary (synchronous) Python code.

    `Engine(url)` opens (and if needed creates) the database; `url` defaults
    to `sqlite:///waypost.db`. Options are those of `AsyncEngine`, and
    `event_loop`: the engine's own loop runs on uvloop when it is installed
    ("auto", the default), or always on "asyncio", or requires "uvloop".
    """

    aio: AsyncEngine

    def __init__(self, url: str | None = None, *, event_loop: str = "auto", **options: Any) -> None:
        self._loop = LoopThread(event_loop, "waypost-engine")
        try:
            self.aio = AsyncEngine(url, **options)
            self._call(self.aio.open())
        except BaseException:
            self._loop.stop()
            raise

    # -- plumbing -------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.call(coro, "the engine is closed")

    @property
    def url(self) -> str:
        return self.aio.url

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The engine's own event loop (for code on other threads that must await it)."""
        return self._loop.loop

    # -- lifecycle ------------------------------------------------------------
    def register(self, *items: Any) -> Engine:
        """Make workflows and activities (decorated functions) known to this engine."""
        self.aio.register(*items)
        return self

    def serve_queues(self, *queues: str) -> Engine:
        """Take activity attempts only of these named queues (`@activity(queue=...)`; an
        activity naming none is in "default"); with none given, of every queue again.
        Workflows still run here and call every registered activity: the attempts of the
        other queues wait for an engine that serves them. (`AsyncEngine`:
        `engine.registry.serve_queues(queues)`.)"""
        self.aio.registry.serve_queues(queues or None)
        self.aio.register()  # a running engine's next claim takes the change
        return self

    @contextlib.contextmanager
    def running(self) -> Iterator[Engine]:
        """Run workers and the scheduler in this process for the block.

        Leaving the block stops taking work and lets running activities finish
        (up to `shutdown_grace`), so a clean stop never re-runs a step.
        """
        self._call(self.aio.start_serving())
        try:
            yield self
        finally:
            self._call(self.aio.stop_serving())

    def run_forever(self, *, grace: timedelta | float | None = None) -> None:
        """Serve until SIGTERM or SIGINT, then stop gracefully (for worker processes)."""
        stop = threading.Event()
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: stop.set())
        self._call(self.aio.start_serving())
        try:
            while not stop.wait(0.5):
                pass
        finally:
            seconds = grace.total_seconds() if isinstance(grace, timedelta) else grace
            self._call(self.aio.stop_serving(seconds))
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def limits_for(self, tenant: str) -> Limits:
        """What `tenant`'s definitions may contain (the engine's `limits` option)."""
        return self.aio.limits_for(tenant)

    def local(self, tenant: str = "default") -> Principal:
        """The principal this process acts as in `tenant` (for `execute`)."""
        return self.aio.local(tenant)

    # -- every operation, derived from AsyncEngine ------------------------------
    execute = blocking(AsyncEngine.execute)
    start = blocking(AsyncEngine.start, _handle)
    signal = blocking(AsyncEngine.signal)
    # (the run commands: `OperatorBlocking`, `RepairBlocking`)
    fork = blocking(AsyncEngine.fork)
    query = blocking(AsyncEngine.query)
    update = blocking(AsyncEngine.update)
    start_update = blocking(AsyncEngine.start_update, lambda self, h: replace(h, engine=self))
    get = blocking(AsyncEngine.get)
    list_runs = blocking(AsyncEngine.list_runs)
    history = blocking(AsyncEngine.history)
    verify = blocking(AsyncEngine.verify)
    result = blocking(AsyncEngine.result)
    approvals = blocking(AsyncEngine.approvals)
    approval = blocking(AsyncEngine.approval)
    decide = blocking(AsyncEngine.decide)
    revoke = blocking(AsyncEngine.revoke)
    reassign = blocking(AsyncEngine.reassign)
    add_to_group = blocking(AsyncEngine.add_to_group)
    remove_from_group = blocking(AsyncEngine.remove_from_group)
    groups = blocking(AsyncEngine.groups)
    publish = blocking(AsyncEngine.publish)
    definitions = blocking(AsyncEngine.definitions)
    definition = blocking(AsyncEngine.definition)
    migrate = blocking(AsyncEngine.migrate)
    migrate_all = blocking(AsyncEngine.migrate_all)
    stats = blocking(AsyncEngine.stats)
    check_store = blocking(AsyncEngine.check_store)
    authenticate = blocking(AsyncEngine.authenticate)
    create_tenant = blocking(AsyncEngine.create_tenant)
    list_tenants = blocking(AsyncEngine.list_tenants)
    disable_tenant = blocking(AsyncEngine.disable_tenant)
    enable_tenant = blocking(AsyncEngine.enable_tenant)
    delete_tenant = blocking(AsyncEngine.delete_tenant)
    create_key = blocking(AsyncEngine.create_key)
    list_keys = blocking(AsyncEngine.list_keys)
    revoke_key = blocking(AsyncEngine.revoke_key)
    create_user = blocking(AsyncEngine.create_user)
    list_users = blocking(AsyncEngine.list_users)
    disable_user = blocking(AsyncEngine.disable_user)
    set_password = blocking(AsyncEngine.set_password)
    schedule = blocking(AsyncEngine.schedule)
    schedules = blocking(AsyncEngine.schedules)
    describe_schedule = blocking(AsyncEngine.describe_schedule)
    pause_schedule = blocking(AsyncEngine.pause_schedule)
    resume_schedule = blocking(AsyncEngine.resume_schedule)
    delete_schedule = blocking(AsyncEngine.delete_schedule)
    backfill_schedule = blocking(AsyncEngine.backfill_schedule)
    trigger_schedule = blocking(AsyncEngine.trigger_schedule)
    # the approval page
    resolve_credential = blocking(AsyncEngine.resolve_credential)
    start_run = blocking(AsyncEngine.start_run)
    page_runs = blocking(AsyncEngine.page_runs)
    search_runs = blocking(AsyncEngine.search_runs)
    count_runs = blocking(AsyncEngine.count_runs)
    data_at = blocking(AsyncEngine.data_at)
    history_page = blocking(AsyncEngine.history_page)
    # signal-with-start and webhooks by correlation
    signal_with_start = blocking(AsyncEngine.signal_with_start)
    create_webhook_source = blocking(AsyncEngine.create_webhook_source)
    webhook_sources = blocking(AsyncEngine.webhook_sources)
    delete_webhook_source = blocking(AsyncEngine.delete_webhook_source)
    deliver_webhook = blocking(AsyncEngine.deliver_webhook)
    # quotas and fair scheduling
    get_tenant = blocking(AsyncEngine.get_tenant)
    set_quotas = blocking(AsyncEngine.set_quotas)
    configure_queue = blocking(AsyncEngine.configure_queue)
    queues = blocking(AsyncEngine.queues)
    queue = blocking(AsyncEngine.queue)
    # retention: purged runs
    purge_runs = blocking(AsyncEngine.purge_runs)
    purged_run = blocking(AsyncEngine.purged_run)
    purged_runs = blocking(AsyncEngine.purged_runs)
    # payload encryption, and legacy runs bound to their id
    reencrypt = blocking(AsyncEngine.reencrypt)
    seal_legacy = blocking(AsyncEngine.seal_legacy)


@dataclass(frozen=True)
class RunHandle(Blocking):
    """A started run, for the synchronous `Engine`."""

    engine: Engine
    run_id: str
    tenant: str = "default"

    @property
    def aio(self) -> AsyncRunHandle:
        return AsyncRunHandle(self.engine.aio, self.run_id, self.tenant)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.engine._call(coro)

    get = blocking(AsyncRunHandle.get)
    result = blocking(AsyncRunHandle.result)
    signal = blocking(AsyncRunHandle.signal)
    cancel = blocking(AsyncRunHandle.cancel)
    history = blocking(AsyncRunHandle.history)
