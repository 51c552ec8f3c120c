"""A code workflow with a query that never returns, for the compute processes' test."""

from __future__ import annotations

import waypost as wp


@wp.workflow(name="spinner", version="1")
async def spinner(ctx: wp.WorkflowContext) -> str:
    ctx.set_query("hello", lambda: "hello")
    ctx.set_query("spin", _spin)
    await ctx.wait_signal("stop")
    return "stopped"


def _spin() -> None:
    while True:  # a query handler that never returns: only the backstop stops it
        pass
