"""The runs page: filters, search, counts per status, keyset paging, live refresh.

Filters (status, workflow, version) page through `PageRuns` on an index, a page
starting after the last run of the one before (a cursor), so a deep page costs what
the first does. A search (`q`: a run id, the start of one, or a correlation value or
`key=value` a run waits with) answers the newest matches through `SearchRuns`.

`/runs` is the page; `/runs/fragment` the same table alone, which the page's script
fetches every few seconds, so the list moves without a reload.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from waypost.errors import WaypostError
from waypost.model import operations as ops
from waypost.model.status import RunStatus

from .pages import Visit, engine_of, page, query_of, refusal, signed_in, visit_of

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 50
FILTERS = ("status", "workflow", "version", "q")


def _filters(query: dict[str, str]) -> dict[str, str]:
    """The page's filters from its query, as given (the door checks them); "" when unset."""
    return {name: query.get(name, "") for name in FILTERS}


def _query(values: dict[str, str]) -> str:
    return urlencode({k: v for k, v in values.items() if v})


async def _listing(request: Request, visit: Visit) -> dict[str, Any]:
    try:
        query = query_of(request)
    except WaypostError as exc:
        query = {}
        bad: tuple[int, str] | None = refusal(exc)
    else:
        bad = None
    filters = _filters(query)
    cursor = query.get("cursor") or None
    engine = engine_of(request)
    values: dict[str, Any] = {
        "filters": filters,
        "statuses": [s.value for s in RunStatus],
        "runs": [],
        "next_url": None,
        "first_url": "/runs?" + _query(filters),
        "error": "",
        "counts": {},
        "searched": False,
        "cursor": cursor or "",
    }
    if bad is not None:
        values["status"], values["error"] = bad
        return values
    try:
        values["counts"] = await engine.execute(ops.CountRuns(), visit.principal)
        if filters["q"]:
            values["runs"] = await engine.execute(
                ops.SearchRuns(text=filters["q"], limit=PAGE_SIZE), visit.principal
            )
            values["searched"] = True
            return values
        found = await engine.execute(
            ops.PageRuns(
                status=filters["status"] or None,
                workflow=filters["workflow"] or None,
                version=filters["version"] or None,
                cursor=cursor,
                limit=PAGE_SIZE,
            ),
            visit.principal,
        )
    except WaypostError as exc:
        values["status"], values["error"] = refusal(exc)
        return values
    values["runs"] = found.runs
    if found.next_cursor:
        values["next_url"] = "/runs?" + _query({**filters, "cursor": found.next_cursor})
    return values


@router.get("/runs")
async def runs_page(request: Request) -> Response:
    visit = await signed_in(request)
    values = await _listing(request, visit)
    status = values.pop("status", 200)
    fragment_url = "/runs/fragment?" + _query({**values["filters"], "cursor": values["cursor"]})
    return page(
        "console/runs.html", visit, status=status, nav="runs", fragment_url=fragment_url, **values
    )


@router.get("/runs/fragment")
async def runs_fragment(request: Request) -> Response:
    visit = await visit_of(request)
    if visit is None:  # the page's script keeps what it shows (no sign-in page in a table)
        return Response("signed out", status_code=401, media_type="text/plain")
    values = await _listing(request, visit)
    status = values.pop("status", 200)
    return page("console/runs_table.html", visit, status=status, **values)
