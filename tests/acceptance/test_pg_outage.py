"""A PostgreSQL restart while runs are in flight: the engine reconnects on its own,
nothing committed is lost, and every run completes.

The server is restarted for real (pg_ctlcluster), so these tests need the local
cluster that CI provides.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers import db_query, eventually
from tests.helpers.executions import ExecutionLog, check_nothing_lost_or_doubled
from waypost.store.postgres import PostgresStore

pytestmark = [pytest.mark.slow, pytest.mark.serial]

STEPS = 8
EXECUTIONS = ExecutionLog()


def restart_postgres() -> None:
    versions = sorted(os.listdir("/etc/postgresql"))
    proc = subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "restart"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"restarting PostgreSQL failed: {proc.stderr}"


@wp.activity(retry=wp.Retry(max_attempts=20))
def step_sync(ctx: wp.ActivityContext, i: int) -> int:
    EXECUTIONS.record(ctx)
    time.sleep(0.02)
    return i


@wp.activity(retry=wp.Retry(max_attempts=20))
async def step_async(ctx: wp.ActivityContext, i: int) -> int:
    EXECUTIONS.record(ctx)
    await asyncio.sleep(0.02)
    return i


@wp.workflow(name="outage")
async def outage_flow(ctx: wp.WorkflowContext, n: int) -> int:
    total = 0
    for i in range(STEPS):
        total += await ctx.run(step_sync if i % 2 else step_async, i)
        if i == 3:
            await ctx.sleep(0.05)
    return total + n


def test_a_postgres_restart_mid_run_loses_nothing_and_every_run_completes(
    fresh_postgres: str, tmp_path: Path
) -> None:
    EXECUTIONS.use(tmp_path / "executions.jsonl")
    runs = 40
    engine = wp.Engine(fresh_postgres, lease=2, poll_interval=0.2)
    try:
        engine.register(outage_flow, step_sync, step_async)
        with engine.running():
            handles = [engine.start(outage_flow, n, run_id=f"r{n}") for n in range(runs)]
            completed = "SELECT count(*) FROM events WHERE type = 'ActivityCompleted'"
            eventually(
                lambda: db_query(fresh_postgres, completed)[0][0] >= runs * STEPS // 3,
                "a third of the steps to complete",
                timeout=60,
            )
            before = {h.run_id: engine.history(h.run_id) for h in handles}
            restart_postgres()
            results = [h.result(timeout=120) for h in handles]
            after = {h.run_id: engine.history(h.run_id) for h in handles}
    finally:
        engine.close()

    assert results == [sum(range(STEPS)) + n for n in range(runs)]
    check_nothing_lost_or_doubled(before, after, EXECUTIONS.read(), STEPS)
    info = engine_free_info(fresh_postgres)
    assert info == {"completed": runs}


def engine_free_info(url: str) -> dict[str, int]:
    rows = db_query(url, "SELECT status, count(*) FROM runs GROUP BY status")
    return {status: count for status, count in rows}


def test_notifications_come_back_after_a_restart(fresh_postgres: str) -> None:
    """The listener reconnects by itself and says so; then notifications flow again."""
    topics: list[str] = []
    stop = threading.Event()

    async def listen() -> None:
        store = PostgresStore(fresh_postgres)
        task = asyncio.create_task(store.listen(topics.append))
        await asyncio.to_thread(stop.wait)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    thread = threading.Thread(target=lambda: asyncio.run(listen()))
    thread.start()
    try:
        eventually(lambda: "reconnected" in topics, "the listener to connect", timeout=30)
        topics.clear()
        restart_postgres()
        eventually(lambda: "reconnected" in topics, "the listener to reconnect", timeout=60)
        import psycopg

        with psycopg.connect(fresh_postgres, autocommit=True) as conn:
            conn.execute("SELECT pg_notify('waypost', 'tasks')")
        eventually(lambda: "tasks" in topics, "a notification after the restart", timeout=30)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
