"""The lease benchmark's workers: `workflows.py` plus a workflow whose one activity
outlasts the lease several times over, so its lease must be renewed under load."""

from __future__ import annotations

import asyncio

from workflows import bench20, noop_async, noop_sync

import waypost as wp

__all__ = ["bench20", "held", "hold", "noop_async", "noop_sync"]


@wp.activity
async def hold(ctx: wp.ActivityContext, seconds: float) -> None:
    await asyncio.sleep(seconds)


@wp.workflow(name="held")
async def held(ctx: wp.WorkflowContext, seconds: float) -> None:
    await ctx.run(hold, seconds)
