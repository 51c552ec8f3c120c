"""Suspended and poison runs: each with its error and the code location, and the
actions that repair it (resume, retry, terminate), on a page of their own."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from waypost.errors import WaypostError
from waypost.model import operations as ops

from .commands import COMMANDS
from .pages import engine_of, page, refusal, signed_in

router = APIRouter(include_in_schema=False)

LIMIT = 200


@router.get("/suspended")
async def suspended_page(request: Request) -> Response:
    visit = await signed_in(request)
    engine = engine_of(request)
    error, status, runs = "", 200, []
    try:
        found = await engine.execute(ops.PageRuns(status="suspended", limit=LIMIT), visit.principal)
        runs = found.runs
    except WaypostError as exc:
        status, error = refusal(exc)
    return page(
        "console/suspended.html",
        visit,
        status=status,
        nav="suspended",
        runs=runs,
        error=error,
        commands=COMMANDS,
    )
