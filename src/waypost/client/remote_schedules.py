"""The schedule calls of `AsyncClient`, over `/v1/schedules...`: the names, parameters
and answers of the embedded engine's calls, without `tenant=` (the API key decides it)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from waypost.model.schedules import Backfilled, ScheduleInfo, check_schedule_id, instant_of, iso

from .door import Sends


def _path(schedule_id: str, tail: str = "") -> str:
    return f"/v1/schedules/{quote(check_schedule_id(schedule_id), safe='')}{tail}"


class ScheduleRequests:
    """Schedules of a remote client (operators change them, readers list them)."""

    _send: Sends  # the JSON answer of a request (an error answer raised as its error)

    async def schedule(
        self,
        workflow: Any,
        *,
        id: str,
        cron: str | None = None,
        tz: str | None = None,
        every: timedelta | float | None = None,
        input: Any = None,
        version: str | int | None = None,
        overlap: str = "skip",
        catchup: str = "last",
        catchup_window: timedelta | float = timedelta(days=1),
    ) -> ScheduleInfo:
        """Make a schedule (see `AsyncEngine.schedule`); `workflow` is a name, or a
        `@workflow` function whose name is sent."""
        name = getattr(getattr(workflow, "__waypost_workflow__", None), "name", workflow)
        body = {
            "id": id,
            "workflow": name,
            "cron": cron,
            "tz": tz,
            "every": every.total_seconds() if isinstance(every, timedelta) else every,
            "input": input,
            "version": version,
            "overlap": overlap,
            "catchup": catchup,
            "catchup_window": catchup_window.total_seconds()
            if isinstance(catchup_window, timedelta)
            else catchup_window,
        }
        return ScheduleInfo.from_dict(await self._send("POST", "/v1/schedules", json=body))

    async def schedules(self) -> list[ScheduleInfo]:
        found = await self._send("GET", "/v1/schedules")
        return [ScheduleInfo.from_dict(s) for s in found["schedules"]]

    async def describe_schedule(self, id: str) -> ScheduleInfo:
        return ScheduleInfo.from_dict(await self._send("GET", _path(id)))

    async def pause_schedule(self, id: str) -> ScheduleInfo:
        return ScheduleInfo.from_dict(await self._send("POST", _path(id, "/pause")))

    async def resume_schedule(self, id: str) -> ScheduleInfo:
        return ScheduleInfo.from_dict(await self._send("POST", _path(id, "/resume")))

    async def delete_schedule(self, id: str) -> None:
        await self._send("DELETE", _path(id))

    async def backfill_schedule(
        self,
        id: str,
        start: datetime | str | float,
        end: datetime | str | float,
        *,
        overlap: str = "allow_all",
    ) -> Backfilled:
        body = {
            "start": iso(instant_of(start, "start")),
            "end": iso(instant_of(end, "end")),
            "overlap": overlap,
        }
        done = await self._send("POST", _path(id, "/backfill"), json=body)
        return Backfilled(done["schedule_id"], [(f["fire_at"], f["run_id"]) for f in done["fires"]])
