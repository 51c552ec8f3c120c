"""`Engine`: the synchronous face of `AsyncEngine`.

The engine runs on its own event loop in a background thread; each method
here hands a coroutine to that loop and waits for its answer. Workflow code
and async activities run on that loop; sync activities in its thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from waypost.errors import ConfigurationError
from waypost.model.definitions import Limits
from waypost.model.events import ChainProblem, Event
from waypost.model.status import RunStatus

from .approvals import ApprovalInfo, DecisionReceipt
from .core import AsyncEngine
from .records import DefinitionInfo, MigrationReport, RunHandle, RunInfo

T = TypeVar("T")


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


class Engine:
    """The waypost engine for ordinary (synchronous) Python code.

    `Engine(url)` opens (and if needed creates) the database; `url` defaults
    to `sqlite:///waypost.db`. Options are those of `AsyncEngine`, and
    `event_loop`: the engine's own loop runs on uvloop when it is installed
    ("auto", the default), or always on "asyncio", or requires "uvloop".
    """

    def __init__(self, url: str | None = None, *, event_loop: str = "auto", **options: Any) -> None:
        self._loop = new_event_loop(event_loop)
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="waypost-engine", daemon=True
        )
        self._thread.start()
        self._closed = False
        try:
            self.aio = AsyncEngine(url, **options)
            self._call(self.aio.open())
        except BaseException:
            self._stop_loop()
            raise

    # -- plumbing -------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the engine is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop_loop(self) -> None:
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @property
    def url(self) -> str:
        return self.aio.url

    # -- lifecycle ------------------------------------------------------------
    def register(self, *items: Any) -> Engine:
        """Make workflows and activities (decorated functions) known to this engine."""
        self.aio.register(*items)
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

    def close(self) -> None:
        """Stop serving (gracefully) and close the database."""
        if self._closed:
            return
        try:
            self._call(self.aio.close())
        finally:
            self._stop_loop()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the API --------------------------------------------------------------
    def start(
        self,
        workflow: Any,
        input: Any = None,
        *,
        run_id: str | None = None,
        tenant: str = "default",
        version: str | int | None = None,
        started_by: str | None = None,
    ) -> RunHandle:
        """Start a run of `workflow` (function or name); see `AsyncEngine.start`."""
        handle = self._call(
            self.aio.start(
                workflow,
                input,
                run_id=run_id,
                tenant=tenant,
                version=version,
                started_by=started_by,
            )
        )
        return RunHandle(self, handle.run_id, handle.tenant)

    def signal(
        self, run_id: str, name: str, payload: Any = None, *, tenant: str = "default"
    ) -> None:
        self._call(self.aio.signal(run_id, name, payload, tenant=tenant))

    def cancel(self, run_id: str, reason: str, *, tenant: str = "default") -> None:
        self._call(self.aio.cancel(run_id, reason, tenant=tenant))

    def get(self, run_id: str, *, tenant: str = "default") -> RunInfo:
        return self._call(self.aio.get(run_id, tenant=tenant))

    # -- definitions (see AsyncEngine) -----------------------------------------------
    def publish(
        self,
        definition: str | bytes | dict[str, Any],
        *,
        tenant: str = "default",
        by: str | None = None,
        limits: Limits | None = None,
    ) -> DefinitionInfo:
        return self._call(self.aio.publish(definition, tenant=tenant, by=by, limits=limits))

    def definitions(self, *, tenant: str = "default") -> list[DefinitionInfo]:
        return self._call(self.aio.definitions(tenant=tenant))

    def definition(
        self, name: str, version: int | None = None, *, tenant: str = "default"
    ) -> DefinitionInfo:
        return self._call(self.aio.definition(name, version, tenant=tenant))

    def migrate(
        self,
        run_id: str,
        to_version: int,
        mapping: Mapping[str, str] | None = None,
        reason: str = "",
        dry_run: bool = False,
        *,
        by: str | None = None,
        tenant: str = "default",
    ) -> MigrationReport:
        return self._call(
            self.aio.migrate(
                run_id, to_version, mapping, reason=reason, by=by, dry_run=dry_run, tenant=tenant
            )
        )

    def migrate_all(
        self,
        definition: str,
        from_version: int,
        to_version: int,
        mapping: Mapping[str, str] | None = None,
        reason: str = "",
        dry_run: bool = False,
        *,
        by: str | None = None,
        tenant: str = "default",
    ) -> list[MigrationReport]:
        return self._call(
            self.aio.migrate_all(
                definition,
                from_version,
                to_version,
                mapping,
                reason=reason,
                by=by,
                dry_run=dry_run,
                tenant=tenant,
            )
        )

    # -- approvals (see AsyncEngine) -------------------------------------------------
    def approvals(
        self,
        principal: str | None = None,
        status: str | None = "pending",
        *,
        tenant: str = "default",
        run_id: str | None = None,
        limit: int = 100,
    ) -> list[ApprovalInfo]:
        return self._call(
            self.aio.approvals(principal, status, tenant=tenant, run_id=run_id, limit=limit)
        )

    def approval(self, approval_id: str, *, tenant: str = "default") -> ApprovalInfo:
        return self._call(self.aio.approval(approval_id, tenant=tenant))

    def decide(
        self,
        approval_id: str,
        token: str,
        principal: str,
        decision: str,
        comment: str = "",
        *,
        tenant: str = "default",
        auth: str = "api",
    ) -> DecisionReceipt:
        return self._call(
            self.aio.decide(
                approval_id, token, principal, decision, comment, tenant=tenant, auth=auth
            )
        )

    def revoke(
        self, approval_id: str, principal: str, *, by: str, reason: str, tenant: str = "default"
    ) -> None:
        self._call(self.aio.revoke(approval_id, principal, by=by, reason=reason, tenant=tenant))

    def reassign(
        self,
        approval_id: str,
        from_principal: str,
        to_principal: str,
        *,
        by: str,
        reason: str,
        tenant: str = "default",
    ) -> None:
        self._call(
            self.aio.reassign(
                approval_id, from_principal, to_principal, by=by, reason=reason, tenant=tenant
            )
        )

    def add_to_group(
        self, group: str, principals: Sequence[str], *, tenant: str = "default"
    ) -> int:
        return self._call(self.aio.add_to_group(group, principals, tenant=tenant))

    def remove_from_group(
        self, group: str, principals: Sequence[str], *, tenant: str = "default"
    ) -> int:
        return self._call(self.aio.remove_from_group(group, principals, tenant=tenant))

    def groups(self, *, tenant: str = "default") -> dict[str, list[str]]:
        return self._call(self.aio.groups(tenant=tenant))

    def history(self, run_id: str, *, tenant: str = "default") -> list[Event]:
        return self._call(self.aio.history(run_id, tenant=tenant))

    def verify(self, run_id: str, *, tenant: str = "default") -> list[ChainProblem]:
        return self._call(self.aio.verify(run_id, tenant=tenant))

    def result(self, run_id: str, *, timeout: float | None = None, tenant: str = "default") -> Any:
        """Block until the run ends; return its result or raise its error."""
        return self._call(self.aio.result(run_id, timeout=timeout, tenant=tenant))

    def list_runs(
        self,
        *,
        tenant: str | None = "default",
        status: str | RunStatus | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        return self._call(
            self.aio.list_runs(tenant=tenant, status=status, workflow=workflow, limit=limit)
        )
