"""The program the crash acceptance test kills: an engine serving in-flight runs.

Run as ``python crash_app.py --db PATH --log PATH --runs N [--point P --n K]``.
It serves the ``crashy`` workflow until all N runs have finished (exit 0),
until ``--max-seconds`` have passed (exit 3), or until its fault plan kills it
with SIGKILL at the K-th hit of fault point P (the parent sees returncode -9).

Every activity execution appends one line (run, step, attempt, idempotency
key, marker "start") to the execution log and fsyncs it before the activity
does anything else, so the parent sees every execution, even one whose
process was killed right after.

The test process imports this module too: to start runs of `crashy` and to
compute the result each run must end with.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import waypost as wp
from waypost.testing import NoFaults

POINTS = ("commit:before", "commit:after", "activity:before", "activity:after", "timers:fired")
EARLY_TIMEOUT = 1.0  # the wait_signal timeout; no other timer of crashy has this duration
ACTIVITY_SECONDS = 0.02  # how long an activity "works" after logging its start
EXIT_ALL_DONE = 0
EXIT_TIME_LIMIT = 3

# Crashes make attempts time out; a run must never fail for want of attempts.
RETRY = wp.Retry(
    max_attempts=10_000,
    initial_interval=timedelta(milliseconds=50),
    backoff=1.0,
    max_interval=timedelta(milliseconds=50),
)

_LOG_PATH = ""  # the execution log; main() sets it from --log


class FlakyError(Exception):
    """Raised by `flaky` on its first attempt: a genuine failed execution."""


def log_execution(ctx: wp.ActivityContext) -> None:
    """Append this execution to the log and make it durable before going on."""
    line = json.dumps(
        {
            "marker": "start",
            "run": ctx.run_id,
            "step": ctx.step_id,
            "attempt": ctx.attempt,
            "key": ctx.idempotency_key,
            "activity": ctx.activity,
            "pid": os.getpid(),
        },
        sort_keys=True,
    )
    fd = os.open(_LOG_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())  # one write: appends of lines never interleave
        os.fsync(fd)
    finally:
        os.close(fd)


@wp.activity(retry=RETRY, timeout=timedelta(seconds=30))
def add_sync(ctx: wp.ActivityContext, x: int, y: int) -> int:
    log_execution(ctx)
    time.sleep(ACTIVITY_SECONDS)
    return x + y


@wp.activity(retry=RETRY, timeout=timedelta(seconds=30))
async def add_async(ctx: wp.ActivityContext, x: int, y: int) -> int:
    log_execution(ctx)
    await asyncio.sleep(ACTIVITY_SECONDS)
    return x + y


@wp.activity(retry=RETRY, timeout=timedelta(seconds=30))
def mul_sync(ctx: wp.ActivityContext, x: int, y: int) -> int:
    log_execution(ctx)
    time.sleep(ACTIVITY_SECONDS)
    return x * y


@wp.activity(retry=RETRY, timeout=timedelta(seconds=30))
async def flaky(ctx: wp.ActivityContext, x: int) -> int:
    log_execution(ctx)
    await asyncio.sleep(ACTIVITY_SECONDS)
    if ctx.attempt == 1:
        raise FlakyError(f"attempt 1 of step {ctx.step_id} fails on purpose")
    return x + 100


@wp.workflow(name="crashy", version="1")
async def crashy(ctx: wp.WorkflowContext, inp: dict[str, Any]) -> dict[str, Any]:
    a = await ctx.run(add_sync, inp["x"], 1)
    go = await ctx.wait_signal("go")  # no timeout: the test sends it at some moment
    b = await ctx.run(add_async, a, go["n"])
    c, d, e = await asyncio.gather(
        ctx.run(mul_sync, b, 2), ctx.run(add_async, b, 10), ctx.run(flaky, b)
    )
    await ctx.sleep(0.2)
    try:
        early: Any = await ctx.wait_signal("early", timeout=EARLY_TIMEOUT)
    except wp.WaitTimeout:
        early = "timeout"
    f, _ = await asyncio.gather(ctx.run(add_sync, c + d + e, 5), ctx.sleep(0.15))
    g = await ctx.run(mul_sync, f, 3)
    for k in range(3):
        g, _ = await asyncio.gather(ctx.run(add_async, g, k), ctx.sleep(0.05))
    return {"value": g, "early": early}


ITEMS = (crashy, add_sync, add_async, mul_sync, flaky)


def expected_value(x: int, n: int) -> int:
    """What `crashy` computes for input x and the `go` payload n."""
    a = x + 1
    b = a + n
    c, d, e = b * 2, b + 10, b + 100
    f = c + d + e + 5
    return f * 3 + 0 + 1 + 2


class KillAt(NoFaults):
    """A fault plan: SIGKILL this process at the n-th hit of `point`."""

    def __init__(self, point: str | None, n: int) -> None:
        self.point = point
        self.n = n
        self.hits: dict[str, int] = dict.fromkeys(POINTS, 0)
        self._lock = threading.Lock()

    def hit(self, point: str) -> None:
        with self._lock:
            self.hits[point] = self.hits.get(point, 0) + 1
            due = point == self.point and self.hits[point] == self.n
        if due:
            os.kill(os.getpid(), signal.SIGKILL)
            while True:  # never go on past the fault point
                time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True, help="database URL")
    parser.add_argument("--log", required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--point", choices=POINTS)
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--max-seconds", type=float, default=5.0)
    parser.add_argument("--ready", help="a file to create once the engine serves")
    args = parser.parse_args(argv)

    global _LOG_PATH
    _LOG_PATH = args.log
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    plan = KillAt(args.point, args.n)
    engine = wp.Engine(
        args.db,
        lease=args.lease,
        poll_interval=0.05,
        shutdown_grace=10.0,
        faults=plan,
        # The test kills its engines about a hundred times on purpose: a run whose work
        # happens to be caught by several kills in a row is not a poison run here, and
        # must not be suspended as one (tests/acceptance/test_poison.py tests that).
        max_lapses=1_000_000,
    )
    engine.register(*ITEMS)
    code = EXIT_TIME_LIMIT
    try:
        with engine.running():
            if args.ready:
                with open(args.ready, "w") as fh:
                    fh.write(str(os.getpid()))
            deadline = time.monotonic() + args.max_seconds
            while time.monotonic() < deadline:
                runs = engine.list_runs(limit=args.runs + 100)
                if len(runs) >= args.runs and all(r.status.finished for r in runs):
                    code = EXIT_ALL_DONE
                    break
                time.sleep(0.05)
        report: dict[str, Any] = {"exit": code, "hits": plan.hits, "now": time.time()}
        if code == EXIT_TIME_LIMIT:
            report["unfinished"] = unfinished(engine)
    finally:
        engine.close()
    print(json.dumps(report, default=str), flush=True)
    return code


def unfinished(engine: wp.Engine) -> list[dict[str, Any]]:
    """What each unfinished run waits for, and its tasks: to diagnose a stall."""
    out = []
    for run in engine.list_runs(limit=10_000):
        if run.status.finished:
            continue
        tasks = engine._call(engine.aio.store.run_tasks(run.tenant, run.run_id))
        out.append(
            {
                "run": run.run_id,
                "status": run.status.value,
                "waiting_for": run.waiting_for,
                "last_seq": run.last_seq,
                "tasks": [
                    [t.kind, t.step, t.owner, t.fence, t.attempt, t.visible_at] for t in tasks
                ],
            }
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
