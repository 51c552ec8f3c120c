"""Workflows the HTTP benchmark's server serves (bench/http_api.py)."""

from __future__ import annotations

from typing import Any

import waypost as wp


@wp.workflow(name="http_noop")
async def http_noop(ctx: wp.WorkflowContext, value: Any = None) -> Any:
    return value


@wp.workflow(name="http_wait")
async def http_wait(ctx: wp.WorkflowContext, value: Any = None) -> str:
    await ctx.wait_signal("go")
    return ctx.now().isoformat()  # when the workflow went on after the signal
