"""The caller's tenant over HTTP: its quotas, overrides and what it holds."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from waypost.model import operations as ops
from waypost.model.wire import to_wire

from ..bodies import api_router
from .common import ERRORS, Caller, door

router = api_router(responses=ERRORS)


# == the caller's tenant ===================================================================
@router.get(
    "/v1/tenant",
    tags=["tenant"],
    summary="The key's tenant: its effective quotas, its overrides and what it holds now.",
)
async def tenant(request: Request, principal: Caller) -> dict[str, Any]:
    out: dict[str, Any] = to_wire(await door(request, ops.GetTenant(), principal))
    return out
