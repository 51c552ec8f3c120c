"""Approvals over HTTP: the inbox, one approval, a decision."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request
from pydantic import Field

from waypost.model import operations as ops
from waypost.model.wire import to_wire

from ..bodies import api_router
from .common import ERRORS, Caller, StrictBody, door
from .derived import add_route, wired

router = api_router(responses=ERRORS)


class DecisionBody(StrictBody):
    decision: str = Field(description="'approve' or 'reject'.")
    comment: str = Field(default="", description="Recorded with the decision.")
    token: str | None = Field(
        default=None,
        description="A credential from a notification; an approver signed in with an API key "
        "needs none.",
    )


# == approvals ===========================================================================
@router.get(
    "/v1/approvals",
    tags=["approvals"],
    summary="Pending approvals: an approver's own inbox, or the tenant's for other roles.",
)
async def list_approvals(
    request: Request,
    principal: Caller,
    run_id: str | None = None,
    status: str = "pending",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    found = await door(
        request, ops.ListApprovals(run_id=run_id, status=status, limit=limit), principal
    )
    return {"approvals": [to_wire(a) for a in found]}


add_route(
    router,
    ops.GetApproval,
    wired,
    summary="One approval.",
    name="get_approval",
)


@router.post(
    "/v1/approvals/{approval_id:id}/decision",
    tags=["approvals"],
    summary="Approve or reject as the signed-in approver.",
)
async def decide(
    request: Request, approval_id: str, body: DecisionBody, principal: Caller
) -> dict[str, Any]:
    receipt = await door(
        request,
        ops.Decide(
            approval_id=approval_id,
            token=body.token,
            approver=principal.subject,
            decision=body.decision,
            comment=body.comment,
            auth="api",
        ),
        principal,
    )
    out: dict[str, Any] = to_wire(receipt)
    return out
