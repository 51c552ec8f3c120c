"""Workflow bodies several tests share, called from their own `@wp.workflow` functions
(each test module keeps its own workflow names)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import waypost as wp


async def sum_of_steps(ctx: wp.WorkflowContext, activity: Any, n: int) -> int:
    """Runs `activity(i)` for i in 0..n-1, one after another; the sum of their results."""
    total = 0
    for i in range(n):
        total += await ctx.run(activity, i)
    return total


async def each_in_turn(ctx: wp.WorkflowContext, activities: Sequence[Any], arg: Any) -> list[Any]:
    """Runs each of `activities` with `arg`, one after another; their results, in order."""
    return [await ctx.run(activity, arg) for activity in activities]


async def handler_without_payload(ctx: wp.WorkflowContext) -> None:
    """Registers a signal handler that takes no argument (a bug), then waits."""

    def on_item() -> None:
        pass

    ctx.on_signal("item", on_item)  # type: ignore[arg-type]
    await ctx.wait_signal("never")
