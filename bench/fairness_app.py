"""What the worker processes of bench/queue_fairness.py serve: one attempt in a limited
queue that works a little and answers the pid of the process that ran it."""

from __future__ import annotations

import os
import time

import waypost as wp


@wp.activity(queue="limited")
def fair_step(ctx: wp.ActivityContext, n: int) -> int:
    time.sleep(0.03)
    return os.getpid()


@wp.workflow(name="fair_run")
async def fair_run(ctx: wp.WorkflowContext, n: int) -> int:
    return int(await ctx.run(fair_step, n))
