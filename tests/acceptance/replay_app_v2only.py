"""Only a version 2 of `replay_order`: runs of version 1 are not this code's to replay."""

from __future__ import annotations

import waypost as wp


@wp.workflow(name="replay_order", version="2")
async def order(ctx: wp.WorkflowContext, cents: int) -> str:
    return f"v2-{cents}"
