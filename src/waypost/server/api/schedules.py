"""The API's schedule routes (v1): `/v1/schedules...`, each through the one door.

Operators and admins change schedules; every reader of the tenant lists and shows
them. Another tenant's schedule is not found (404).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import Field, StrictFloat, StrictInt, StrictStr

from waypost.model import schedules as sch

from ..bodies import ErrorBody, api_router
from .common import Caller, StrictBody, door

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": what}
    for status, what in {
        401: "No valid API key.",
        403: "The key's roles do not allow it.",
        404: "Not found in the key's tenant.",
        409: "Conflicts with the current state.",
        422: "The request is not valid.",
        503: "The database does not answer.",
    }.items()
}
router = api_router(responses=_ERRORS, tags=["schedules"])


class ScheduleBody(StrictBody):
    id: str = Field(description="The schedule's id (runs are `sched:<id>:<fire time>`).")
    workflow: str = Field(description="A workflow's name (code or a published definition).")
    cron: str | None = Field(default=None, description="Five cron fields, e.g. `0 9 * * MON-FRI`.")
    tz: str | None = Field(default=None, description="The cron's time zone (default UTC).")
    every: StrictFloat | StrictInt | None = Field(
        default=None, description="Or: an interval in seconds."
    )
    input: Any = Field(default=None, description="Each run's input (JSON).")
    version: StrictStr | StrictInt | None = Field(default=None, description="Default: the newest.")
    overlap: str = Field(default="skip", description="skip, buffer_one, allow_all, cancel_previous")
    catchup: str = Field(default="last", description="none, last or all (within catchup_window)")
    catchup_window: StrictFloat | StrictInt = Field(
        default=86400.0, description="Seconds back `all` catches up."
    )


class BackfillBody(StrictBody):
    start: str = Field(description="ISO 8601 with a zone: the range's first instant.")
    end: str = Field(description="ISO 8601 with a zone: the range's last instant.")
    overlap: str = Field(
        default="allow_all",
        description="The backfill's own policy between its runs: allow_all, skip, "
        "cancel_previous, or schedule (the schedule's). Regular fires' runs do not count.",
    )


def _out(info: sch.ScheduleInfo) -> dict[str, Any]:
    return info.to_dict()


@router.post("/v1/schedules", status_code=201, summary="Make a schedule (operator).")
async def create_schedule(
    request: Request, body: ScheduleBody, principal: Caller
) -> dict[str, Any]:
    asked = sch.CreateSchedule(
        schedule_id=body.id,
        workflow=body.workflow,
        cron=body.cron,
        tz=body.tz,
        every=body.every,
        input=body.input,
        version=body.version,
        overlap=body.overlap,
        catchup=body.catchup,
        catchup_window=body.catchup_window,
    )
    return _out(await door(request, asked, principal))


@router.get("/v1/schedules", summary="The tenant's schedules.")
async def list_schedules(request: Request, principal: Caller) -> dict[str, Any]:
    found = await door(request, sch.ListSchedules(), principal)
    return {"schedules": [_out(s) for s in found]}


@router.get("/v1/schedules/{schedule_id:id}", summary="A schedule.")
async def get_schedule(request: Request, schedule_id: str, principal: Caller) -> dict[str, Any]:
    return _out(await door(request, sch.GetSchedule(schedule_id=schedule_id), principal))


@router.post("/v1/schedules/{schedule_id:id}/pause", summary="Stop a schedule firing (operator).")
async def pause_schedule(request: Request, schedule_id: str, principal: Caller) -> dict[str, Any]:
    return _out(await door(request, sch.PauseSchedule(schedule_id=schedule_id), principal))


@router.post("/v1/schedules/{schedule_id:id}/resume", summary="Fire again from now (operator).")
async def resume_schedule(request: Request, schedule_id: str, principal: Caller) -> dict[str, Any]:
    return _out(await door(request, sch.ResumeSchedule(schedule_id=schedule_id), principal))


@router.delete("/v1/schedules/{schedule_id:id}", summary="Delete a schedule (operator).")
async def delete_schedule(request: Request, schedule_id: str, principal: Caller) -> dict[str, Any]:
    await door(request, sch.DeleteSchedule(schedule_id=schedule_id), principal)
    return {"schedule_id": schedule_id, "deleted": True}


@router.post(
    "/v1/schedules/{schedule_id:id}/backfill",
    summary="Start the runs of the fire times in [start, end] (operator).",
)
async def backfill_schedule(
    request: Request, schedule_id: str, body: BackfillBody, principal: Caller
) -> dict[str, Any]:
    asked = sch.BackfillSchedule(
        schedule_id=schedule_id, start=body.start, end=body.end, overlap=body.overlap
    )
    done: sch.Backfilled = await door(request, asked, principal)
    return done.to_dict()
