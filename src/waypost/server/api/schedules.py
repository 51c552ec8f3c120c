"""The API's schedule routes (v1): `/v1/schedules...`, each through the one door.

Operators and admins change schedules; every reader of the tenant lists and shows
them. Another tenant's schedule is not found (404).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictFloat, StrictInt, StrictStr

from waypost.model import schedules as sch

from ..bodies import api_router
from .common import CORE_REFUSALS, StrictBody, refusals
from .derived import add_route, done, listed, renamed

router = api_router(responses=refusals(*CORE_REFUSALS))


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


class TriggerBody(StrictBody):
    overlap: str = Field(
        default="schedule",
        description="schedule (the schedule's policy against its last run), allow_all, "
        "skip or cancel_previous.",
    )


class BackfillBody(StrictBody):
    start: str = Field(description="ISO 8601 with a zone: the range's first instant.")
    end: str = Field(description="ISO 8601 with a zone: the range's last instant.")
    overlap: str = Field(
        default="allow_all",
        description="The backfill's own policy between its runs: allow_all, skip, "
        "cancel_previous, or schedule (the schedule's). Regular fires' runs do not count.",
    )


def _out(record: sch.ScheduleInfo | sch.Backfilled, _: object = None) -> dict[str, Any]:
    return record.to_dict()


add_route(
    router,
    sch.CreateSchedule,
    _out,
    summary="Make a schedule (operator).",
    body=ScheduleBody,
    fields=renamed(id="schedule_id"),
)
add_route(
    router,
    sch.ListSchedules,
    listed("schedules", _out),
    summary="The tenant's schedules.",
)
# The routes of one schedule (`/v1/schedules/{schedule_id}...`): what each answers, its
# summary and its body, if it takes one.
for kind, answer, summary, body in (
    (sch.GetSchedule, _out, "A schedule.", None),
    (sch.PauseSchedule, _out, "Stop a schedule firing (operator).", None),
    (sch.ResumeSchedule, _out, "Fire again from now (operator).", None),
    (sch.DeleteSchedule, done("deleted"), "Delete a schedule (operator).", None),
    (sch.TriggerSchedule, _out, "Start the schedule's run now (operator).", TriggerBody),
    (
        sch.BackfillSchedule,
        _out,
        "Start the runs of the fire times in [start, end] (operator).",
        BackfillBody,
    ),
):
    add_route(router, kind, answer, summary=summary, body=body)
