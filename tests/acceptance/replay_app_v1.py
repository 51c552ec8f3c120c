"""The code a database's runs were started on, for `waypost replay` tests."""

from __future__ import annotations

import waypost as wp


@wp.activity
def charge(ctx: wp.ActivityContext, cents: int) -> str:
    return f"ch-{cents}"


@wp.workflow(name="replay_order", version="1")
async def order(ctx: wp.WorkflowContext, cents: int) -> str:
    receipt = await ctx.run(charge, cents)
    await ctx.wait_signal("go")
    return str(receipt)
