"""The module the worker processes of the multi-process acceptance test serve.

Each worker is ``waypost worker --db URL --app multiproc_app --lease 4`` with
this directory on PYTHONPATH and MULTIPROC_LOG naming the execution log. The
test process imports this module too: to start runs of `multiproc` and to
compute the result each run must end with.

Every activity execution appends one line (run, step, attempt, idempotency
key, activity, worker pid) to the execution log and fsyncs it before doing
its work, so an execution survives the SIGKILL of its worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import timedelta
from typing import Any

import waypost as wp

LOG_ENV = "MULTIPROC_LOG"
ACTIVITY_SECONDS = 0.005  # how long an activity "works" after logging its execution
SLEEP_SECONDS = 0.05  # the workflow's durable timer
ACTIVITY_STEPS = 10

# A killed worker makes attempts time out; a run must never fail for want of attempts.
RETRY = wp.Retry(
    max_attempts=1000,
    initial_interval=timedelta(milliseconds=50),
    backoff=1.0,
    max_interval=timedelta(milliseconds=50),
)


class FlakyError(Exception):
    """Raised by `flaky` on the first attempt of a run that asks for it: a genuine failure."""


def log_execution(ctx: wp.ActivityContext) -> None:
    """Append this execution to the log and make it durable before going on."""
    line = json.dumps(
        {
            "run": ctx.run_id,
            "step": ctx.step_id,
            "attempt": ctx.attempt,
            "key": ctx.idempotency_key,
            "activity": ctx.activity,
            "pid": os.getpid(),
            "t": time.time(),
        },
        sort_keys=True,
    )
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())  # one O_APPEND write: lines never interleave
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
async def mul_async(ctx: wp.ActivityContext, x: int, y: int) -> int:
    log_execution(ctx)
    await asyncio.sleep(ACTIVITY_SECONDS)
    return x * y


@wp.activity(retry=RETRY, timeout=timedelta(seconds=30))
async def flaky(ctx: wp.ActivityContext, x: int, fail_first: bool) -> int:
    log_execution(ctx)
    await asyncio.sleep(ACTIVITY_SECONDS)
    if fail_first and ctx.attempt == 1:
        raise FlakyError(f"attempt 1 of step {ctx.step_id} fails on purpose")
    return x + 100


@wp.workflow(name="multiproc", version="1")
async def multiproc(ctx: wp.WorkflowContext, inp: dict[str, Any]) -> dict[str, Any]:
    """Ten activity steps (sync and async, two gathered pairs) and one short timer."""
    x = inp["x"]
    a = await ctx.run(add_sync, x, 1)
    b = await ctx.run(add_async, a, 2)
    c, d = await asyncio.gather(ctx.run(mul_sync, b, 3), ctx.run(add_async, b, 4))
    await ctx.sleep(SLEEP_SECONDS)
    e = await ctx.run(flaky, c + d, inp["flaky"])
    f = await ctx.run(mul_sync, e, 2)
    g, h = await asyncio.gather(ctx.run(add_sync, f, 5), ctx.run(add_async, f, 6))
    i = await ctx.run(mul_async, g + h, 3)
    j = await ctx.run(add_sync, i, x)
    return {"x": x, "value": j}


ITEMS = (multiproc, add_sync, add_async, mul_sync, mul_async, flaky)


def make_input(x: int) -> dict[str, Any]:
    """The input of run x: every tenth run has a `flaky` step that fails once on purpose."""
    return {"x": x, "flaky": x % 10 == 3}


def expected_result(x: int) -> dict[str, Any]:
    """What `multiproc` returns for run x."""
    a = x + 1
    b = a + 2
    c, d = b * 3, b + 4
    e = c + d + 100
    f = e * 2
    g, h = f + 5, f + 6
    i = (g + h) * 3
    return {"x": x, "value": i + x}
