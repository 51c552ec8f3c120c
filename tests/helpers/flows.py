"""Workflow bodies several tests share, called from their own `@wp.workflow` functions
(each test module keeps its own workflow names)."""

from __future__ import annotations

from typing import Any

import waypost as wp


async def sum_of_steps(ctx: wp.WorkflowContext, activity: Any, n: int) -> int:
    """Runs `activity(i)` for i in 0..n-1, one after another; the sum of their results."""
    total = 0
    for i in range(n):
        total += await ctx.run(activity, i)
    return total
