"""Schedules of `AsyncEngine` (create, list, show, pause, resume, delete, backfill): a
mixin of thin methods over the one door."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from waypost.model import schedules as sch
from waypost.model.schedules import Backfilled, ScheduleInfo

from .door import LocalDoor


class ScheduleCalls:
    """Schedules of a tenant, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

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
        tenant: str = "default",
    ) -> ScheduleInfo:
        """Start a run of `workflow` (a `@workflow` function or a name: registered code, a
        published definition, or one a running worker serves) at each fire time: on `cron`
        (five fields, read in the time zone `tz`, default UTC) or `every` interval (counted
        from the Unix epoch). `overlap` (skip, buffer_one, allow_all, cancel_previous) says
        what a fire does while the previous run has not finished; `catchup` (none, last,
        all within `catchup_window`) what happens to fires missed while no engine ran.
        Each fire's run id is `sched:<id>:<fire time UTC ISO>`. `ScheduleExists` if the
        tenant has a schedule `id` already."""
        name = getattr(getattr(workflow, "__waypost_workflow__", None), "name", workflow)
        request = sch.CreateSchedule(
            schedule_id=id,
            workflow=name,
            cron=cron,
            tz=tz,
            every=every,
            input=input,
            version=version,
            overlap=overlap,
            catchup=catchup,
            catchup_window=catchup_window,
        )
        return await self._local(request, tenant)

    async def schedules(self, *, tenant: str = "default") -> list[ScheduleInfo]:
        """The schedules of `tenant`, by id."""
        return await self._local(sch.ListSchedules(), tenant)

    async def describe_schedule(self, id: str, *, tenant: str = "default") -> ScheduleInfo:
        """A schedule of `tenant` (`ScheduleNotFound`)."""
        return await self._local(sch.GetSchedule(schedule_id=id), tenant)

    async def pause_schedule(self, id: str, *, tenant: str = "default") -> ScheduleInfo:
        """Stop a schedule firing; its runs go on."""
        return await self._local(sch.PauseSchedule(schedule_id=id), tenant)

    async def resume_schedule(self, id: str, *, tenant: str = "default") -> ScheduleInfo:
        """Fire again from now on (the fires that fell while paused are not caught up)."""
        return await self._local(sch.ResumeSchedule(schedule_id=id), tenant)

    async def delete_schedule(self, id: str, *, tenant: str = "default") -> None:
        """Delete a schedule; the runs it started go on."""
        await self._local(sch.DeleteSchedule(schedule_id=id), tenant)

    async def trigger_schedule(
        self, id: str, *, overlap: str = "schedule", tenant: str = "default"
    ) -> Backfilled:
        """Start the schedule's run now, through its overlap policy against its last run
        (or `overlap`: `allow_all`, `skip`, `cancel_previous`); its one fire and the run
        (None: skipped). The regular fires go on as they were."""
        return await self._local(sch.TriggerSchedule(schedule_id=id, overlap=overlap), tenant)

    async def backfill_schedule(
        self,
        id: str,
        start: datetime | str | float,
        end: datetime | str | float,
        *,
        overlap: str = "allow_all",
        tenant: str = "default",
    ) -> Backfilled:
        """Start the runs of the schedule's fire times in [start, end] (at most 1000).

        `overlap` is the backfill's own policy between its own runs: `allow_all` (all at
        once), `skip`, `cancel_previous`, or `schedule` (the schedule's; `buffer_one`
        skips). Runs of the schedule's regular fires do not count for it, nor its runs
        for later regular fires. A fire that has its run already finds it again."""
        request = sch.BackfillSchedule(schedule_id=id, start=start, end=end, overlap=overlap)
        return await self._local(request, tenant)
