"""A crash costs seconds, not a lease (both stores): an engine known to be dead loses its
leases at once — on this host when its process is gone, elsewhere when its heartbeat
stops — while a slow or stopped one keeps them."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers.store import create_orphan
from waypost.engine import liveness
from waypost.store import open_store
from waypost.store.base import WorkerRecord

pytestmark = pytest.mark.timeout(120)

LONG_LEASE = 120.0  # far longer than any test here may take: only a known death frees it
blocked = threading.Event()
release = threading.Event()


@wp.activity(timeout=timedelta(minutes=5), retry=wp.Retry(initial_interval=timedelta(0)))
def hold(ctx: wp.ActivityContext) -> int:
    if ctx.attempt == 1:
        blocked.set()
        release.wait(60)
    return ctx.attempt


@wp.workflow(name="held")
async def held(ctx: wp.WorkflowContext) -> int:
    return int(await ctx.run(hold))


async def _engine(url: str, name: str) -> wp.AsyncEngine:
    engine = wp.AsyncEngine(
        url, lease=LONG_LEASE, poll_interval=0.05, worker_id=name, shutdown_grace=1
    )
    engine.register(held, hold)
    await engine.start_serving()
    return engine


def test_a_crashed_engine_on_this_host_is_taken_over_at_once(db_url: str) -> None:
    blocked.clear()
    release.clear()

    async def scenario() -> tuple[int, float]:
        a = await _engine(db_url, f"crashing-{time.monotonic_ns()}")
        run = await a.start(held)
        await asyncio.to_thread(blocked.wait, 30)  # attempt 1 runs on a, holding its lease
        b = await _engine(db_url, f"survivor-{time.monotonic_ns()}")
        try:
            crashed_at = time.monotonic()
            await a.abandon()  # as SIGKILL would: nothing released, the life lock gone
            result = await run.result(timeout=30)  # far less than the lease
            took = time.monotonic() - crashed_at
            history = await run.history()
        finally:
            release.set()
            await b.close()
        failed = [e for e in history if e.type == "ActivityFailed"]
        assert failed and "lost its worker" in failed[0].data["error"]["message"]
        return result, took

    result, took = asyncio.run(scenario())
    assert result == 2  # attempt 2, on the survivor
    assert took < LONG_LEASE / 4


def test_an_engine_whose_heartbeat_stopped_elsewhere_is_taken_over(db_url: str) -> None:
    """A worker on another host (its lock cannot be seen) went silent: once this engine
    has beaten for longer than the heartbeat's time to live, the silent one's leases go."""

    async def scenario() -> float:
        store = open_store(db_url)
        await store.open()
        now = time.time()
        try:
            await create_orphan(store, "held", "ghost@elsewhere", LONG_LEASE, now)
            await store.beat_worker(
                WorkerRecord("ghost@elsewhere", "another-host", 4242, ["held@1"], now, now)
            )
        finally:
            await store.close()
        release.set()  # the survivor's attempts may finish
        b = await _engine(db_url, f"survivor-{time.monotonic_ns()}")
        try:
            began = time.monotonic()
            result = await b.result("orphan", timeout=60)
            assert result == 1 or result == 2
            return time.monotonic() - began
        finally:
            await b.close()

    took = asyncio.run(scenario())
    assert took < LONG_LEASE / 4


def test_a_live_engine_is_not_taken_for_dead(tmp_path: Any) -> None:
    lock = liveness.LifeLock(f"alive-{time.monotonic_ns()}")
    lock.hold()
    try:
        assert liveness.gone(lock.owner) is False
    finally:
        lock.drop(remove=False)
    assert liveness.gone(lock.owner) is True  # dropped as a crash would: dead
    assert liveness.gone(lock.owner) is None  # and forgotten once seen
    assert liveness.gone("never-seen") is None
