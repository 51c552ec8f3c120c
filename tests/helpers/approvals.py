"""An approval workflow and the reads that approval tests share."""

from __future__ import annotations

from typing import Any

import waypost as wp

from .history import of_type
from .polling import eventually


@wp.workflow(name="purchase")
async def purchase(ctx: wp.WorkflowContext, req: dict[str, Any]) -> dict[str, Any]:
    decision = await ctx.approval(
        "manager",
        approvers=wp.Quorum(2, group="managers"),
        expires_in=req.get("expires_in", 3600),
        data={"amount": req["amount"]},
    )
    return {"outcome": decision.outcome, "by": sorted(decision.decided_by)}


def pending_approval(engine: Any, run_id: str) -> wp.ApprovalInfo:
    def find() -> wp.ApprovalInfo | None:
        found = engine.approvals(run_id=run_id)
        return found[0] if found else None

    info: wp.ApprovalInfo = eventually(find, f"the approval of run {run_id}")
    return info


def refusals(engine: Any, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in of_type(engine.history(run_id), "ApprovalRefused")]
