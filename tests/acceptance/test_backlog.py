"""A backlog of queued workflow tasks: new runs still start, the backlog drains, nothing is lost.

An engine that has the workflow registered but does not serve it starts
BACKLOG runs (concurrently, in chunks): each run's workflow task is left
`ready` in the database, as a web process would leave them for workers that
are down. The workflow has no activities, so the queued tasks are the workflow
tasks themselves and draining one is a single step. On SQLite that engine
commits through the writer thread (`?commits=thread`), so the starts of a
chunk share commits; a non-serving engine on the default path commits each
start on its own.

Then a fresh engine on the same database starts serving, on an event loop in
a thread of its own (as an application's engine thread); the test watches the
database from the main thread, so what it sees does not wait for the engine's
loop. As soon as the engine has taken up backlog work, it is asked to start a
new run of the same workflow, which must complete (its `result()` returns)
within NEW_RUN_TIMEOUT, and before the backlog has drained. Then the whole
backlog must drain within the time a rate of MIN_DRAIN_RATE runs/s allows.
One query reads every run with its count of RunCompleted events: every run
that was started is there and completed, with the result its input
determines, exactly one RunCompleted each, and no task is left.

The default size keeps the test within about a minute per store on a 2-core
machine (PostgreSQL, the slower to build the backlog, sets it);
`WAYPOST_BACKLOG=100000 pytest tests/acceptance/test_backlog.py` runs the full
scenario of 100,000 queued tasks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

import waypost as wp
from tests.helpers import db_query, eventually

BACKLOG = int(os.environ.get("WAYPOST_BACKLOG", "10000"))
CHUNK = 1000  # starts issued at once while building the backlog
# An idle engine completes this workflow in milliseconds; a run that has to wait for
# the backlog takes as long as the backlog does.
NEW_RUN_TIMEOUT = 10.0  # seconds from start() to result() for the run started beside it
MIN_DRAIN_RATE = 50.0  # backlog runs per second, at least: a liveness bound, not a speed target
TAKE_UP_TIMEOUT = 30.0  # seconds for the serving engine to take up backlog work
DRAIN_TIMEOUT = 30.0 + BACKLOG / MIN_DRAIN_RATE
# Building the backlog is not timed; this bounds the whole test (100 starts/s at least).
TEST_TIMEOUT = 60.0 + BACKLOG / 100 + DRAIN_TIMEOUT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(300.0, TEST_TIMEOUT))]


@wp.workflow(name="backlog", version="1")
async def backlog_flow(ctx: wp.WorkflowContext, n: int) -> dict[str, int]:
    return {"n": n, "twice": 2 * n}


def expected(n: int) -> dict[str, int]:
    return {"n": n, "twice": 2 * n}


T = TypeVar("T")

READY = "SELECT count(*) FROM tasks WHERE kind = 'workflow' AND state = 'ready'"
UNFINISHED = "SELECT count(*) FROM runs WHERE status <> 'completed' AND run_id <> 'new-run'"
ENDED_BADLY = (
    "SELECT count(*) FROM runs WHERE status IN ('suspended', 'failed', 'cancelled', 'terminated')"
)


def count(url: str, sql: str) -> int:
    (row,) = db_query(url, sql)
    return int(row[0])


async def build_backlog(url: str) -> None:
    """Start BACKLOG runs through an engine that does not serve their workflow."""
    creator_url = f"{url}?commits=thread" if url.startswith("sqlite:") else url
    async with wp.AsyncEngine(creator_url) as creator:
        creator.register(backlog_flow)
        for low in range(0, BACKLOG, CHUNK):
            await asyncio.gather(
                *(
                    creator.start(backlog_flow, n, run_id=f"backlog-{n:06d}")
                    for n in range(low, min(BACKLOG, low + CHUNK))
                )
            )


class EngineThread:
    """An event loop in a thread of its own, for the serving engine."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="engine", daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


async def start_and_wait(engine: wp.AsyncEngine) -> Any:
    handle = await engine.start(backlog_flow, -1, run_id="new-run")
    return await handle.result()


