"""The engine: starts runs, turns events into decisions, commits them.

A workflow task is processed under a per-run lock: take the live instance
from the cache if it has seen the run's whole history, else replay; feed it
the new events; commit its commands, the snapshot and the side rows (tasks,
timers) in one transaction conditioned on the last sequence number and the
workflow task's fence. A failed condition means something arrived meanwhile:
drop the instance and do it again from the store; never merge blindly.

The happy path costs one commit per step: when an attempt this engine ran
finishes and the run's instance is cached, its result and the workflow's
next decisions go into the same transaction, and the next activity is
inserted already leased to this engine, so it starts without a poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
import traceback
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from waypost.errors import (
    ConfigurationError,
    NondeterminismError,
    ResultTimeout,
    RunIdConflict,
    RunNotActive,
    RunNotFound,
    StoreCorrupted,
    StoreError,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowTerminated,
)
from waypost.model.codec import Codec, JsonCodec, error_to_json
from waypost.model.definitions import Limits
from waypost.model.events import (
    ChainProblem,
    Event,
    EventType,
    NewEvent,
    canonical_json,
    verify_chain,
)
from waypost.model.status import RunStatus
from waypost.store import open_store
from waypost.store.base import (
    ActivityTaskOp,
    ActivityUpdate,
    CommitResult,
    Conflict,
    CreateRunResult,
    NewActivityTask,
    NewApproval,
    NewRun,
    NewTimer,
    RunCommit,
    RunRecord,
    Snapshot,
    Store,
    WorkflowTaskOp,
)

from .approvals import (
    ApprovalInfo,
    Approvals,
    DecisionReceipt,
    Directory,
)
from .definitions import Definitions
from .faults import Crash, FaultPlan, NoFaults
from .http import SecretSource, make_http_activity
from .interpreter import DEFINITIONS_QUEUE
from .records import AsyncRunHandle, DefinitionInfo, MigrationReport, RunInfo
from .registry import Registry, WorkflowDefn
from .runtime import WorkflowInstance
from .scheduler import Scheduler
from .senders import Sender
from .worker import Attempt, Outcome, Worker

log = logging.getLogger("waypost")
_E = EventType
_MAX_ID = 200
_OUTCOME_STATUS = {
    _E.RUN_COMPLETED: RunStatus.COMPLETED,
    _E.RUN_FAILED: RunStatus.FAILED,
    _E.RUN_CANCELLED: RunStatus.CANCELLED,
}


def _seconds(value: timedelta | float) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def new_run_id() -> str:
    """Time-ordered and unguessable: 12 hex digits of milliseconds, 16 random."""
    return f"{int(time.time() * 1000):012x}{secrets.token_hex(8)}"


def _check_id(kind: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_ID:
        raise ValueError(
            f"{kind} must be a non-empty string of at most {_MAX_ID} characters, got {value!r}"
        )
    if any(ord(ch) < 32 for ch in value):
        raise ValueError(f"{kind} {value!r} contains control characters")
    return value


@dataclass(slots=True)
class _Live:
    """A cached instance and the workflow task fence it was built under."""

    inst: WorkflowInstance
    fence: int


class _RunLocks:
    """One asyncio lock per run, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], list[Any]] = {}

    async def acquire(self, key: tuple[str, str]) -> None:
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            await entry[0].acquire()
        except BaseException:
            self._drop(key, entry)
            raise

    def release(self, key: tuple[str, str]) -> None:
        entry = self._locks[key]
        entry[0].release()
        self._drop(key, entry)

    def _drop(self, key: tuple[str, str], entry: list[Any]) -> None:
        entry[1] -= 1
        if entry[1] == 0:
            del self._locks[key]


