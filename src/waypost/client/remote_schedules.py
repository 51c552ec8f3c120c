"""How the requests of the remote client's schedule calls cross the wire, over
`/v1/schedules...` (the calls are the embedded engine's, made remote: `twins.remote_twin`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from waypost.model import schedules as sch
from waypost.model.schedules import Backfilled, ScheduleInfo, iso

from .door import Sends
from .remote_wire import Wires, body, route


def _seconds(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, timedelta) else value


async def _create(send: Sends, asked: sch.CreateSchedule) -> ScheduleInfo:
    sent = body(asked, schedule_id="id")
    sent["every"] = _seconds(asked.every)  # a timedelta or seconds: seconds, as JSON has them
    sent["catchup_window"] = _seconds(asked.catchup_window)
    return ScheduleInfo.from_dict(await send(*route(asked), json=sent))


async def _list(send: Sends, asked: sch.ListSchedules) -> list[ScheduleInfo]:
    found = await send("GET", "/v1/schedules")
    return [ScheduleInfo.from_dict(s) for s in found["schedules"]]


async def _one(send: Sends, asked: Any) -> ScheduleInfo | None:
    data = await send(*route(asked))  # GET, DELETE, POST .../pause or .../resume of it
    return None if isinstance(asked, sch.DeleteSchedule) else ScheduleInfo.from_dict(data)


async def _backfill(send: Sends, asked: sch.BackfillSchedule) -> Backfilled:
    sent = {"start": iso(asked.start), "end": iso(asked.end), "overlap": asked.overlap}
    done = await send(*route(asked), json=sent)
    return Backfilled(done["schedule_id"], [(f["fire_at"], f["run_id"]) for f in done["fires"]])


async def _trigger(send: Sends, asked: sch.TriggerSchedule) -> Backfilled:
    done = await send(*route(asked), json={"overlap": asked.overlap})
    return Backfilled(done["schedule_id"], [(f["fire_at"], f["run_id"]) for f in done["fires"]])


SCHEDULE_WIRES: Wires = {
    sch.CreateSchedule: _create,
    sch.ListSchedules: _list,
    sch.GetSchedule: _one,
    sch.PauseSchedule: _one,
    sch.ResumeSchedule: _one,
    sch.DeleteSchedule: _one,
    sch.BackfillSchedule: _backfill,
    sch.TriggerSchedule: _trigger,
}
