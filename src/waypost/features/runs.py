"""The run operations: start, signal, cancel, and reading runs back.

Each handler takes a request the door has checked (`waypost.model.operations`)
and the principal who sent it; the tenant is the principal's. A start by a name
that no registered workflow has is a start of the tenant's published
definition of that name (`Definitions.start`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

from waypost.engine.compute import Recent
from waypost.engine.ports import Machinery, StartSignal
from waypost.engine.quotas import refused_append
from waypost.engine.scheduler import WORKER_TTL
from waypost.errors import (
    ComputeLimitExceeded,
    ResultTimeout,
    RunNotActive,
    RunNotFound,
    StoreError,
    UnknownWorkflow,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowTerminated,
)
from waypost.model import operations as ops
from waypost.model.audit import snapshot_disagreements
from waypost.model.events import (
    COMMAND_EVENTS,
    CancelRequested,
    ChainProblem,
    Event,
    EventType,
    NewEvent,
    RunCancelled,
    RunStarted,
    SignalReceived,
    canonical_json,
)
from waypost.model.identity import Principal, normal_identity, preview
from waypost.model.logs import logger
from waypost.model.operations_runs import HISTORY_PAGE_BYTES, RUN_PAGE_BYTES
from waypost.model.paging import RunCursor, decode_cursor
from waypost.model.quotas import Quotas
from waypost.model.records import HistoryPage, RunInfo, RunPage, Started
from waypost.model.requests import handles
from waypost.model.status import RunStatus, why_suspended
from waypost.runtime.interpreter import DEFINITIONS_QUEUE, definition_of
from waypost.runtime.registry import WorkflowDefn, version_key, workflow_queue
from waypost.store.base import (
    NO_LIMITS,
    Conflict,
    Limits,
    RunCommit,
    RunOutlook,
    RunRecord,
    Snapshot,
)
from waypost.store.effects import CloseRunApprovals, Effect

from .definitions import Definitions
from .next_action import next_action
from .stored import answer_of

log = logger("waypost")
_E = EventType


_ENDS = frozenset({EventType.RUN_COMPLETED, EventType.RUN_FAILED, EventType.RUN_CANCELLED})


def _cause(event: Event) -> int:
    """The event whose processing issued this command (0 when not recorded)."""
    cause = event.data.get("cause")
    return cause if isinstance(cause, int) and not isinstance(cause, bool) else 0


AnyStart = ops.Start | ops.StartRun | ops.SignalWithStart
"""A request that starts a run (`signal_with_start` starts one if none has its id)."""


def run_not_found(run_id: str, tenant: str) -> RunNotFound:
    return RunNotFound(f"no run {preview(run_id)} in tenant {preview(tenant)}")


_DIRECT_TRIES = 5  # a cancel that ends a run directly, judged again after a change


class Runs:
    """The run operations of one engine."""

    def __init__(self, machinery: Machinery, definitions: Definitions) -> None:
        self.machinery = machinery
        self.definitions = definitions
        # The replay view's answers, by (tenant, run, event, the history's last seq, hash).
        self._views: Recent[tuple[str, str, int, int, str], dict[str, Any]] = Recent()

    # == changing runs ===========================================================
    @handles(ops.Start)
    async def start(self, req: ops.Start, principal: Principal) -> str:
        """Start a run of a registered workflow, or of a published definition; its id."""
        return (await self.start_run(req, principal)).run_id

    @handles(ops.StartRun)
    async def start_run(
        self,
        req: AnyStart,
        principal: Principal,
        signal: StartSignal | None = None,
    ) -> Started:
        """Start a run, or find the same run again; its id and whether this call created it.

        The workflow is, in this order: one registered in this engine, the tenant's
        published definition of that name, or one a running worker serves. With
        `signal`, a run that has the id gets the signal instead of being found again.
        """
        m = self.machinery
        tenant = principal.tenant
        if isinstance(req.workflow, str) and not m.registry.has_workflow(req.workflow):
            of_definition = await self.definitions.start(req, principal, signal)
            if of_definition is not None:
                return of_definition
            return await self._start_served_elsewhere(req, principal, signal)
        defn = m.registry.workflow(req.workflow, None if req.version is None else str(req.version))
        return await self._start_code(
            req, tenant, defn.name, defn.version, defn.queue, signal, defn.run_queue
        )

    @handles(ops.SignalWithStart)
    async def signal_with_start(self, req: ops.SignalWithStart, principal: Principal) -> Started:
        """Start the run `req.run_id` and deliver the signal, or deliver it to the run that
        has that id: one transaction, so of concurrent calls one creates the run and every
        signal arrives. A run of that id of another workflow is `RunIdConflict`; a finished
        one `RunNotActive`."""
        arriving = await self._signal_arriving(principal, req)
        return await self.start_run(req, principal, StartSignal(*arriving))

    async def _signal_arriving(
        self, principal: Principal, req: ops.Signal | ops.SignalWithStart
    ) -> tuple[NewEvent, int | None, Quotas]:
        """The event of the signal `req` sends (naming who sent it), its payload within
        the tenant's bounds; and the bounds the run that gets it is held to: the signals
        it may have pending (not taken in yet), and the tenant's quotas."""
        m = self.machinery
        tenant = principal.tenant
        payload = m.codec.encode(req.payload)
        await self.definitions.bounded(tenant, "signal's payload", payload)
        by = normal_identity(principal.subject)
        event = SignalReceived(name=req.signal, payload=payload, by=by).at(m.settings.clock())
        pending = self.definitions.limits_for(tenant).max_pending_signals
        return event, pending, await m.quotas.get(tenant)

    async def _start_served_elsewhere(
        self,
        req: AnyStart,
        principal: Principal,
        signal: StartSignal | None = None,
    ) -> Started:
        """Start a run of a workflow this process does not have, by name, for the running
        workers that serve it: the newest version they serve, or the one asked for. Its
        input is stored as given (JSON), for the worker's code to read."""
        m = self.machinery
        tenant, name = principal.tenant, str(req.workflow)
        versions = await self._served_versions(name)
        if req.version is not None and str(req.version) not in versions:
            served = ", ".join(sorted(versions, key=version_key)[-5:]) or "none"
            raise UnknownWorkflow(
                f"no running worker serves workflow {preview(name)} version "
                f"{preview(str(req.version))} (versions served: {served}), and it is not "
                "registered here"
            )
        if not versions:
            known = ", ".join(m.registry.workflow_names()) or "none"
            raise UnknownWorkflow(
                f"no workflow named {preview(name)} is registered (registered: {known}), "
                f"tenant {preview(tenant)} has published no definition of that name, and "
                "no running worker serves it"
            )
        version = str(req.version) if req.version is not None else max(versions, key=version_key)
        return await self._start_code(
            req, tenant, name, version, workflow_queue(name, version), signal
        )

    async def _start_code(
        self,
        req: AnyStart,
        tenant: str,
        workflow: str,
        version: str,
        queue: str,
        signal: StartSignal | None,
        own_run_queue: str | None = None,
    ) -> Started:
        """Start (or find) a run of `workflow` `version` written as code, whose tasks go to
        `queue`; the run waits for admission in the start's run queue, else in
        `own_run_queue` (the workflow's own, if it names one)."""
        m = self.machinery
        payload = m.codec.encode(req.input)
        await self.definitions.bounded(tenant, "input", payload)
        started = RunStarted(
            workflow=workflow,
            version=version,
            input=payload,
            started_by=req.started_by,
            run_timeout=run_timeout(req, m.registry.find_workflow(workflow, version)),
        )
        return await m.start_run(
            tenant=tenant,
            run_id=req.run_id,
            workflow=workflow,
            version=version,
            payload=payload,
            started_data=started,
            queue=queue,
            signal=signal,
            priority=req.priority,
            concurrency_key=concurrency_key(req),
            dedup_id=dedup_id(req),
            run_queue=run_queue(req, own_run_queue),
        )

    async def knows_workflow(self, tenant: str, name: str) -> bool:
        """Whether a start of workflow `name` in `tenant` would find it: registered here,
        published by the tenant as a definition, or served by a running worker."""
        m = self.machinery
        if m.registry.has_workflow(name):
            return True
        if await m.store.get_definition(tenant, name) is not None:
            return True
        return bool(await self._served_versions(name))

    async def _served_versions(self, name: str) -> set[str]:
        """The versions of workflow `name` that running workers serve (their queues)."""
        m = self.machinery
        versions: set[str] = set()
        for worker in await m.store.live_workers(m.settings.clock() - WORKER_TTL):
            for queue in worker.queues:
                # Workflow queues are "<name>@<version>"; names and versions hold no "@".
                queue_name, at, version = queue.partition("@")
                if at and queue_name == name and version:
                    versions.add(version)
        return versions

    @handles(ops.Signal)
    async def signal(self, req: ops.Signal, principal: Principal) -> None:
        """Deliver a signal; the run sees it at its next wait for the signal's name."""
        tenant = principal.tenant
        event, pending, quotas = await self._signal_arriving(principal, req)
        await self._external(
            tenant,
            req.run_id,
            [event],
            f"signal {req.signal!r}",
            Limits.of_signal(quotas, pending),
        )

    @handles(ops.Cancel)
    async def cancel(self, req: ops.Cancel, principal: Principal) -> None:
        """Ask a run to stop: work not started is dropped, the run ends `cancelled`."""
        m = self.machinery
        tenant, run_id, reason = principal.tenant, req.run_id, req.reason
        # With a grace, the run ends once it is over, whatever its code does.
        data = CancelRequested(reason=reason, grace=m.settings.cancel_grace)
        for _ in range(_DIRECT_TRIES):
            run = await m.store.get_run(tenant, run_id)
            if run is None:
                raise run_not_found(run_id, tenant)
            now = m.settings.clock()
            requested = data.at(now)
            # Suspended code cannot run its cancellation, an enqueued run's has not started
            # (and never will): end the run directly.
            if run.status not in (RunStatus.SUSPENDED, RunStatus.ENQUEUED):
                break
            ended = RunCancelled(reason=reason).at(now)
            res = await m.commit(
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
                    effects=(CloseRunApprovals("cancelled"),),
                )
            )
            if res.ok:
                m.forget(tenant, run_id)
                m.run_ended(tenant, run_id)
                return
            if res.conflict is not Conflict.SEQ:
                raise run_not_found(run_id, tenant)
            # Conflict.SEQ: the run changed (a signal, its admission): judge it again.
        # Outstanding approval credentials die with the request, before the code runs.
        await self._external(
            tenant, run_id, [requested], "cancel", effects=(CloseRunApprovals("cancelled"),)
        )

    async def _external(
        self,
        tenant: str,
        run_id: str,
        events: list[NewEvent],
        what: str,
        limits: Limits = NO_LIMITS,
        effects: tuple[Effect, ...] = (),
    ) -> None:
        """Append events from outside the workflow and wake the run (under the tenant's
        `limits`, when given)."""
        commit = RunCommit(
            tenant=tenant,
            run_id=run_id,
            events=events,
            now=self.machinery.settings.clock(),
            require_active=True,
            limits=limits,
            effects=effects,
        )
        res = await self.machinery.commit_and_wake(commit)
        refused = refused_append(res, commit, what)
        if refused is not None:
            raise refused
        if res.conflict is Conflict.RUN_NOT_FOUND:
            raise run_not_found(run_id, tenant)
        if res.conflict is Conflict.RUN_FINISHED:
            raise RunNotActive(f"cannot {what}: run {preview(run_id)} has finished ({res.status})")

    # == reading runs ============================================================
    @handles(ops.GetRun)
    async def get(self, req: ops.GetRun, principal: Principal) -> RunInfo:
        store = self.machinery.store
        run = await store.get_run(principal.tenant, req.run_id)
        if run is None:
            raise run_not_found(req.run_id, principal.tenant)
        info = (await self._infos([run]))[0]
        links = await store.run_links(principal.tenant, req.run_id)
        if links is None:
            return info
        return dataclasses.replace(info, parent=links["parent"], children=links["children"])

    @handles(ops.ListRuns)
    async def list_runs(self, req: ops.ListRuns, principal: Principal) -> list[RunInfo]:
        status = None if req.status is None else RunStatus(req.status).value
        if not req.all_tenants:
            page = await self._page(principal.tenant, status, req.workflow, req.cursor, req.limit)
            return page.runs
        store = self.machinery.store
        runs = await store.list_runs(None, status, req.workflow, req.limit, RUN_PAGE_BYTES)
        return await self._infos(runs)

    @handles(ops.PageRuns)
    async def page_runs(self, req: ops.PageRuns, principal: Principal) -> RunPage:
        """One page of the tenant's runs, newest first, and the cursor of the next."""
        status = None if req.status is None else RunStatus(req.status).value
        return await self._page(
            principal.tenant, status, req.workflow, req.cursor, req.limit, req.version
        )

    @handles(ops.SearchRuns)
    async def search_runs(self, req: ops.SearchRuns, principal: Principal) -> list[RunInfo]:
        """The tenant's runs found by id, id prefix or correlation value, newest first."""
        found = await self.machinery.store.search_runs(
            principal.tenant, req.text, req.limit, RUN_PAGE_BYTES
        )
        return await self._infos(found)

    @handles(ops.RunDataAt)
    async def data_at(self, req: ops.RunDataAt, principal: Principal) -> dict[str, Any] | None:
        """A definition run's data after event `seq`: its history up to there replayed into
        a fresh interpreter (nothing is written; a history that does not replay says so)."""
        run, events = await self.machinery.store.load_run(principal.tenant, req.run_id)
        if run is None:
            raise run_not_found(req.run_id, principal.tenant)
        # Cut after event `seq`: the last event that came to the code (not one it issued)
        # is fed as new, so the code issues its commands afresh; commands it caused, and
        # the run's end (the engine's record of what the code returned), are left out.
        outside = COMMAND_EVENTS | _ENDS
        inputs = [e.seq for e in events if e.seq <= req.seq and e.type not in outside]
        last = max(inputs, default=0)
        prefix = [
            e
            for e in events
            if e.seq <= req.seq
            and e.type not in _ENDS
            and not (e.type in COMMAND_EVENTS and _cause(e) >= last)
        ]
        defn = await self.definitions.workflow_for(run, events)
        if defn is None or not prefix:
            return None
        interpreter = definition_of(defn.fn)
        if interpreter is None:
            return None
        key = (principal.tenant, run.run_id, req.seq, run.last_seq, run.last_hash)
        if (known := self._views.get(key)) is not None:
            return known
        inst = self.machinery.new_instance(defn, run.tenant, run.run_id)
        seen = min(run.processed_seq, last - 1)

        def replayed() -> dict[str, Any]:
            try:
                inst.replay(prefix, seen)
            except Exception as err:  # a bug, or code that no longer matches: shown
                if isinstance(err, ComputeLimitExceeded):
                    raise
                said = f"the history up to event {req.seq} does not replay: {err!r}"
                return {"error": said[:500]}
            return {
                "data": dict(interpreter.data),
                "position": dict(interpreter.position),
                "waiting": interpreter.waiting,
            }

        try:
            view = await self.machinery.compute.feed(
                inst, replayed, "the replay view", events=len(prefix), asked=True
            )
        finally:
            inst.close()
        self._views.put(key, view, len(canonical_json(view)))
        return view

    @handles(ops.CountRuns)
    async def count_runs(self, req: ops.CountRuns, principal: Principal) -> dict[str, int]:
        """The tenant's runs by status."""
        return await self.machinery.store.count_runs(principal.tenant)

    async def _page(
        self,
        tenant: str,
        status: str | None,
        workflow: str | None,
        cursor: str | None,
        limit: int,
        version: str | None = None,
    ) -> RunPage:
        # Keyset paging: a page starts strictly after the last run of the one before, so
        # runs created meanwhile (newer, so before the first page) never shift it. A page
        # cut short by its bytes continues after its last run the same way.
        after = None if cursor is None else decode_cursor(cursor)
        position = None if after is None else (after.created_at, after.run_id)
        store = self.machinery.store
        runs, more = await store.page_runs(
            tenant, status, workflow, position, limit, RUN_PAGE_BYTES, version
        )
        next_cursor = None
        if more and runs:
            next_cursor = RunCursor(runs[-1].created_at, runs[-1].run_id).encode()
        return RunPage(await self._infos(runs), next_cursor)

    @handles(ops.GetHistory)
    async def history(self, req: ops.GetHistory, principal: Principal) -> list[Event]:
        run, events = await self.machinery.store.load_run(principal.tenant, req.run_id)
        if run is None:
            raise run_not_found(req.run_id, principal.tenant)
        return events

    @handles(ops.PageHistory)
    async def history_page(self, req: ops.PageHistory, principal: Principal) -> HistoryPage:
        """Part of the run's history: a page of events bounded in number and in bytes."""
        found, events, more = await self.machinery.store.history_page(
            principal.tenant, req.run_id, req.after_seq, req.limit, HISTORY_PAGE_BYTES
        )
        if not found:
            raise run_not_found(req.run_id, principal.tenant)
        return HistoryPage(events, events[-1].seq if more and events else None)

    @handles(ops.Verify)
    async def verify(self, req: ops.Verify, principal: Principal) -> list[ChainProblem]:
        """Problems in the run's hash chain and in the rows beside it (empty when all is
        intact): the history from its genesis, the row's head, the checks of the run's
        row and its approvals' rows, and what the row says against what the history says.
        A problem of a row has number 0."""
        tenant = principal.tenant
        audit = await self.machinery.store.audit_run(tenant, req.run_id)
        if audit is None:
            raise run_not_found(req.run_id, tenant)
        events = audit.events
        problems = self.machinery.settings.chain.verify(events, run=(tenant, req.run_id))
        if events and (audit.last_seq, audit.last_hash) != (events[-1].seq, events[-1].hash):
            problems.append(
                ChainProblem(audit.last_seq, "the run's snapshot does not point at its last event")
            )
        problems.extend(ChainProblem(0, p) for p in audit.problems)
        found = snapshot_disagreements(
            audit.status, audit.input_json, audit.result, audit.error, events
        )
        problems.extend(ChainProblem(0, f"the run's row: {p}") for p in found)
        return problems

    @handles(ops.AwaitResult)
    async def result(self, req: ops.AwaitResult, principal: Principal) -> Any:
        """Wait for the run to end; return its result or raise its error.

        A database that is briefly unreachable does not end the wait: it is
        retried until the timeout.
        """
        m = self.machinery
        tenant, run_id, timeout = principal.tenant, req.run_id, req.timeout
        poll = m.settings.poll_interval
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = 0.01
        state = "unknown"
        while True:
            try:
                run = await m.store.get_run(tenant, run_id)
            except StoreError as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                log.warning("reading run %s failed, retrying: %s", run_id, exc)
                run, backoff = None, max(backoff, 0.2)
            else:
                if run is None:
                    raise run_not_found(run_id, tenant)
                status = RunStatus(run.status)
                if status.finished:
                    return self._outcome(run, status)
                state = status.value
                if status is RunStatus.SUSPENDED:
                    state += why_suspended(run.error)
                if m.serves_workflow(f"{run.workflow}@{run.version}"):
                    # This engine will most likely finish it and wake us; polling
                    # is only the fallback for another process finishing it.
                    backoff = poll
            wait = min(backoff, poll) if run is not None else backoff
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ResultTimeout(f"run {preview(run_id)} is still {state} after {timeout}s")
                wait = min(wait, remaining)
            await m.wait_for_end(tenant, run_id, wait)
            backoff = min(backoff * 1.5, poll)

    async def _unserved(
        self,
        run: RunRecord,
        code_elsewhere: bool,
        waiting: list[dict[str, Any]],
        queues: _ServedQueues,
    ) -> list[dict[str, Any]]:
        """What the run waits on that no running worker serves, in words."""
        activities = {w["activity"] for w in waiting if w.get("kind") == "activity"}
        if not code_elsewhere and not activities:
            return []
        served = await queues.get()
        m = self.machinery
        out: list[dict[str, Any]] = []
        if code_elsewhere:
            queue = f"{run.workflow}@{run.version}"
            if run.version.isdigit() and await m.store.get_definition(
                run.tenant, run.workflow, int(run.version)
            ):
                queue = DEFINITIONS_QUEUE
            if queue not in served:
                detail = (
                    "no running worker serves definition runs"
                    if queue == DEFINITIONS_QUEUE
                    else f"workflow {run.workflow!r} version {run.version!r} is not "
                    "registered by any running worker"
                )
                out.append({"kind": "code", "detail": detail})
        for name in sorted(activities - served):
            detail = f"no running worker serves activity {name!r}"
            out.append({"kind": "code", "activity": name, "detail": detail})
        return out

    def _outcome(self, run: RunRecord, status: RunStatus) -> Any:
        if status is RunStatus.COMPLETED:
            defn = self.machinery.registry.find_workflow(run.workflow, run.version)
            return self.machinery.codec.decode(run.result, defn.result_hint if defn else Any)
        if status is RunStatus.FAILED:
            raise WorkflowFailed(run.run_id, status.value, run.error)
        if status is RunStatus.CANCELLED:
            raise WorkflowCancelled(run.run_id, status.value, run.error)
        raise WorkflowTerminated(run.run_id, status.value, run.error)

    async def _infos(self, runs: list[RunRecord]) -> list[RunInfo]:
        """Runs as callers see them, with what happens next: a few reads for the lot."""
        m = self.machinery
        moving: dict[str, list[str]] = {}
        for run in runs:
            if RunStatus(run.status) in _MOVING:
                moving.setdefault(run.tenant, []).append(run.run_id)
        outlooks: dict[tuple[str, str], RunOutlook] = {}
        for tenant, run_ids in moving.items():
            found = await m.store.run_outlooks(tenant, run_ids)
            outlooks.update({(tenant, run_id): o for run_id, o in found.items()})
        queues = _ServedQueues(m)
        limits = _ActivityLimits(m)
        return [
            await self._info(r, outlooks.get((r.tenant, r.run_id)), queues, limits) for r in runs
        ]

    async def _info(
        self,
        run: RunRecord,
        outlook: RunOutlook | None,
        queues: _ServedQueues,
        limits: _ActivityLimits,
    ) -> RunInfo:
        m = self.machinery
        status = RunStatus(run.status)
        defn = m.registry.find_workflow(run.workflow, run.version)
        waiting = list(run.waiting_for)
        if not status.finished and status is not RunStatus.SUSPENDED:
            waiting.extend(await self._unserved(run, defn is None, waiting, queues))
            waiting.extend(await limits.waiting(run.tenant, outlook))
        result = run.result
        if defn is not None and status is RunStatus.COMPLETED:
            with contextlib.suppress(Exception):
                result = m.codec.decode(run.result, defn.result_hint)
        return answer_of(
            RunInfo,
            run,
            status=status,
            result=result,
            waiting_for=waiting,
            next_action=next_action(run, waiting, outlook, m.settings.clock()),
        )


