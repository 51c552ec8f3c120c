"""Suspended and poison runs: each with its error and the code location, and the
actions that repair it (resume, retry, terminate), on a page of their own."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from waypost.model import operations as ops

from .commands import COMMANDS
from .pages import list_page

router = APIRouter(include_in_schema=False)

LIMIT = 200


@router.get("/suspended")
async def suspended_page(request: Request) -> Response:
    return await list_page(
        request,
        "console/suspended.html",
        ops.PageRuns(status="suspended", limit=LIMIT),
        "runs",
        nav="suspended",
        listed=lambda found: found.runs,
        commands=COMMANDS,
    )
