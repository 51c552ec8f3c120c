"""The health checks: the process is up, the database answers."""

from __future__ import annotations

from fastapi import Request

from ..bodies import api_router
from .common import ERRORS, engine_of

router = api_router(responses=ERRORS)


# == health ==============================================================================
@router.get("/healthz", tags=["health"], summary="The process is up.")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", tags=["health"], summary="The database answers.")
async def readyz(request: Request) -> dict[str, str]:
    await engine_of(request).check_store()
    return {"status": "ready"}