class AsyncEngine:
    """The waypost engine for asyncio applications.

    `url` is `sqlite:///path.db` (default `sqlite:///waypost.db`). Options:
    `lease` (how long a task stays leased without renewal, so how soon a
    crashed engine's work is taken over), `poll_interval` (how often idle
    workers look for work from other processes and the scheduler looks for
    due timers), `cache_size` (live runs kept in memory), `max_activities`
    (attempts running at once), `max_workflows` (workflow tasks claimed from
    the queue and in progress at once; runs this engine starts itself do not
    wait for it), `activity_threads` (threads for sync
    activities), `shutdown_grace` (how long a stop waits for running
    attempts). Workflows defined as data: `serve_definitions` (run the
    workflow tasks of definition runs here, default True), `http_allow` (hosts
    `http` steps may call, e.g. `["api.example.com", "*.example.org"]`; an
    engine without it does not take `http` steps), `http_secrets` (`(tenant, name)
    -> secret` for signing `http` steps; by default environment variables
    `WAYPOST_SECRET_<TENANT>__<NAME>` or `WAYPOST_SECRET_<NAME>`), `limits`
    (what definitions may contain: one `Limits` for all tenants, a mapping of
    tenant -> `Limits` where "*" is the fallback, or a function of the tenant).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        store: Store | None = None,
        codec: Codec | None = None,
        lease: timedelta | float = timedelta(seconds=30),
        poll_interval: timedelta | float = timedelta(milliseconds=500),
        cache_size: int = 1000,
        max_activities: int = 100,
        max_workflows: int = 128,
        activity_threads: int = 32,
        shutdown_grace: timedelta | float = timedelta(seconds=30),
        clock: Callable[[], float] | None = None,
        worker_id: str | None = None,
        faults: FaultPlan | None = None,
        directory: Directory | None = None,
        notifier: Sender | None = None,
        approval_url: str = "http://localhost:8000/approvals",
        serve_definitions: bool = True,
        http_allow: Sequence[str] | None = None,
        http_secrets: SecretSource | None = None,
        limits: Limits | Mapping[str, Limits] | Callable[[str], Limits] | None = None,
    ) -> None:
        self.store: Store = store if store is not None else open_store(url)
        self.url = self.store.url
        self.registry = Registry()
        self.serve_definitions = serve_definitions
        if http_allow:
            # Only engines allowed to call out serve `http` steps of definitions.
            self.registry.add(make_http_activity(allow=http_allow, secrets=http_secrets))
        self.codec: Codec = codec or JsonCodec()
        self.lease = _seconds(lease)
        self.poll_interval = _seconds(poll_interval)
        self.shutdown_grace = _seconds(shutdown_grace)
        if self.lease <= 0 or self.poll_interval <= 0:
            raise ConfigurationError("lease and poll_interval must be positive")
        if cache_size < 0 or max_activities < 1 or activity_threads < 1 or max_workflows < 1:
            raise ConfigurationError(
                "cache_size must be >= 0; max_activities, max_workflows and activity_threads >= 1"
            )
        self.max_workflows = max_workflows
        self.cache_size = cache_size
        self.clock: Callable[[], float] = clock or time.time
        self.faults: FaultPlan = faults or NoFaults()
        self.owner = worker_id or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.worker = Worker(self, max_activities, activity_threads)
        self.scheduler = Scheduler(self)
        self._approvals = Approvals(self, directory, notifier, approval_url)
        self._cache: OrderedDict[tuple[str, str], _Live] = OrderedDict()
        self._definitions = Definitions(self, limits)
        self._locks = _RunLocks()
        self._waiters: dict[tuple[str, str], list[asyncio.Future[None]]] = {}
        self._spawned: set[asyncio.Task[Any]] = set()
        self._opened = False
        self.accepting = False  # running workers: take new work into this process
        if hasattr(self.store, "inline_probe"):
            self.store.inline_probe = self._nearly_idle

    def _nearly_idle(self) -> bool:
        return self.worker.started <= 1 and len(self.scheduler.processing) <= 1

    # == lifecycle ============================================================
    async def open(self) -> AsyncEngine:
        if not self._opened:
            await self.store.open()
            self._opened = True
        return self

    async def close(self) -> None:
        if self.accepting:
            await self.stop_serving()
        for task in list(self._spawned):
            task.cancel()
        if self._spawned:
            await asyncio.gather(*self._spawned, return_exceptions=True)
        for live in self._cache.values():
            live.inst.close()
        self._cache.clear()
        self.worker.shutdown()
        if self._opened:
            await self.store.close()
            self._opened = False

    async def abandon(self) -> None:
        """Stop at once, as a process that crashed would (for tests and simulations).

        Everything in motion is cancelled; nothing is released or written, so
        this engine's leases lapse and other engines take its work over. Then
        the store's connections are closed.
        """
        self.accepting = False
        tasks = [*self.scheduler.abandon(), *self._spawned]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for live in self._cache.values():
            live.inst.close()
        self._cache.clear()
        self.worker.shutdown()
        if self._opened:
            self._opened = False
            with contextlib.suppress(Exception):
                await self.store.close()

    async def __aenter__(self) -> AsyncEngine:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def register(self, *items: Any) -> AsyncEngine:
        """Make workflows and activities (decorated functions) known to this engine."""
        for item in items:
            self.registry.add(item)
        if self.accepting:
            self.scheduler.refresh_queues()
        return self

    # == serving ==============================================================
    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[AsyncEngine]:
        """Run workers and the scheduler in this process for the block."""
        await self.start_serving()
        try:
            yield self
        finally:
            await self.stop_serving()

    async def start_serving(self) -> None:
        await self.open()
        if self.accepting:
            return
        self.accepting = True
        self.scheduler.start()

    async def stop_serving(self, grace: float | None = None) -> None:
        """Stop taking work; let running attempts finish for up to `grace` seconds."""
        if not self.accepting:
            return
        self.accepting = False
        await self.scheduler.stop_polling()
        grace = self.shutdown_grace if grace is None else grace
        pending = [t for t in self._spawned if not t.done()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=grace)
            if still:
                log.warning(
                    "%d task(s) still running after the %.1fs shutdown grace; "
                    "their leases will lapse",
                    len(still),
                    grace,
                )
        await self.scheduler.stop()

    async def run_forever(self, stop: asyncio.Event | None = None) -> None:
        """Serve until `stop` is set (or the task is cancelled), then stop gracefully."""
        await self.start_serving()
        try:
            await (stop.wait() if stop is not None else asyncio.Event().wait())
        finally:
            await self.stop_serving()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._spawned.add(task)
        task.add_done_callback(self._reap)
        return task

    def _reap(self, task: asyncio.Task[Any]) -> None:
        self._spawned.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, Crash):
            log.debug("task ended by a simulated crash: %s", exc)
        elif isinstance(exc, StoreError):
            # The database failed (a restart, a lost connection): the task's lease
            # lapses and the work is taken up again; no traceback needed.
            log.warning("work put off by a database error: %s", exc)
        elif exc is not None:
            log.error("background task failed", exc_info=exc)

    def serves_workflow(self, queue: str) -> bool:
        return self.accepting and queue in self.scheduler.workflow_queues

    # == the API ==============================================================
    async def start(
        self,
        workflow: Any,
        input: Any = None,
        *,
        run_id: str | None = None,
        tenant: str = "default",
        version: str | int | None = None,
        started_by: str | None = None,
    ) -> AsyncRunHandle:
        """Start a run; with `run_id`, starting the same run again returns it.

        `started_by` names the principal who started it (recorded in the history;
        by default that principal may not approve the run's approvals).

        A name that no registered workflow has starts a run of the tenant's
        published definition of that name: the newest version, or `version`.
        Its input must satisfy the definition's input schema (`InputError`).
        """
        await self.open()
        tenant = _check_id("tenant", tenant)
        if isinstance(workflow, str) and not self.registry.has_workflow(workflow):
            return await self._definitions.start(
                workflow, input, run_id=run_id, tenant=tenant, version=version, by=started_by
            )
        defn = self.registry.workflow(workflow, None if version is None else str(version))
        payload = self.codec.encode(input)
        started_data: dict[str, Any] = {
            "workflow": defn.name,
            "version": defn.version,
            "input": payload,
        }
        return await self._create_run(
            tenant, run_id, defn.name, defn.version, payload, started_data, defn.queue, started_by
        )

    async def _create_run(
        self,
        tenant: str,
        run_id: str | None,
        workflow: str,
        version: str,
        payload: Any,
        started_data: dict[str, Any],
        queue: str,
        started_by: str | None,
    ) -> AsyncRunHandle:
        run_id = _check_id("run_id", run_id) if run_id is not None else new_run_id()
        now = self.clock()
        if started_by is not None:
            started_data["started_by"] = _check_id("started_by", started_by)
        started = NewEvent(_E.RUN_STARTED, started_data, now)
        claim = self.serves_workflow(queue)
        result = await self._create(
            NewRun(
                tenant=tenant,
                run_id=run_id,
                workflow=workflow,
                version=version,
                input=payload,
                ts=now,
                started=started,
                claim_owner=self.owner if claim else None,
                lease=self.lease,
                queue=queue,
            )
        )
        run = result.run
        if not result.created:
            if run.workflow != workflow or run.input_json != canonical_json(payload):
                raise RunIdConflict(
                    f"run {run_id!r} exists already (workflow {run.workflow!r}) with a different "
                    "workflow or input; use another run_id"
                )
            return AsyncRunHandle(self, run_id, tenant)
        if result.workflow_fence is not None:
            first = Event(1, _E.RUN_STARTED, started.data, now, run.last_hash, started.encode())
            self.spawn(
                self._process(
                    tenant, run_id, result.workflow_fence, queue, preloaded=(run, [first])
                )
            )
        return AsyncRunHandle(self, run_id, tenant)

    async def signal(
        self, run_id: str, name: str, payload: Any = None, *, tenant: str = "default"
    ) -> None:
        """Deliver a signal; the run sees it at its next wait for `name`."""
        await self.open()
        _check_id("signal name", name)
        data = {"name": name, "payload": self.codec.encode(payload)}
        await self._external(
            tenant, run_id, [NewEvent(_E.SIGNAL_RECEIVED, data, self.clock())], f"signal {name!r}"
        )

    async def cancel(self, run_id: str, reason: str, *, tenant: str = "default") -> None:
        """Ask a run to stop: work not started is dropped, the run ends `cancelled`."""
        await self.open()
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError("cancel needs a reason")
        run = await self.store.get_run(tenant, run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in tenant {tenant!r}")
        now = self.clock()
        requested = NewEvent(_E.CANCEL_REQUESTED, {"reason": reason}, now)
        if run.status == RunStatus.SUSPENDED:
            # Suspended code cannot run its cancellation; end the run directly.
            ended = NewEvent(_E.RUN_CANCELLED, {"reason": reason}, now)
            res = await self._commit(
                RunCommit(
                    tenant=tenant,
                    run_id=run_id,
                    events=[requested, ended],
                    now=now,
                    expect_seq=run.last_seq,
                    expect_hash=run.last_hash,
                    snapshot=Snapshot(
                        RunStatus.CANCELLED.value,
                        [],
                        run.processed_seq,
                        error={"type": "Cancelled", "message": reason},
                        finished=True,
                    ),
                    close_run_approvals="cancelled",
                )
            )
            if res.ok:
                self._evict((tenant, run_id))
                self._notify_finished((tenant, run_id))
                return
            if res.conflict is not Conflict.SEQ:
                raise RunNotFound(f"no run {run_id!r} in tenant {tenant!r}")
        # Outstanding approval credentials die with the request, before the code runs.
        await self._external(tenant, run_id, [requested], "cancel", close_approvals="cancelled")

    async def _external(
        self,
        tenant: str,
        run_id: str,
        events: list[NewEvent],
        what: str,
        close_approvals: str | None = None,
    ) -> None:
        """Append events from outside the workflow and wake the run."""
        res = await self._commit(
            RunCommit(
                tenant=tenant,
                run_id=run_id,
                events=events,
                now=self.clock(),
                require_active=True,
                close_run_approvals=close_approvals,
                workflow_op=WorkflowTaskOp.CLAIM if self.accepting else WorkflowTaskOp.WAKE,
                owner=self.owner,
                lease=self.lease,
                claim_queues=self.scheduler.workflow_queues,
            )
        )
        if res.conflict is Conflict.RUN_NOT_FOUND:
            raise RunNotFound(f"no run {run_id!r} in tenant {tenant!r}")
        if res.conflict is Conflict.RUN_FINISHED:
            raise RunNotActive(f"cannot {what}: run {run_id!r} has finished ({res.status})")
        if res.workflow_fence is not None:
            self.spawn(self._process(tenant, run_id, res.workflow_fence, res.workflow_queue))
        else:
            self.scheduler.wake()

    # == approvals ================================================================
    async def approvals(
        self,
        principal: str | None = None,
        status: str | None = "pending",
        *,
        tenant: str = "default",
        run_id: str | None = None,
        limit: int = 100,
    ) -> list[ApprovalInfo]:
        """Approvals in `tenant` (pending by default); with `principal`, those they may decide."""
        await self.open()
        return await self._approvals.list(
            principal, status, tenant=tenant, run_id=run_id, limit=limit
        )

    async def approval(self, approval_id: str, *, tenant: str = "default") -> ApprovalInfo:
        """One approval; `LookupError` if this tenant has none by that id."""
        await self.open()
        info = await self._approvals.get(approval_id, tenant=tenant)
        if info is None:
            raise LookupError(f"no approval {approval_id!r} in tenant {tenant!r}")
        return info

    async def decide(
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
        """Decide ("approve" or "reject") as `principal`, with their credential `token`.

        `auth` says how the caller authenticated `principal` (recorded in the audit).
        Raises `InvalidCredential` or `DecisionRefused`; both are recorded too.
        """
        await self.open()
        return await self._approvals.decide(
            approval_id, token, principal, decision, comment, tenant=tenant, auth=auth
        )

    async def revoke(
        self, approval_id: str, principal: str, *, by: str, reason: str, tenant: str = "default"
    ) -> None:
        """Remove an approver from a pending approval; their credentials stop working."""
        await self.open()
        await self._approvals.revoke(approval_id, principal, by=by, reason=reason, tenant=tenant)

    async def reassign(
        self,
        approval_id: str,
        from_principal: str,
        to_principal: str,
        *,
        by: str,
        reason: str,
        tenant: str = "default",
    ) -> None:
        """Replace an approver of a pending approval; the new one is notified."""
        await self.open()
        await self._approvals.reassign(
            approval_id, from_principal, to_principal, by=by, reason=reason, tenant=tenant
        )

    async def add_to_group(
        self, group: str, principals: Sequence[str], *, tenant: str = "default"
    ) -> int:
        """Add members to a group of the built-in directory; returns how many were new."""
        await self.open()
        _check_id("group", group)
        for p in principals:
            _check_id("principal", p)
        return await self.store.add_group_members(tenant, group, list(principals), self.clock())

    async def remove_from_group(
        self, group: str, principals: Sequence[str], *, tenant: str = "default"
    ) -> int:
        """Remove members from a group of the built-in directory; returns how many were."""
        await self.open()
        return await self.store.remove_group_members(tenant, group, list(principals))

    async def groups(self, *, tenant: str = "default") -> dict[str, list[str]]:
        """The built-in directory's groups of `tenant` and their members."""
        await self.open()
        return await self.store.list_groups(tenant)

    # == definitions ==============================================================
    async def publish(
        self,
        definition: str | bytes | dict[str, Any],
        *,
        tenant: str = "default",
        by: str | None = None,
        limits: Limits | None = None,
    ) -> DefinitionInfo:
        """Validate a definition (YAML/JSON text or a dict) and freeze it as a version.

        Publishing content identical to a published version returns that version.
        Raises `DefinitionError` listing every problem; then nothing is published.
        Activity names are checked against this engine's registered activities, if
        it has any.
        """
        await self.open()
        return await self._definitions.publish(
            definition, tenant=_check_id("tenant", tenant), by=by, limits=limits
        )

    def limits_for(self, tenant: str) -> Limits:
        """What `tenant`'s definitions may contain (the engine's `limits` option)."""
        return self._definitions.limits_for(tenant)

    async def definitions(self, *, tenant: str = "default") -> list[DefinitionInfo]:
        """Every published version of every definition of `tenant`."""
        await self.open()
        return await self._definitions.versions(tenant=tenant)

    async def definition(
        self, name: str, version: int | None = None, *, tenant: str = "default"
    ) -> DefinitionInfo:
        """One version (the newest by default); `LookupError` if there is none."""
        await self.open()
        return await self._definitions.get(name, version, tenant=tenant)

    async def migrate(
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
        """Move a waiting definition run to another version of its definition.

        `mapping` takes the step where the run waits to a step of the new version
        (by default the step of the same id). The move is checked first: the run
        must wait at a top-level approval or wait step, and the new version must be
        able to go on from the mapped step with the data the run has. The report
        says whether it can and why not; with `dry_run` nothing is written.
        Otherwise a RunMigrated event records from/to version, the mapping, `by`
        (by default the user running this process) and `reason`; an open
        approval of the step is revoked at once (its credentials die) and the
        run enters the mapped step afresh.
        """
        await self.open()
        return await self._definitions.migrate(
            run_id,
            to_version,
            mapping,
            reason,
            dry_run,
            by=by,
            tenant=_check_id("tenant", tenant),
        )

    async def migrate_all(
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
        """`migrate` every unfinished run of one version of a definition; a report per run."""
        await self.open()
        return await self._definitions.migrate_all(
            definition,
            from_version,
            to_version,
            mapping,
            reason,
            dry_run,
            by=by,
            tenant=tenant,
        )

    async def get(self, run_id: str, *, tenant: str = "default") -> RunInfo:
        await self.open()
        run = await self.store.get_run(tenant, run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in tenant {tenant!r}")
        return await self._info(run)

    async def _info(self, run: RunRecord) -> RunInfo:
        status = RunStatus(run.status)
        defn = self.registry.find_workflow(run.workflow, run.version)
        waiting = list(run.waiting_for)
        if not status.finished and status is not RunStatus.SUSPENDED and defn is None:
            queue = f"{run.workflow}@{run.version}"
            if run.version.isdigit() and await self.store.get_definition(
                run.tenant, run.workflow, int(run.version)
            ):
                queue = DEFINITIONS_QUEUE
            workers = await self.store.live_workers(self.clock() - self.scheduler.worker_ttl)
            if not any(queue in w.queues for w in workers):
                detail = (
                    "no running worker serves definition runs"
                    if queue == DEFINITIONS_QUEUE
                    else f"workflow {run.workflow!r} version {run.version!r} is not "
                    "registered by any running worker"
                )
                waiting.append({"kind": "code", "detail": detail})
        result = run.result
        if defn is not None and status is RunStatus.COMPLETED:
            with contextlib.suppress(Exception):
                result = self.codec.decode(run.result, defn.result_hint)
        from datetime import UTC, datetime

        def dt(ts: float) -> datetime:
            return datetime.fromtimestamp(ts, UTC)

        return RunInfo(
            tenant=run.tenant,
            run_id=run.run_id,
            workflow=run.workflow,
            version=run.version,
            status=status,
            input=run.input,
            result=result,
            error=run.error,
            waiting_for=waiting,
            last_seq=run.last_seq,
            created_at=dt(run.created_at),
            updated_at=dt(run.updated_at),
            finished_at=dt(run.finished_at) if run.finished_at is not None else None,
        )

    async def list_runs(
        self,
        *,
        tenant: str | None = "default",
        status: str | RunStatus | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        await self.open()
        if status is not None:
            status = RunStatus(status).value
        runs = await self.store.list_runs(tenant, status, workflow, limit)
        return [await self._info(r) for r in runs]

    async def history(self, run_id: str, *, tenant: str = "default") -> list[Event]:
        await self.open()
        run, events = await self.store.load_run(tenant, run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in tenant {tenant!r}")
        return events

    async def verify(self, run_id: str, *, tenant: str = "default") -> list[ChainProblem]:
        """Problems in the run's hash chain (empty when the history is intact)."""
        events = await self.history(run_id, tenant=tenant)
        problems = verify_chain(events)
        run = await self.store.get_run(tenant, run_id)
        if (
            run is not None
            and events
            and (run.last_seq, run.last_hash) != (events[-1].seq, events[-1].hash)
        ):
            problems.append(
                ChainProblem(run.last_seq, "the run's snapshot does not point at its last event")
            )
        return problems

    async def result(
        self, run_id: str, *, timeout: float | None = None, tenant: str = "default"
    ) -> Any:
        """Wait for the run to end; return its result or raise its error.

        A database that is briefly unreachable does not end the wait: it is
        retried until the timeout.
        """
        await self.open()
        key = (tenant, run_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = 0.01
        state = "unknown"
        while True:
            try:
                run = await self.store.get_run(tenant, run_id)
            except StoreError as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                log.warning("reading run %s failed, retrying: %s", run_id, exc)
                run, backoff = None, max(backoff, 0.2)
            else:
                if run is None:
                    raise RunNotFound(f"no run {run_id!r} in tenant {tenant!r}")
                status = RunStatus(run.status)
                if status.finished:
                    return self._outcome(run, status)
                state = status.value
                if self.serves_workflow(f"{run.workflow}@{run.version}"):
                    # This engine will most likely finish it and wake us; polling
                    # is only the fallback for another process finishing it.
                    backoff = self.poll_interval
            wait = min(backoff, self.poll_interval) if run is not None else backoff
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ResultTimeout(f"run {run_id!r} is still {state} after {timeout}s")
                wait = min(wait, remaining)
            fut = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(key, []).append(fut)
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):  # not wait_for: see Scheduler._sleep
                        await fut
            finally:
                waiters = self._waiters.get(key)
                if waiters is not None and fut in waiters:
                    waiters.remove(fut)
                    if not waiters:
                        del self._waiters[key]
            backoff = min(backoff * 1.5, self.poll_interval)

    def _outcome(self, run: RunRecord, status: RunStatus) -> Any:
        if status is RunStatus.COMPLETED:
            defn = self.registry.find_workflow(run.workflow, run.version)
            return self.codec.decode(run.result, defn.result_hint if defn else Any)
        if status is RunStatus.FAILED:
            raise WorkflowFailed(run.run_id, status.value, run.error)
        if status is RunStatus.CANCELLED:
            raise WorkflowCancelled(run.run_id, status.value, run.error)
        raise WorkflowTerminated(run.run_id, status.value, run.error)

    def _notify_finished(self, key: tuple[str, str]) -> None:
        for fut in self._waiters.pop(key, []):
            if not fut.done():
                fut.set_result(None)

    async def _commit(self, commit: RunCommit) -> CommitResult:
        self.faults.hit("commit:before")
        res = await self.store.commit_run(commit)
        self.faults.hit("commit:after")
        return res

    async def _create(self, new: NewRun) -> CreateRunResult:
        self.faults.hit("commit:before")
        res = await self.store.create_run(new)
        self.faults.hit("commit:after")
        return res

    # == the cache ============================================================
    def _cache_get(self, key: tuple[str, str]) -> _Live | None:
        live = self._cache.get(key)
        if live is not None:
            self._cache.move_to_end(key)
        return live

    def _cache_put(self, key: tuple[str, str], live: _Live) -> None:
        if self.cache_size == 0:
            live.inst.close()
            return
        self._cache[key] = live
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            _, old = self._cache.popitem(last=False)
            old.inst.close()

    def _evict(self, key: tuple[str, str]) -> None:
        live = self._cache.pop(key, None)
        if live is not None:
            live.inst.close()

    def _new_instance(self, defn: WorkflowDefn, tenant: str, run_id: str) -> WorkflowInstance:
        return WorkflowInstance(
            workflow=defn,
            activities=self.registry.activities(),
            codec=self.codec,
            tenant=tenant,
            run_id=run_id,
            clock=self.clock,
        )

    # == workflow tasks =======================================================
    async def _process(
        self,
        tenant: str,
        run_id: str,
        fence: int,
        queue: str,
        preloaded: tuple[RunRecord, list[Event]] | None = None,
    ) -> None:
        key = (tenant, run_id)
        await self._locks.acquire(key)
        try:
            await self._process_locked(key, fence, preloaded)
        finally:
            self._locks.release(key)

    async def _process_locked(
        self,
        key: tuple[str, str],
        fence: int,
        preloaded: tuple[RunRecord, list[Event]] | None = None,
    ) -> None:
        tenant, run_id = key
        self.scheduler.processing[key] = fence
        try:
            for _ in range(8):
                live = self._cache_get(key)
                extra: list[NewEvent] = []
                if live is not None and live.fence in (fence, fence - 1) and not live.inst.closed:
                    # Nobody else held the task since this instance was built.
                    live.fence = fence
                    run, new = await self.store.load_run(tenant, run_id, live.inst.last_seq)
                    if run is None or RunStatus(run.status).finished:
                        self._evict(key)
                        return
                    if any(ev.type == _E.RUN_MIGRATED for ev in new):
                        self._evict(key)  # replay loads the version the run moves to
                        continue
                    try:
                        for ev in new:
                            live.inst.apply_new(ev)
                    except Exception:
                        self._evict(key)  # replay from the store decides what it was
                        continue
                else:
                    self._evict(key)
                    if preloaded is not None:
                        run, history = preloaded
                        preloaded = None
                    else:
                        run, history = await self.store.load_run(tenant, run_id)
                    if run is None or RunStatus(run.status).finished:
                        return
                    defn = self.registry.find_workflow(run.workflow, run.version)
                    if defn is None and history and "definition" in history[0].data:
                        try:
                            defn = await self._definitions.workflow(run, history)
                        except Exception as err:
                            if isinstance(err, StoreError) and not isinstance(err, StoreCorrupted):
                                raise
                            # A version that no longer loads: an operator must look.
                            await self._suspend(run, fence, err)
                            return
                    if defn is None:
                        return
                    inst = self._new_instance(defn, tenant, run_id)
                    try:
                        inst.replay(history, run.processed_seq)
                    except Exception as err:
                        # Non-determinism, or a failure the workflow code cannot see
                        # (a broken codec, a bug): an operator must look.
                        inst.close()
                        await self._suspend(run, fence, err)
                        return
                    if run.status == RunStatus.SUSPENDED:
                        extra.append(
                            NewEvent(
                                _E.RUN_RESUMED,
                                {"reason": f"replay matches the history on {self.owner}"},
                                self.clock(),
                            )
                        )
                    live = _Live(inst, fence)
                inst = live.inst
                commit, reserved = self._decide(
                    key, live, extra, inst.last_seq, inst.last_hash, inst.last_seq
                )
                res = await self._commit_decisions(key, commit, reserved)
                if res.ok:
                    self._committed(key, live, commit, res, reserved)
                    return
                self.worker.unreserve(reserved)
                self._evict(key)
                if res.conflict is not Conflict.SEQ:
                    return
            log.warning(
                "run %s/%s: gave up after repeated conflicts; it will be retried", tenant, run_id
            )
        finally:
            if self.scheduler.processing.get(key) == fence:
                del self.scheduler.processing[key]

    async def _suspend(self, run: RunRecord, fence: int, err: Exception) -> None:
        if isinstance(err, NondeterminismError):
            error = {"type": "NondeterminismError", "message": str(err)}
            detail = "the workflow code no longer matches the run's history"
        else:
            error = error_to_json(err, traceback_text="".join(traceback.format_exception(err)))
            detail = f"replaying the run failed: {type(err).__name__}: {err}"
        now = self.clock()
        same = (run.error or {}).get("message") == error["message"]
        if run.status == RunStatus.SUSPENDED and same:
            events: list[NewEvent] = []
        else:
            log.error("suspending run %s/%s: %s", run.tenant, run.run_id, error["message"])
            events = [NewEvent(_E.RUN_SUSPENDED, {"error": error}, now)]
        await self._commit(
            RunCommit(
                tenant=run.tenant,
                run_id=run.run_id,
                events=events,
                now=now,
                expect_seq=run.last_seq,
                expect_hash=run.last_hash,
                workflow_fence=fence,
                workflow_op=WorkflowTaskOp.IDLE,
                snapshot=Snapshot(
                    RunStatus.SUSPENDED.value,
                    [{"kind": "operator", "detail": detail}],
                    run.processed_seq,
                    error=error,
                ),
            )
        )

    def _decide(
        self,
        key: tuple[str, str],
        live: _Live,
        fed: Sequence[NewEvent],
        expect_seq: int,
        expect_hash: str,
        processed_seq: int,
        activity: ActivityUpdate | None = None,
    ) -> tuple[RunCommit, int]:
        """The commit for what the instance decided; also how many local slots it took."""
        tenant, run_id = key
        inst = live.inst
        commands = inst.take_commands()
        now = self.clock()
        new_activities: list[NewActivityTask] = []
        cancel_activities: list[str] = []
        new_timers: list[NewTimer] = []
        cancel_timers: list[str] = []
        new_approvals: list[NewApproval] = []
        close_approvals: list[tuple[str, str]] = []
        escalations: list[tuple[str, str]] = []
        reserved = 0
        served = self.scheduler.activity_queues
        finished = inst.outcome is not None
        # A step scheduled and cancelled in the same activation (or by a run that
        # ends in it) gets no task: work that has not started is never started.
        dropped = {ev.data["step"] for ev in commands if ev.type == _E.ACTIVITY_CANCEL_REQUESTED}
        for ev in commands:
            t, d = ev.type, ev.data
            if t == _E.ACTIVITY_SCHEDULED:
                if finished or d["step"] in dropped:
                    continue
                local = self.accepting and d["activity"] in served and self.worker.reserve()
                reserved += local
                new_activities.append(
                    NewActivityTask(
                        step=d["step"],
                        activity=d["activity"],
                        spec=d,
                        timeout=float(d["timeout"]),
                        heartbeat_timeout=d.get("heartbeat_timeout"),
                        owner=self.owner if local else None,
                        lease=self.lease,
                    )
                )
            elif t == _E.ACTIVITY_CANCEL_REQUESTED:
                cancel_activities.append(d["step"])
            elif t == _E.TIMER_STARTED:
                new_timers.append(NewTimer(d["step"], float(d["fire_at"])))
            elif t == _E.TIMER_CANCELLED:
                cancel_timers.append(d["step"])
            elif t == _E.APPROVAL_REQUESTED:
                new_approvals.append(
                    NewApproval(
                        approval_id=d["approval_id"],
                        step=d["step"],
                        timer_step=d.get("timer_step"),
                        name=d["name"],
                        policy=d["policy"],
                        started_by=d.get("started_by"),
                        data=d.get("data"),
                        expires_at=d.get("expires_at"),
                    )
                )
            elif t == _E.APPROVAL_CLOSED:
                close_approvals.append((d["approval_id"], d["status"]))
            elif t == _E.APPROVAL_ESCALATED:
                escalations.append((d["approval_id"], d["group"]))
        outcome = inst.outcome
        if outcome is not None:
            status = _OUTCOME_STATUS[outcome.type]
            error = outcome.data.get("error")
            if status is RunStatus.CANCELLED:
                error = {"type": "Cancelled", "message": outcome.data.get("reason", "")}
            snapshot = Snapshot(
                status.value,
                [],
                processed_seq,
                result=outcome.data.get("result"),
                error=error,
                finished=True,
            )
            workflow_op = WorkflowTaskOp.DELETE
        else:
            status, waiting = inst.snapshot()
            snapshot = Snapshot(status.value, waiting, processed_seq)
            workflow_op = WorkflowTaskOp.IDLE
        commit = RunCommit(
            tenant=tenant,
            run_id=run_id,
            events=[*fed, *commands],
            now=now,
            expect_seq=expect_seq,
            expect_hash=expect_hash,
            snapshot=snapshot,
            workflow_fence=live.fence,
            workflow_op=workflow_op,
            activity=activity,
            new_activities=new_activities,
            cancel_activities=cancel_activities,
            new_timers=new_timers,
            cancel_timers=cancel_timers,
            new_approvals=new_approvals,
            close_approvals=close_approvals,
            escalate_approvals=escalations,
            # A run that ends while still asking: nobody may decide any more.
            close_run_approvals="cancelled" if finished and inst.asking else None,
        )
        return commit, reserved

    def _committed(
        self, key: tuple[str, str], live: _Live, commit: RunCommit, res: CommitResult, reserved: int
    ) -> None:
        inst = live.inst
        inst.last_seq, inst.last_hash = res.last_seq, res.last_hash
        if inst.finished:
            self._evict(key)
            inst.close()
            self._notify_finished(key)
        else:
            self._cache_put(key, live)
        started = 0
        for na in commit.new_activities:
            if na.owner is None:
                continue
            started += 1
            attempt = Attempt(
                tenant=key[0],
                run_id=key[1],
                step=na.step,
                activity=na.activity,
                fence=1,
                attempt=1,
                spec=na.spec,
                deadline=commit.now + na.timeout,
            )
            self.worker.start(attempt)
        if started < reserved:
            self.worker.unreserve(reserved - started)
        if started < len(commit.new_activities):
            self.scheduler.wake()  # some went to the queue: a free worker may take them
        for timer in commit.new_timers:
            self.scheduler.note_timer(timer.fire_at)
        if commit.new_approvals or commit.escalate_approvals:
            self._approvals.wake.set()

    # == activity outcomes ====================================================
    async def _commit_decisions(
        self, key: tuple[str, str], commit: RunCommit, reserved: int
    ) -> CommitResult:
        """Commit what an instance decided; if the commit fails, the instance is stale."""
        try:
            return await self._commit(commit)
        except BaseException:
            self.worker.unreserve(reserved)
            self._evict(key)
            raise

    async def _report(self, a: Attempt, outcome: Outcome) -> None:
        """Record an attempt's outcome; if final, let the workflow decide in the same commit.

        A store error is retried a few times; if it persists, the outcome is
        lost, the task's lease lapses and the step runs again (at least once).
        """
        key = (a.tenant, a.run_id)
        for delay in (0.1, 0.5, 1.0, 2.0, 4.0, None):
            await self._locks.acquire(key)
            try:
                await self._report_locked(key, a, outcome)
                return
            except StoreError as exc:
                if delay is None:
                    log.error(
                        "could not record the outcome of %s step %s attempt %d (%s); "
                        "the step will run again once its lease lapses",
                        a.run_id,
                        a.step,
                        a.attempt,
                        exc,
                    )
                    return
                log.warning("recording an outcome failed, retrying in %.1fs: %s", delay, exc)
            finally:
                self._locks.release(key)
            await asyncio.sleep(delay)

    async def _report_locked(self, key: tuple[str, str], a: Attempt, outcome: Outcome) -> None:
        now = self.clock()
        if not outcome.ok and outcome.retrying:
            res = await self._commit(
                RunCommit(
                    tenant=a.tenant,
                    run_id=a.run_id,
                    events=[NewEvent(_E.ACTIVITY_FAILED, outcome.event_data(a), now)],
                    now=now,
                    activity=ActivityUpdate(
                        a.step,
                        a.fence,
                        ActivityTaskOp.RETRY,
                        outcome.retry_at,
                        outcome.heartbeat_details,
                    ),
                )
            )
            if res.conflict is Conflict.ACTIVITY_FENCE:
                await self._late(a, outcome)
            elif res.ok:
                self._advance_cached(key, res)
                if outcome.retry_at is not None:
                    self.scheduler.wake_at(outcome.retry_at)
            return

        type_ = _E.ACTIVITY_COMPLETED if outcome.ok else _E.ACTIVITY_FAILED
        fed = NewEvent(type_, outcome.event_data(a), now)
        done = ActivityUpdate(a.step, a.fence, ActivityTaskOp.DONE)
        live = self._cache_get(key)
        if live is not None and not live.inst.closed:
            inst = live.inst
            expect_seq, expect_hash = inst.last_seq, inst.last_hash
            try:
                inst.apply_new(Event(expect_seq + 1, type_, fed.data, now, ""))
            except Exception:
                self._evict(key)  # the slow path replays it and suspends if it must
            else:
                commit, reserved = self._decide(
                    key, live, [fed], expect_seq, expect_hash, expect_seq + 1, activity=done
                )
                res = await self._commit_decisions(key, commit, reserved)
                if res.ok:
                    self._committed(key, live, commit, res, reserved)
                    return
                self.worker.unreserve(reserved)
                self._evict(key)
                if res.conflict is Conflict.ACTIVITY_FENCE:
                    await self._late(a, outcome)
                    return
        res = await self._commit(
            RunCommit(
                tenant=a.tenant,
                run_id=a.run_id,
                events=[fed],
                now=now,
                activity=done,
                workflow_op=WorkflowTaskOp.CLAIM if self.accepting else WorkflowTaskOp.WAKE,
                owner=self.owner,
                lease=self.lease,
                claim_queues=self.scheduler.workflow_queues,
            )
        )
        if res.conflict is Conflict.ACTIVITY_FENCE:
            await self._late(a, outcome)
            return
        if res.workflow_fence is not None:
            await self._process_locked(key, res.workflow_fence)
        elif res.ok:
            self.scheduler.wake()

    def _advance_cached(self, key: tuple[str, str], res: CommitResult) -> None:
        """Let a cached instance see events appended by this engine that need no decision."""
        live = self._cache.get(key)
        if live is None or res.prev_seq != live.inst.last_seq:
            return
        for ev in res.events:
            live.inst.apply_new(ev)

    async def _late(self, a: Attempt, outcome: Outcome) -> None:
        """An outcome from an attempt that no longer holds its task: audit it, change nothing."""
        if outcome.synthetic:
            return  # a timeout another scheduler (or the attempt itself) already settled
        data: dict[str, Any] = {
            "step": a.step,
            "attempt": a.attempt,
            "fence": a.fence,
            "outcome": "completed" if outcome.ok else "failed",
            "reason": "the attempt no longer holds the task (its lease lapsed, it was retried, "
            "cancelled or the run ended)",
        }
        if outcome.ok:
            data["result"] = outcome.result
        else:
            data["error"] = outcome.error
        res = await self._commit(
            RunCommit(
                tenant=a.tenant,
                run_id=a.run_id,
                events=[NewEvent(_E.LATE_RESULT_IGNORED, data, self.clock())],
                now=self.clock(),
            )
        )
        if res.ok:
            self._advance_cached((a.tenant, a.run_id), res)

    async def stats(self) -> dict[str, Any]:
        return {
            "cached_runs": len(self._cache),
            "running_activities": len(self.worker.inflight),
            "store": getattr(self.store, "stats", {}),
        }
