"""Workflows whose work kills the process that runs it, for the poison-run test.

`waypost worker --app tests.acceptance.poison_app` serves them; each worker that
takes their work dies by SIGKILL, as a process does that runs out of memory or
meets a segfault in a native library.
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import waypost as wp

# Lost engines, not the retry policy, must be what stops the step.
RETRY = wp.Retry(max_attempts=100, initial_interval=timedelta(milliseconds=10), jitter=0)


@wp.activity(retry=RETRY)
def kills_its_worker(ctx: wp.ActivityContext) -> str:
    os.kill(os.getpid(), signal.SIGKILL)
    return "never"


@wp.workflow(name="poison_activity")
async def poison_activity(ctx: wp.WorkflowContext) -> str:
    return str(await ctx.run(kills_its_worker))


@wp.workflow(name="poison_code")
async def poison_code(ctx: wp.WorkflowContext) -> str:
    os.kill(os.getpid(), signal.SIGKILL)
    return "never"