# Statuses in which a run has tasks and approvals in motion worth reading.
_MOVING = frozenset({RunStatus.RUNNING, RunStatus.WAITING})


class _ServedQueues:
    """The queues running workers serve, read once for however many runs ask."""

    def __init__(self, machinery: Machinery) -> None:
        self.machinery = machinery
        self.served: set[str] | None = None

    async def get(self) -> set[str]:
        if self.served is None:
            m = self.machinery
            self.served = set()
            for worker in await m.store.live_workers(m.settings.clock() - WORKER_TTL):
                self.served.update(worker.queues)
        return self.served


class _ActivityLimits:
    """Whether a tenant's due activities wait for its `max_concurrent_activities`: read at
    most once per tenant for however many runs ask, and only for runs with one due."""

    def __init__(self, machinery: Machinery) -> None:
        self.machinery = machinery
        self.now = machinery.settings.clock()
        self.entries: dict[str, list[dict[str, Any]]] = {}

    async def waiting(self, tenant: str, outlook: RunOutlook | None) -> list[dict[str, Any]]:
        """The quota entry of `waiting_for`, if the run has an activity due that waits for
        the tenant's activities in flight to drop under its quota."""
        if outlook is None or not any(
            t.kind == "activity"
            and t.state == "ready"
            and (t.visible_at is None or t.visible_at <= self.now)
            for t in outlook.tasks
        ):
            return []
        if tenant not in self.entries:
            self.entries[tenant] = await self._entries(tenant)
        return self.entries[tenant]

    async def _entries(self, tenant: str) -> list[dict[str, Any]]:
        m = self.machinery
        most = (await m.quotas.get(tenant)).max_concurrent_activities
        if most is None:
            return []
        _, usage = await m.store.tenant_state(tenant)
        running = usage["activities_in_flight"]
        if running < most:
            return []
        detail = (
            f"tenant {tenant!r} has {running} activities running, the most it may have at "
            "once (max_concurrent_activities): it starts when one of them ends"
        )
        return [{"kind": "quota", "quota": "max_concurrent_activities", "detail": detail}]


def concurrency_key(req: AnyStart) -> str | None:
    """The run's concurrency key: a start may give one (a queue's per-key limit)."""
    return req.concurrency_key if isinstance(req, ops.StartFields) else None


def run_timeout(req: AnyStart, defn: WorkflowDefn | None) -> float | None:
    """The run's timeout in seconds, recorded at its start: the start's, else that of the
    workflow's decorator when this process has it (None: the code that runs it decides)."""
    given = req.run_timeout if isinstance(req, ops.StartFields) else None
    seconds = ops.run_timeout_seconds(given)
    return seconds if seconds is not None or defn is None else defn.run_timeout


def dedup_id(req: AnyStart) -> str | None:
    """The start's deduplication id: while a run with it is unfinished, a start finds it."""
    return req.dedup_id if isinstance(req, ops.StartFields) else None


def run_queue(req: AnyStart, default: str | None = None) -> str | None:
    """The workflow queue the run waits in for admission: the start's, else the workflow's
    own (None: started at once)."""
    given = req.queue if isinstance(req, ops.StartFields) else None
    return given if given is not None else default
