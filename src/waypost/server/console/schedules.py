"""The schedules pages: the tenant's schedules (timing, next and last fire, overlap,
paused), a schedule's page with its recent runs, and the commands the door offers for
a schedule (pause, resume, delete) as forms, shown to the roles that may use them.

A schedule's runs are the runs whose id starts with `sched:<id>:` (decision 0017), so
its page finds them with `SearchRuns`, newest first; backfilled runs are among them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from waypost.errors import WaypostError
from waypost.model import operations as ops, schedules as sch

from .pages import (
    NO_NOTICE,
    Notice,
    Visit,
    add_object_page,
    engine_of,
    list_page,
    not_done,
    not_shown,
    page,
    posted_command,
)

router = APIRouter(include_in_schema=False)

RECENT_RUNS = 20


@dataclass(frozen=True)
class ScheduleCommand:
    name: str
    label: str
    request: type[ops.Request[Any]]
    build: Callable[[str], ops.Request[Any]]
    danger: bool = False

    def offered(self, info: sch.ScheduleInfo) -> bool:
        if self.name == "pause":
            return not info.paused
        if self.name == "resume":
            return info.paused
        return True


SCHEDULE_COMMANDS: dict[str, ScheduleCommand] = {
    c.name: c
    for c in (
        ScheduleCommand(
            "pause", "Pause", sch.PauseSchedule, lambda s: sch.PauseSchedule(schedule_id=s)
        ),
        ScheduleCommand(
            "resume", "Resume", sch.ResumeSchedule, lambda s: sch.ResumeSchedule(schedule_id=s)
        ),
        ScheduleCommand(
            "delete",
            "Delete",
            sch.DeleteSchedule,
            lambda s: sch.DeleteSchedule(schedule_id=s),
            danger=True,
        ),
    )
}


@router.get("/schedules")
async def schedules_page(request: Request) -> Response:
    return await list_page(
        request,
        "console/schedules.html",
        sch.ListSchedules(),
        "schedules",
        nav="schedules",
        commands=SCHEDULE_COMMANDS,
    )


async def _schedule_page(
    request: Request,
    visit: Visit,
    schedule_id: str,
    notice: Notice = NO_NOTICE,
) -> Response:
    engine = engine_of(request)
    try:
        info = await engine.execute(sch.GetSchedule(schedule_id=schedule_id), visit.principal)
        found = await engine.execute(
            ops.SearchRuns(text=sch.fire_run_prefix(info.schedule_id), limit=RECENT_RUNS),
            visit.principal,
        )
    except WaypostError as exc:
        return not_shown(visit, exc, "Schedule not shown", notice)
    runs = [r for r in found if sch.is_fire_run(info.schedule_id, r.run_id)]
    return page(
        "console/schedule.html",
        visit,
        nav="schedules",
        s=info,
        runs=runs,
        commands=[c for c in SCHEDULE_COMMANDS.values() if visit.can(c.request)],
        **notice.values(),
    )


add_object_page(router, "/schedules/{schedule_id:id}", _schedule_page)


@router.post("/schedules/{schedule_id:id}/commands/{name}")
async def schedule_command(request: Request, schedule_id: str, name: str) -> Response:
    posted = await posted_command(request, SCHEDULE_COMMANDS, name, "schedule ")
    if isinstance(posted, Response):
        return posted
    visit, _, chosen = posted
    try:
        await engine_of(request).execute(chosen.build(schedule_id), visit.principal)
    except WaypostError as exc:
        return await _schedule_page(
            request, visit, schedule_id, not_done(exc, f"{chosen.label}: not done.")
        )
    if chosen.name == "delete":
        return RedirectResponse("/schedules", status_code=303)
    return await _schedule_page(request, visit, schedule_id, Notice(f"{chosen.label}: done."))
