"""Version 1 of `replay_order` changed in place: it calls another activity first."""

from __future__ import annotations

import waypost as wp


@wp.activity
def refund(ctx: wp.ActivityContext, cents: int) -> str:
    return f"re-{cents}"


@wp.workflow(name="replay_order", version="1")
async def order(ctx: wp.WorkflowContext, cents: int) -> str:
    receipt = await ctx.run(refund, cents)  # was charge
    await ctx.wait_signal("go")
    return str(receipt)