def check_every_run(url: str) -> None:
    """One query: every run is there, completed with its result, with one RunCompleted."""
    rows = db_query(
        url,
        "SELECT r.run_id, r.status, r.input, r.result, count(e.seq) FROM runs r "
        "LEFT JOIN events e ON e.tenant = r.tenant AND e.run_id = r.run_id "
        "AND e.type = 'RunCompleted' GROUP BY r.tenant, r.run_id, r.status, r.input, r.result",
    )
    seen = {str(row[0]): row[1:] for row in rows}
    wanted = {f"backlog-{n:06d}": n for n in range(BACKLOG)} | {"new-run": -1}
    missing = sorted(wanted.keys() - seen.keys())
    assert not missing, f"{len(missing)} runs are missing, e.g. {missing[:5]}"
    assert len(rows) == len(wanted), f"{len(rows)} runs in the database, expected {len(wanted)}"
    wrong = [
        (run_id, seen[run_id])
        for run_id, n in wanted.items()
        if seen[run_id][0] != "completed"
        or json.loads(str(seen[run_id][1])) != n
        or json.loads(str(seen[run_id][2])) != expected(n)
    ]
    assert not wrong, f"{len(wrong)} runs did not complete with their result, e.g. {wrong[:3]}"
    not_once = [(run_id, s[3]) for run_id, s in seen.items() if s[3] != 1]
    assert not not_once, (
        f"{len(not_once)} runs do not have exactly one RunCompleted, e.g. {not_once[:5]}"
    )


def test_backlog_of_queued_tasks_drains_and_new_runs_still_start(
    db_url: str, record_property: Callable[[str, object], None]
) -> None:
    began = time.monotonic()
    asyncio.run(build_backlog(db_url))
    created_in = time.monotonic() - began
    assert count(db_url, READY) == BACKLOG, "every backlog run should have a queued workflow task"

    engine = wp.AsyncEngine(db_url, shutdown_grace=5.0)
    engine.register(backlog_flow)
    runner = EngineThread()
    try:
        serving_since = time.monotonic()
        runner.submit(engine.start_serving()).result(timeout=60)
        eventually(
            lambda: count(db_url, READY) < BACKLOG,
            "the serving engine to take up backlog work",
            TAKE_UP_TIMEOUT,
            interval=0.02,
        )
        unfinished_at_start = count(db_url, UNFINISHED)
        assert unfinished_at_start >= BACKLOG * 0.9, (
            f"only {unfinished_at_start} of {BACKLOG} backlog runs were left when the new run "
            "was to start: the scenario needs a large backlog"
        )

        began = time.monotonic()
        new_run = runner.submit(start_and_wait(engine))
        try:
            result = new_run.result(timeout=NEW_RUN_TIMEOUT)
        except concurrent.futures.TimeoutError:
            new_run.cancel()
            row = db_query(
                db_url, "SELECT status, finished_at - created_at FROM runs WHERE run_id = 'new-run'"
            )
            state = f"its row: {row[0]}" if row else "not even created yet"
            pytest.fail(
                f"a run started beside a backlog of {unfinished_at_start} runs did not complete "
                f"within {NEW_RUN_TIMEOUT}s ({state}; "
                f"{count(db_url, UNFINISHED)} backlog runs unfinished)"
            )
        new_run_latency = time.monotonic() - began
        unfinished_then = count(db_url, UNFINISHED)
        assert result == expected(-1)
        assert unfinished_then > 0, (
            "the new run completed only after the whole backlog had drained "
            f"({new_run_latency:.1f}s after it was started)"
        )

        def drained() -> bool:
            bad = count(db_url, ENDED_BADLY)
            assert bad == 0, f"{bad} runs were suspended, failed or ended otherwise"
            return count(db_url, UNFINISHED) == 0

        eventually(drained, f"the backlog of {BACKLOG} runs to drain", DRAIN_TIMEOUT, interval=0.25)
        drained_in = time.monotonic() - serving_since
    finally:
        try:
            runner.submit(engine.close()).result()
        finally:
            runner.close()

    check_every_run(db_url)
    assert count(db_url, "SELECT count(*) FROM tasks") == 0, "tasks were left behind"
    numbers = {
        "created_per_s": BACKLOG / created_in,
        "new_run_latency_s": new_run_latency,
        "unfinished_when_new_run_completed": unfinished_then,
        "drained_in_s": drained_in,
        "drained_per_s": BACKLOG / drained_in,
    }
    for name, value in numbers.items():
        record_property(name, round(value, 3))
    print(f"backlog of {BACKLOG}: " + ", ".join(f"{k}={v:.2f}" for k, v in numbers.items()))
