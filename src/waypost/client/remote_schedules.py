"""The schedule calls of `AsyncClient`, over `/v1/schedules...`: the embedded engine's
calls made remote (`twins.remote_twin`: without `tenant=`, the API key decides it), and
how their requests cross the wire."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from waypost.model import schedules as sch
from waypost.model.schedules import Backfilled, ScheduleInfo, iso

from .door import Sends
from .remote_wire import route, wire
from .schedules import ScheduleCalls
from .twins import remote_twin


class ScheduleRequests:
    """Schedules of a remote client (operators change them, readers list them)."""

    schedule = remote_twin(ScheduleCalls.schedule)
    schedules = remote_twin(ScheduleCalls.schedules)
    describe_schedule = remote_twin(ScheduleCalls.describe_schedule)
    pause_schedule = remote_twin(ScheduleCalls.pause_schedule)
    resume_schedule = remote_twin(ScheduleCalls.resume_schedule)
    delete_schedule = remote_twin(ScheduleCalls.delete_schedule)
    backfill_schedule = remote_twin(ScheduleCalls.backfill_schedule)


def _seconds(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, timedelta) else value


@wire(sch.CreateSchedule)
async def _create(send: Sends, asked: sch.CreateSchedule) -> ScheduleInfo:
    body = {
        "id": asked.schedule_id,
        "workflow": asked.workflow,
        "cron": asked.cron,
        "tz": asked.tz,
        "every": _seconds(asked.every),
        "input": asked.input,
        "version": asked.version,
        "overlap": asked.overlap,
        "catchup": asked.catchup,
        "catchup_window": _seconds(asked.catchup_window),
    }
    return ScheduleInfo.from_dict(await send("POST", "/v1/schedules", json=body))


@wire(sch.ListSchedules)
async def _list(send: Sends, asked: sch.ListSchedules) -> list[ScheduleInfo]:
    found = await send("GET", "/v1/schedules")
    return [ScheduleInfo.from_dict(s) for s in found["schedules"]]


@wire(sch.GetSchedule, sch.PauseSchedule, sch.ResumeSchedule, sch.DeleteSchedule)
async def _one(send: Sends, asked: Any) -> ScheduleInfo | None:
    data = await send(*route(asked))  # GET, DELETE, POST .../pause or .../resume of it
    return None if isinstance(asked, sch.DeleteSchedule) else ScheduleInfo.from_dict(data)


@wire(sch.BackfillSchedule)
async def _backfill(send: Sends, asked: sch.BackfillSchedule) -> Backfilled:
    body = {"start": iso(asked.start), "end": iso(asked.end), "overlap": asked.overlap}
    done = await send(*route(asked), json=body)
    return Backfilled(done["schedule_id"], [(f["fire_at"], f["run_id"]) for f in done["fires"]])
