"""A write that waits before it lands (for a lock, a connection, a store that is away)
is made at the time it lands: the wait never spends the start-to-close budget of the
attempts it starts, so a step is not timed out and run again because of it."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import waypost as wp
from tests.helpers import of_type
from tests.helpers.store_calls import (
    T0,
    TENANT,
    activity_task,
    ev,
    make_run,
    run,
    schedule_activities,
)
from waypost.model.events import EventType
from waypost.store.base import RunCommit, Store, TaskRef
from waypost.store.effects import ScheduleActivities

pytestmark = pytest.mark.timeout(120)

HOLD = 3.0
"""How long the database's writes are held up: longer than the next step's timeout."""
TIMEOUT = 2.0

_hold: list[Callable[[], None]] = []  # what `first` does to hold the writes up
_ran: list[int] = []  # one entry per attempt of `second` that ran


@contextmanager
def writes_held_up(url: str) -> Iterator[Callable[[], None]]:
    """A function that holds the database's writes up for `HOLD` seconds from another
    connection, returning once they are held (SQLite's write lock; on PostgreSQL, a lock
    on the tasks table, which every step's commit writes)."""
    threads: list[threading.Thread] = []

    def hold() -> None:
        held = threading.Event()
        thread = threading.Thread(target=_hold_for, args=(url, held), daemon=True)
        threads.append(thread)
        thread.start()
        assert held.wait(30), "the writes were never held up"

    yield hold
    for thread in threads:
        thread.join(30)


def _hold_for(url: str, held: threading.Event) -> None:
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(HOLD)  # the outage
        conn.execute("ROLLBACK")
        conn.close()
        return
    with psycopg.connect(url) as conn:
        conn.execute("LOCK TABLE waypost.tasks IN EXCLUSIVE MODE")
        held.set()
        time.sleep(HOLD)  # the outage
        conn.rollback()


@wp.activity
def first(ctx: wp.ActivityContext) -> None:
    # The outcome of this step and the start of the next are one commit: it waits.
    _hold[0]()


@wp.activity(timeout=TIMEOUT, retry=wp.Retry(max_attempts=3, initial_interval=0.1))
def second(ctx: wp.ActivityContext) -> int:
    _ran.append(ctx.attempt)
    time.sleep(0.3)  # its work: well within its timeout, once it has started
    return ctx.attempt


@wp.workflow(name="held_up")
async def held_up(ctx: wp.WorkflowContext) -> int:
    await ctx.run(first)
    return await ctx.run(second)


def test_a_commit_held_up_past_a_steps_timeout_does_not_spend_it(
    db_url: str, make_engine: Any
) -> None:
    _ran.clear()
    engine = make_engine(held_up, first, second, lease=10.0)
    with writes_held_up(db_url) as hold, engine.running():
        _hold[:] = [hold]
        run = engine.start(held_up)
        assert engine.result(run.run_id, timeout=60) == 1
    history = engine.history(run.run_id)
    assert _ran == [1], f"the step ran {len(_ran)} times: {_ran}"
    assert not of_type(history, "ActivityFailed"), [e.type for e in history]
    assert not of_type(history, "LateResultIgnored"), [e.type for e in history]
    assert engine.verify(run.run_id) == []


# == the store: a write made at the time it lands ==================================

WAITED = 5.0  # seconds a write is made to have waited before its transaction


@pytest.mark.parametrize("waited", [0.0, WAITED])
def test_a_commit_leases_its_attempts_from_when_it_lands(
    store: Store, aio: asyncio.Runner, waited: float
) -> None:
    async def body() -> None:
        await make_run(store, "r1")
        task = dataclasses.replace(activity_task("1", timeout=10.0), owner="w1", lease=30.0)
        scheduled = ev(EventType.ACTIVITY_SCHEDULED, T0, step="1", activity="act")
        effects = (ScheduleActivities((task,)),)
        # Its time read `waited` seconds ago: it waited that long before it landed.
        asked = time.monotonic() - waited
        commit = RunCommit(TENANT, "r1", [scheduled], T0, effects=effects, asked=asked)
        res = await store.commit_run(commit)
        assert res.ok
        if waited:
            assert T0 + waited <= res.now < T0 + waited + 5
        else:
            assert res.now == T0  # on time: made at its own time, exactly
        (leased,) = [t for t in await store.run_tasks(TENANT, "r1") if t.kind == "activity"]
        assert (leased.deadline, leased.visible_at) == (res.now + 10.0, res.now + 10.0)
        # Its event keeps the time it was decided at: the run's code saw that time.
        assert (await store.load_history(TENANT, "r1"))[-1].ts == T0

    run(aio, body)


def test_a_claim_that_waited_counts_from_when_it_lands_and_is_timed_again_by_its_owner(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        await make_run(store, "r1")
        task = activity_task("1", timeout=10.0, heartbeat_timeout=4.0)
        await schedule_activities(store, "r1", task)
        asked = time.monotonic() - WAITED
        (claimed,) = await store.claim_tasks("w1", [], ["act"], 0, 5, 30.0, T0 + 1, asked=asked)
        assert T0 + 1 + WAITED + 10 <= claimed.deadline < T0 + 1 + WAITED + 15
        # Timed again from T0 + 50 by the engine that holds it, under its fence only.
        mine = TaskRef(TENANT, "r1", "activity", "1", claimed.fence)
        stale = dataclasses.replace(mine, fence=claimed.fence - 1)
        assert await store.retime_activity("w2", mine, 30.0, T0 + 50) is None
        assert await store.retime_activity("w1", stale, 30.0, T0 + 50) is None
        assert await store.retime_activity("w1", mine, 30.0, T0 + 50) == T0 + 60.0
        (held,) = [t for t in await store.run_tasks(TENANT, "r1") if t.kind == "activity"]
        assert (held.deadline, held.heartbeat_deadline, held.owner) == (T0 + 60, T0 + 54, "w1")
        assert held.visible_at == T0 + 54.0  # the lease never outlives a deadline

    run(aio, body)
