"""The runs page: filters, search, counts per status, keyset paging, live refresh.

Filters (status, workflow, version) page through `PageRuns` on an index, a page
starting after the last run of the one before (a cursor), so a deep page costs what
the first does. A search (`q`: a run id, the start of one, or a correlation value or
`key=value` a run waits with) answers the newest matches through `SearchRuns`.

`/runs` is the page; `/runs/fragment` the same table alone, which the page's script
fetches every few seconds, so the list moves without a reload.

Keyset cursors only go forward, so a page's address carries the way back: `back`, the
offset and cursor of each page before it (the last `BACK_KEPT`), and `offset`, the
position of its first run. They only draw the pager ("51-56 of 56", Previous): a
cursor in them is checked by the door when followed, like any other. The total is
shown when it is cheap, from the counts by status the page reads anyway (no filter, or
a status alone); with a workflow filter the pager says "51-56" without one.
"""

from __future__ import annotations

import re
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
BACK_KEPT = 20  # pages a Previous link can go back through
_BACK_ENTRY = re.compile(r"(\d{1,9}):([A-Za-z0-9_.-]{0,2048})")


def _offset(text: str | None) -> int | None:
    """The position of a page's first run, from its address (None: not known)."""
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 9:
        return None
    return int(text)


def _back(text: str) -> list[tuple[int, str]]:
    """The pages before this one, oldest first: (offset, cursor; "" for the first page).
    Anything else in the address is left out (it only draws the pager)."""
    found = [_BACK_ENTRY.fullmatch(part) for part in text.split(",")[-BACK_KEPT:]] if text else []
    return [(int(m[1]), m[2]) for m in found if m is not None]


def _back_text(entries: list[tuple[int, str]]) -> str:
    return ",".join(f"{offset}:{cursor}" for offset, cursor in entries[-BACK_KEPT:])


def _position(first: int | None, shown: int, total: int | None) -> str:
    """ "51-56 of 56" (or "51-56" when the total is not known; "" when the position is
    not)."""
    if first is None or shown == 0:
        return ""
    span = f"{first + 1}\u2013{first + shown}"
    return f"{span} of {total}" if total is not None else span


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
    offset = _offset(query.get("offset")) if cursor else 0
    back = _back(query.get("back", "")) if cursor else []
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
        "offset": "" if offset is None else str(offset),
        "back": _back_text(back),
        "previous_url": None,
        "position": "",
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
        ahead = {"cursor": found.next_cursor}
        if offset is not None:
            ahead["offset"] = str(offset + len(found.runs))
            ahead["back"] = _back_text([*back, (offset, cursor or "")])
        values["next_url"] = "/runs?" + _query({**filters, **ahead})
    if back:
        before, (previous_offset, previous_cursor) = back[:-1], back[-1]
        values["previous_url"] = "/runs?" + _query(
            {
                **filters,
                "cursor": previous_cursor,
                "offset": str(previous_offset) if previous_cursor else "",
                "back": _back_text(before) if previous_cursor else "",
            }
        )
    counts = values["counts"]
    total: int | None = None
    if not filters["workflow"] and not filters["version"]:
        total = counts.get(filters["status"], 0) if filters["status"] else sum(counts.values())
    values["position"] = _position(offset, len(found.runs), total)
    return values


@router.get("/runs")
async def runs_page(request: Request) -> Response:
    visit = await signed_in(request)
    values = await _listing(request, visit)
    status = values.pop("status", 200)
    fragment_url = "/runs/fragment?" + _query(
        {
            **values["filters"],
            "cursor": values["cursor"],
            "offset": values["offset"] if values["cursor"] else "",
            "back": values["back"],
        }
    )
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
