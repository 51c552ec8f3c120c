"""The module the worker processes of the queue acceptance test serve.

Each worker is ``waypost worker --db URL --app queues_app --lease 2`` with this
directory on PYTHONPATH and QUEUES_LOG naming the log. Every attempt of `limited`
(queue "limited") appends a start line, works a little, and appends an end line,
each written with one O_APPEND write and fsynced, so the test can tell how many
attempts overlapped, across processes, even when a worker is SIGKILLed mid-attempt.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from typing import Any

import waypost as wp

LOG_ENV = "QUEUES_LOG"
WORK_SECONDS = 0.03
# A killed worker's attempts time out; a run must never fail for want of attempts.
RETRY = wp.Retry(
    max_attempts=1000,
    initial_interval=timedelta(milliseconds=50),
    backoff=1.0,
    max_interval=timedelta(milliseconds=50),
)


def log(ctx: wp.ActivityContext, event: str) -> None:
    line = json.dumps(
        {
            "run": ctx.run_id,
            "step": ctx.step_id,
            "attempt": ctx.attempt,
            "event": event,
            "pid": os.getpid(),
            "t": time.time(),
        },
        sort_keys=True,
    )
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@wp.activity(queue="limited", retry=RETRY, timeout=timedelta(seconds=20))
def limited(ctx: wp.ActivityContext, n: int) -> int:
    log(ctx, "start")
    time.sleep(WORK_SECONDS)
    log(ctx, "end")
    return n


@wp.activity(queue="side", retry=RETRY)
def side(ctx: wp.ActivityContext, n: int) -> dict[str, Any]:
    return {"n": n, "pid": os.getpid()}


@wp.workflow(name="queued")
async def queued(ctx: wp.WorkflowContext, n: int) -> int:
    return int(await ctx.run(limited, n))


@wp.workflow(name="sided")
async def sided(ctx: wp.WorkflowContext, n: int) -> dict[str, Any]:
    return dict(await ctx.run(side, n))


@wp.activity(retry=RETRY, timeout=timedelta(seconds=20))
def report_step(ctx: wp.ActivityContext, n: int) -> int:
    log(ctx, "start")
    time.sleep(WORK_SECONDS)
    log(ctx, "end")
    return n


@wp.workflow(name="wqueued", queue="wlimited")
async def wqueued(ctx: wp.WorkflowContext, n: int) -> int:
    """A run of workflow queue "wlimited": two steps, holding its slot between them."""
    first = await ctx.run(report_step, n)
    await ctx.run(report_step, n)
    return int(first)
