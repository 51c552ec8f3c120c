"""Calls and records for tests of the store through its Protocol: runs made, activities
scheduled and claimed, a run's whole state read, at explicit times."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from waypost.model.events import EventType, NewEvent
from waypost.store.base import (
    ClaimedTask,
    CreateRunResult,
    NewActivityTask,
    NewRun,
    RunCommit,
    Snapshot,
    Store,
    WorkflowTaskOp,
)
from waypost.store.effects import ScheduleActivities

T = TypeVar("T")
E = EventType
T0 = 1_700_000_000.0
TENANT = "default"
WF_QUEUE = "wf@1"


def ev(type_: EventType, ts: float = T0, **data: Any) -> NewEvent:
    return NewEvent(type_, data, ts)


async def make_run(
    store: Store, run_id: str, *, owner: str | None = None, ts: float = T0, tenant: str = TENANT
) -> CreateRunResult:
    return await store.create_run(
        NewRun(
            tenant=tenant,
            run_id=run_id,
            workflow="wf",
            version="1",
            input={"n": 1, "run": run_id},
            ts=ts,
            started=ev(E.RUN_STARTED, ts, workflow="wf", version="1", input={"n": 1}),
            claim_owner=owner,
            lease=30.0,
        )
    )


def activity_task(
    step: str, *, timeout: float = 60.0, heartbeat_timeout: float | None = None
) -> NewActivityTask:
    return NewActivityTask(
        step=step,
        activity="act",
        spec={"activity": "act", "step": step, "timeout": timeout},
        timeout=timeout,
        heartbeat_timeout=heartbeat_timeout,
    )


async def schedule_activities(
    store: Store, run_id: str, *tasks: NewActivityTask, now: float = T0
) -> None:
    res = await store.commit_run(
        RunCommit(
            tenant=TENANT,
            run_id=run_id,
            events=[ev(E.ACTIVITY_SCHEDULED, now, step=t.step, activity="act") for t in tasks],
            now=now,
            effects=(ScheduleActivities(tasks),) if tasks else (),
        )
    )
    assert res.ok, res


async def state(store: Store, run_id: str, tenant: str = TENANT) -> tuple[Any, ...]:
    """Everything the store holds about a run, in comparable form."""
    run, events = await store.load_run(tenant, run_id)
    tasks = await store.run_tasks(tenant, run_id)
    return run, [(e.seq, e.type, e.data_json, e.ts, e.hash) for e in events], tasks


async def claim_activities(
    store: Store, owner: str, *, now: float = T0, limit: int = 10, lease: float = 30.0
) -> list[ClaimedTask]:
    return await store.claim_tasks(owner, [], ["act"], 0, limit, lease, now)


async def claim_workflows(
    store: Store, owner: str, *, now: float = T0, limit: int = 10, lease: float = 30.0
) -> list[ClaimedTask]:
    return await store.claim_tasks(owner, [WF_QUEUE], [], limit, 0, lease, now)


def run(aio: asyncio.Runner, body: Callable[[], Awaitable[T]]) -> T:
    return aio.run(body())  # type: ignore[arg-type]


async def finish_run(store: Store, run_id: str) -> None:
    """Complete the run: its last event, its snapshot, its workflow task deleted."""
    run_ = await store.get_run(TENANT, run_id)
    assert run_ is not None
    res = await store.commit_run(
        RunCommit(
            TENANT,
            run_id,
            [ev(E.RUN_COMPLETED, T0 + 3, result="done")],
            now=T0 + 3,
            expect_seq=run_.last_seq,
            expect_hash=run_.last_hash,
            snapshot=Snapshot("completed", [], run_.last_seq, result="done", finished=True),
            workflow_op=WorkflowTaskOp.DELETE,
        )
    )
    assert res.ok, res


def signal_commit(run_id: str, head: tuple[int, str]) -> RunCommit:
    """A commit of one SignalReceived (named after the run) to a run whose last event is
    `head` (its seq and hash): the run waits on, its workflow task idle."""
    seq, hash_ = head
    return RunCommit(
        TENANT,
        run_id,
        [ev(E.SIGNAL_RECEIVED, T0 + 1, name=run_id)],
        T0 + 1,
        expect_seq=seq,
        expect_hash=hash_,
        snapshot=Snapshot("waiting", [], 1),
        workflow_fence=1,
        workflow_op=WorkflowTaskOp.IDLE,
    )
