"""Starting runs: a new run with its RunStarted event (or the same run found again), and
signal-with-start.

`Starts` writes through the `Committer` and hands a run whose workflow task it
claimed to the workflow tasks (`RunWaker`) to be processed here at once.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from waypost.errors import RunIdConflict, RunNotActive
from waypost.model.events import (
    Event,
    EventType,
    NewEvent,
    RunStarted,
    SignalReceived,
    canonical_json,
)
from waypost.model.identity import preview
from waypost.model.quotas import Quotas
from waypost.model.records import Started
from waypost.store.base import CommitResult, Limits, NewRun, RunCommit

from . import tracing
from .cache import Loaded
from .committer import Committer
from .quotas import refused_append
from .signals import Shared

_E = EventType


@dataclass(frozen=True)
class StartSignal:
    """A signal sent with a start (signal-with-start): the new run gets it after RunStarted,
    an existing run of that id gets it as any signal (refused beyond `max_pending_signals`
    signals it has not taken in)."""

    event: NewEvent
    max_pending_signals: int | None = None
    quotas: Quotas | None = None  # the tenant's: an existing run is held to their bounds


def new_run_id() -> str:
    """Time-ordered and unguessable: 12 hex digits of milliseconds, 16 random."""
    return f"{int(time.time() * 1000):012x}{secrets.token_hex(8)}"


class RunWaker(Protocol):
    """What starting a run asks of the workflow tasks."""

    def waking(self, commit: RunCommit) -> RunCommit:
        """`commit` set to claim its run's workflow task for this engine, or wake it."""
        ...

    def woken(self, tenant: str, run_id: str, res: CommitResult) -> None:
        """After a commit made `waking`: process the run here, or wake the dispatcher."""
        ...

    def start_processing(
        self, tenant: str, run_id: str, fence: int, queue: str, preloaded: Loaded | None = None
    ) -> asyncio.Task[None]:
        """Process, in the background, a run whose workflow task this engine holds."""
        ...


class Starts:
    """Starts runs, and signals with a start."""

    def __init__(self, shared: Shared, committer: Committer, runs: RunWaker) -> None:
        self.settings, self.serving = shared.settings, shared.serving
        self.committer, self.runs = committer, runs

    async def start_run(
        self,
        *,
        tenant: str,
        run_id: str | None,
        workflow: str,
        version: str,
        payload: Any,
        started_data: RunStarted,
        queue: str,
        signal: StartSignal | None = None,
        priority: int = 0,
        concurrency_key: str | None = None,
        dedup_id: str | None = None,
        history: Sequence[NewEvent] = (),
        processed_seq: int = 0,
        run_queue: str | None = None,
    ) -> Started:
        """Create a run with its RunStarted event, or find the same run again.

        Whether this call created the run is decided by the store's insert, so of
        concurrent starts of one run exactly one answers `created`. A new run whose
        workflow this engine serves is processed here at once. With `signal`, the new
        run gets it right after RunStarted, and a run that has the id gets it instead
        (signal-with-start), in the same transaction. The store admits a new run under
        the tenant's quotas (`QuotaExceeded`, nothing written, if not). `history` is
        appended after RunStarted in the same transaction (a fork's copied events), and
        the run's code is taken to have seen it up to `processed_seq`.
        """
        run_id = run_id if run_id is not None else new_run_id()
        with tracing.start_span(
            run_id=run_id, tenant=tenant, workflow=workflow, **{"workflow.version": version}
        ) as trace:
            if trace is not None:
                started_data = replace(started_data, trace=trace)
            return await self._start_run(
                tenant=tenant,
                run_id=run_id,
                workflow=workflow,
                version=version,
                payload=payload,
                started_data=started_data,
                queue=queue,
                signal=signal,
                priority=priority,
                concurrency_key=concurrency_key,
                dedup_id=dedup_id,
                history=history,
                processed_seq=processed_seq,
                run_queue=run_queue,
            )

    async def _start_run(
        self,
        *,
        tenant: str,
        run_id: str,
        workflow: str,
        version: str,
        payload: Any,
        started_data: RunStarted,
        queue: str,
        signal: StartSignal | None,
        priority: int,
        concurrency_key: str | None,
        dedup_id: str | None,
        history: Sequence[NewEvent],
        processed_seq: int,
        run_queue: str | None,
    ) -> Started:
        settings = self.settings
        now = settings.clock()
        started = started_data.at(now)
        new = NewRun(
            tenant=tenant,
            run_id=run_id,
            workflow=workflow,
            version=version,
            input=payload,
            ts=now,
            started=started,
            claim_owner=settings.owner if self.serving.workflow(queue) else None,
            lease=settings.lease,
            queue=queue,
            signals=tuple(history) if signal is None else (signal.event,),
            priority=priority,
            concurrency_key=concurrency_key,
            dedup_id=dedup_id,
            quotas=settings.quotas,
            processed_seq=processed_seq,
            named_queue=run_queue,
        )
        if signal is not None:
            return await self._signal_with_start(new, signal)
        result = await self.committer.create(new)
        run = result.run
        if not result.created and run.run_id != run_id:
            return Started(run.run_id, created=False)  # the unfinished run with its dedup id
        if not result.created:
            if run.workflow != workflow or run.input_json != canonical_json(payload):
                raise RunIdConflict(
                    f"run {preview(run_id)} exists already (workflow {preview(run.workflow)}) "
                    "with a different workflow or input; use another run_id"
                )
            return Started(run_id, created=False)
        self.started(tenant, run_id, workflow)
        if result.workflow_fence is not None:
            first = Event(1, _E.RUN_STARTED, started.data, now, run.last_hash, started.encode())
            preloaded = None if history or run.last_seq != 1 else (run, [first])
            self.runs.start_processing(tenant, run_id, result.workflow_fence, queue, preloaded)
        return Started(run_id, created=True)

    def started(self, tenant: str, run_id: str, workflow: str) -> None:
        self.committer.watch.note(tenant, run_id, workflow)
        self.settings.observer.run_started(tenant, workflow)

    async def _signal_with_start(self, new: NewRun, signal: StartSignal) -> Started:
        tenant, run_id = new.tenant, new.run_id
        commit = self.runs.waking(
            RunCommit(
                tenant=tenant,
                run_id=run_id,
                events=[signal.event],
                now=new.ts,
                require_active=True,
                limits=Limits.of_signal(signal.quotas, signal.max_pending_signals),
            )
        )
        result, res = await self.committer.signal_with_start(new, commit)
        if result.created:
            self.started(tenant, run_id, new.workflow)
            if result.workflow_fence is not None:
                self.runs.start_processing(tenant, run_id, result.workflow_fence, new.queue or "")
            return Started(run_id, created=True)
        if res is None:
            raise RunIdConflict(
                f"run {preview(run_id)} exists already as a run of workflow "
                f"{preview(result.run.workflow)}, not {preview(new.workflow)}; use another run_id"
            )
        what = f"signal {preview(str(SignalReceived.parse(signal.event).name))}"
        refused = refused_append(res, commit, what)
        if refused is not None:
            raise refused
        if res.conflict is not None:
            status = res.status or result.run.status
            raise RunNotActive(f"cannot {what}: run {preview(run_id)} has finished ({status})")
        self.runs.woken(tenant, run_id, res)
        return Started(run_id, created=False)
