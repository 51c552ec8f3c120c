"""How the requests of the remote client's schedule calls cross the wire, over
`/v1/schedules...` (the calls are the embedded engine's, made remote: `twins.remote_twin`):
as their declarations say (`remote_wire.declared`), but a new schedule's times, sent as
seconds, and a backfill's range, as ISO 8601."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from waypost.model import schedules as sch
from waypost.model.schedules import Backfilled, ScheduleInfo, iso

from .door import Sends
from .remote_wire import Wires, body, declared, route


def _seconds(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, timedelta) else value


async def _create(send: Sends, asked: sch.CreateSchedule) -> ScheduleInfo:
    sent = body(asked, schedule_id="id")
    sent["every"] = _seconds(asked.every)  # a timedelta or seconds: seconds, as JSON has them
    sent["catchup_window"] = _seconds(asked.catchup_window)
    return ScheduleInfo.from_dict(await send(*route(asked), json=sent))


def _backfilled(done: Any) -> Backfilled:
    return Backfilled(done["schedule_id"], [(f["fire_at"], f["run_id"]) for f in done["fires"]])


async def _backfill(send: Sends, asked: sch.BackfillSchedule) -> Backfilled:
    sent = {"start": iso(asked.start), "end": iso(asked.end), "overlap": asked.overlap}
    return _backfilled(await send(*route(asked), json=sent))


_ONE = declared(ScheduleInfo.from_dict)  # GET, POST .../pause or .../resume of one schedule

SCHEDULE_WIRES: Wires = {
    sch.CreateSchedule: _create,
    sch.ListSchedules: declared(
        lambda found: [ScheduleInfo.from_dict(s) for s in found["schedules"]]
    ),
    sch.GetSchedule: _ONE,
    sch.PauseSchedule: _ONE,
    sch.ResumeSchedule: _ONE,
    sch.DeleteSchedule: declared(lambda _: None),
    sch.BackfillSchedule: _backfill,
    sch.TriggerSchedule: declared(_backfilled),
}
