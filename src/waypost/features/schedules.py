"""Schedules: their operations, and the loop that fires them (decision 0017).

Every engine that serves runs this loop. Each tick it reads the schedules of every
tenant that are due (`next_fire_at <= now`, not paused) or hold a buffered fire, and
for each one:

1. works out which fires to run: the on-time ones, and the missed ones its catch-up
   policy keeps (`model/schedules.py`);
2. starts each fire's run, as its overlap policy says, under the run id
   `sched:<id>:<fire time>`, so that a fire started by two engines is one run (the
   second start finds the first's run);
3. advances `next_fire_at` with a conditional update (`... WHERE next_fire_at = seen`):
   of the engines that handled the same fires, one moves it on, the others' updates
   change nothing.

Starting before advancing means an engine that dies in between leaves the schedule
due: the next tick (of any engine) starts the same run ids again, finding the runs
that exist, and advances it. A fire is never lost and never runs twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from waypost.engine.faults import Crash
from waypost.engine.ports import Machinery
from waypost.errors import (
    InvalidRequest,
    QuotaExceeded,
    RunIdConflict,
    RunNotActive,
    RunNotFound,
    ScheduleExists,
    ScheduleNotFound,
    StoreError,
    UnknownWorkflow,
    WaypostError,
)
from waypost.model import operations as ops, schedules as sch
from waypost.model.events import canonical_json
from waypost.model.identity import Principal, normal_identity, preview
from waypost.model.logs import logger
from waypost.model.requests import handles
from waypost.model.schedules import CatchUp, Overlap, ScheduleInfo, Timing
from waypost.model.status import RunStatus
from waypost.store.reach import warn_unless_away
from waypost.store.schedules import ScheduleAdvance, ScheduleRecord

from .runs import Runs
from .stored import answer_of

log = logger("waypost.schedules")

_BATCH = 100


def timing_of(rec: ScheduleRecord) -> Timing:
    return Timing(cron=rec.cron, tz=rec.tz, every=rec.every)


def info_of(rec: ScheduleRecord) -> ScheduleInfo:
    return answer_of(ScheduleInfo, rec, input=json.loads(rec.input))


def fires_to_run(rec: ScheduleRecord, now: float) -> tuple[list[float], float | None]:
    """The fire times a due schedule runs now (oldest first), and its next fire time
    after them, as its catch-up policy says."""
    timing = timing_of(rec)
    due_from = rec.next_fire_at
    if due_from is None or due_from > now:
        return [], due_from
    on_time = timing.fires(max(due_from, now - sch.ON_TIME), now, limit=sch.MAX_FIRES)
    after_now = timing.next_after(now)
    policy = CatchUp(rec.catchup)
    if policy is CatchUp.NONE:
        return on_time, after_now
    if policy is CatchUp.LAST:
        if on_time:
            return on_time, after_now
        latest = _latest_fire(timing, due_from, now)
        return ([latest] if latest is not None else []), after_now
    start = max(due_from, now - rec.catchup_window)
    found: list[float] = []
    for at in timing.fires_after(start - 1e-6):
        if at > now:
            break
        if len(found) == sch.MAX_FIRES:  # the rest at the next tick
            return found, at
        found.append(at)
    return found, after_now


def _latest_fire(timing: Timing, since: float, now: float) -> float | None:
    """The latest fire time in [since, now], looking back in doubling steps."""
    span = 3600.0
    while True:
        start = max(since, now - span)
        latest = None
        for at in timing.fires_after(start - 1e-6):
            if at > now:
                break
            latest = at
        if latest is not None or start <= since:
            return latest
        span *= 2


class Schedules:
    """The schedule operations of one engine, and its firing loop."""

    def __init__(self, machinery: Machinery, runs: Runs) -> None:
        self.machinery = machinery
        self.runs = runs
        self._wake = asyncio.Event()

    # == operations ==========================================================
    @handles(sch.CreateSchedule)
    async def create(self, req: sch.CreateSchedule, principal: Principal) -> ScheduleInfo:
        m = self.machinery
        tenant = principal.tenant
        timing = Timing.of(req.cron, req.tz, req.every)
        await self._often_enough(tenant, timing)
        if not await self.runs.knows_workflow(tenant, req.workflow):
            raise UnknownWorkflow(
                f"schedule {preview(req.schedule_id)}: no workflow named "
                f"{preview(req.workflow)} is registered here, published by tenant "
                f"{preview(tenant)} as a definition, or served by a running worker"
            )
        payload = m.codec.encode(req.input)
        await self.runs.definitions.bounded(tenant, "input", payload)
        now = m.settings.clock()
        rec = ScheduleRecord(
            tenant=tenant,
            schedule_id=req.schedule_id,
            workflow=req.workflow,
            version=None if req.version is None else str(req.version),
            cron=timing.cron,
            tz=timing.tz,
            every=timing.every,
            input=canonical_json(payload),
            overlap=req.overlap,
            catchup=req.catchup,
            catchup_window=sch.seconds_of(req.catchup_window, "catchup_window", 0, sch.MAX_WINDOW),
            paused=False,
            next_fire_at=timing.next_after(now),
            last_fire_at=None,
            last_run_id=None,
            buffered_fire_at=None,
            created_at=now,
            created_by=principal.subject,
        )
        if not await m.store.create_schedule(rec, m.settings.quotas):
            raise ScheduleExists(
                f"tenant {preview(tenant)} has a schedule {preview(req.schedule_id)} already"
            )
        log.info("schedule %s of %s created: %s", rec.schedule_id, tenant, timing.describe())
        self._wake.set()
        return info_of(rec)

    async def _often_enough(self, tenant: str, timing: Timing) -> None:
        """`InvalidRequest` if the schedule would fire more often than the tenant's
        `min_schedule_interval` allows."""
        m = self.machinery
        least = (await m.quotas.get(tenant)).min_schedule_interval
        if least is None:
            return
        close = sch.fires_closer_than(timing, m.settings.clock(), least)
        if close is None:
            return
        gap = close[1] - close[0]
        raise InvalidRequest(
            f"schedule {timing.describe()} would fire {gap:g}s apart; tenant "
            f"{preview(tenant)} allows schedules to fire at most every {least}s "
            "(min_schedule_interval)",
            field="every" if timing.every is not None else "cron",
        )

    async def _record(self, tenant: str, schedule_id: str) -> ScheduleRecord:
        rec = await self.machinery.store.get_schedule(tenant, schedule_id)
        if rec is None:
            raise ScheduleNotFound(
                f"no schedule {preview(schedule_id)} in tenant {preview(tenant)}"
            )
        return rec

    @handles(sch.ListSchedules)
    async def list_schedules(
        self, req: sch.ListSchedules, principal: Principal
    ) -> list[ScheduleInfo]:
        return [info_of(r) for r in await self.machinery.store.list_schedules(principal.tenant)]

    @handles(sch.GetSchedule)
    async def get(self, req: sch.GetSchedule, principal: Principal) -> ScheduleInfo:
        return info_of(await self._record(principal.tenant, req.schedule_id))

    @handles(sch.PauseSchedule)
    async def pause(self, req: sch.PauseSchedule, principal: Principal) -> ScheduleInfo:
        m = self.machinery
        await self._record(principal.tenant, req.schedule_id)
        await m.store.set_schedule_paused(
            principal.tenant, req.schedule_id, True, None, principal.subject, m.settings.clock()
        )
        return info_of(await self._record(principal.tenant, req.schedule_id))

    @handles(sch.ResumeSchedule)
    async def resume(self, req: sch.ResumeSchedule, principal: Principal) -> ScheduleInfo:
        m = self.machinery
        rec = await self._record(principal.tenant, req.schedule_id)
        if rec.paused:
            now = m.settings.clock()
            upcoming = timing_of(rec).next_after(now)
            await m.store.set_schedule_paused(
                principal.tenant, req.schedule_id, False, upcoming, principal.subject, now
            )
            self._wake.set()
        return info_of(await self._record(principal.tenant, req.schedule_id))

    @handles(sch.DeleteSchedule)
    async def delete(self, req: sch.DeleteSchedule, principal: Principal) -> None:
        if not await self.machinery.store.delete_schedule(principal.tenant, req.schedule_id):
            raise ScheduleNotFound(
                f"no schedule {preview(req.schedule_id)} in tenant {preview(principal.tenant)}"
            )

    @handles(sch.BackfillSchedule)
    async def backfill(self, req: sch.BackfillSchedule, principal: Principal) -> sch.Backfilled:
        """Start the runs of the fire times in [start, end] (see `BackfillSchedule`)."""
        rec = await self._record(principal.tenant, req.schedule_id)
        times = timing_of(rec).fires(float(req.start), float(req.end))
        # Its own policy, between its own runs: the regular fires' last run is not its
        # previous, and it never moves `last_run_id` (decision 0017, "Backfill and overlap").
        policy = Overlap(rec.overlap) if req.overlap == "schedule" else Overlap(req.overlap)
        previous: str | None = None
        fires: list[tuple[str, str | None]] = []
        # The backfill's runs are started on behalf of whoever asked for it.
        by = normal_identity(principal.subject)
        for at in times:
            started, unstarted = await self._fire(rec, at, policy, previous, "backfilled", by)
            if started is not None:
                previous = started
            if unstarted is not None:
                self._observe(rec, unstarted)
            fires.append((sch.iso(at), started))
        return sch.Backfilled(rec.schedule_id, fires)

    @handles(sch.TriggerSchedule)
    async def trigger(self, req: sch.TriggerSchedule, principal: Principal) -> sch.Backfilled:
        """Start the schedule's run now (see `TriggerSchedule`)."""
        rec = await self._record(principal.tenant, req.schedule_id)
        now = self.machinery.settings.clock()
        policy = Overlap(rec.overlap) if req.overlap == "schedule" else Overlap(req.overlap)
        by = normal_identity(principal.subject)
        started, unstarted = await self._fire(rec, now, policy, rec.last_run_id, "triggered", by)
        if unstarted is not None:
            self._observe(rec, unstarted)
        return sch.Backfilled(rec.schedule_id, [(sch.iso(now), started)])

    # == firing ==============================================================
    def wake(self) -> None:
        self._wake.set()

    async def fire_forever(self) -> None:
        """Fire due schedules every poll interval (and when nudged), until cancelled."""
        m = self.machinery
        while True:
            self._wake.clear()
            try:
                await self.tick()
            except StoreError as exc:
                store = self.machinery.store
                warn_unless_away(log, store, "schedules: the store failed (%s); trying again", exc)
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the
            # cancellation of a stop that arrives as the event is set, and the stop hangs.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(m.settings.poll_interval):
                    await self._wake.wait()

    async def tick(self) -> int:
        """Handle every due schedule once; how many this engine advanced."""
        m = self.machinery
        now = m.settings.clock()
        advanced = 0
        for rec in await m.store.due_schedules(now, _BATCH):
            try:
                advanced += await self._handle(rec, now)
            except (StoreError, Crash):
                raise
            except Exception:  # one broken schedule must not stop the others
                log.exception("schedule %s of %s could not fire", rec.schedule_id, rec.tenant)
        return advanced

    async def _handle(self, rec: ScheduleRecord, now: float) -> int:
        fires, upcoming = fires_to_run(rec, now)
        last_run, last_fire, buffered = rec.last_run_id, rec.last_fire_at, rec.buffered_fire_at
        policy = Overlap(rec.overlap)
        unstarted: list[str] = []  # outcomes told only by the engine whose advance lands
        if buffered is not None and not await self._running(rec.tenant, last_run):
            started, outcome = await self._fire(rec, buffered, Overlap.ALLOW_ALL, last_run)
            last_run, last_fire, buffered = started or last_run, buffered, None
            unstarted += [outcome] if outcome is not None else []
        for at in fires:
            if policy is Overlap.BUFFER_ONE and await self._running(rec.tenant, last_run):
                buffered = at  # the latest replaces any older one
                unstarted.append("buffered")
                continue
            kind = "started" if at >= now - sch.ON_TIME else "caught_up"
            started, outcome = await self._fire(rec, at, policy, last_run, kind)
            if started is not None:
                last_run, last_fire = started, at
            unstarted += [outcome] if outcome is not None else []
        if (last_run, last_fire, buffered) == (
            rec.last_run_id,
            rec.last_fire_at,
            rec.buffered_fire_at,
        ) and upcoming == rec.next_fire_at:
            return 0
        self.machinery.settings.faults.hit("schedules:started")
        moved = await self.machinery.store.advance_schedule(
            ScheduleAdvance(
                tenant=rec.tenant,
                schedule_id=rec.schedule_id,
                seen=rec.next_fire_at,
                next_fire_at=upcoming,
                last_fire_at=last_fire,
                last_run_id=last_run,
                buffered_fire_at=buffered,
            )
        )
        if moved:
            for outcome in unstarted:
                self._observe(rec, outcome)
        return int(moved)

    def _observe(self, rec: ScheduleRecord, outcome: str, lag: float | None = None) -> None:
        self.machinery.settings.observer.schedule_fired(rec.tenant, outcome, lag)

    async def _running(self, tenant: str, run_id: str | None) -> bool:
        if run_id is None:
            return False
        run = await self.machinery.store.get_run(tenant, run_id)
        return run is not None and not RunStatus(run.status).finished

    async def _fire(
        self,
        rec: ScheduleRecord,
        at: float,
        policy: Overlap,
        previous: str | None,
        kind: str = "started",
        started_by: str | None = None,
    ) -> tuple[str | None, str | None]:
        """Start the run of the fire at `at` as `policy` says: its run id (None: not
        started), and the outcome to tell if no run started (skipped, not_started).

        The run is started on behalf of `started_by` (a backfill's: whoever asked for it),
        else of the schedule's creator: whoever set it up may not decide its runs'
        approvals (segregation of duties), as if they had started each run themselves.

        A run this call creates is told at once as `kind` (started, caught_up,
        backfilled) with its lag; a start that finds the run another engine made is not
        told again."""
        running = await self._running(rec.tenant, previous)
        if running and policy in (Overlap.SKIP, Overlap.BUFFER_ONE):
            log.info(
                "schedule %s: fire %s skipped (%s runs)", rec.schedule_id, sch.iso(at), previous
            )
            return None, "skipped"
        principal = Principal.local_for(rec.tenant, f"schedule {rec.schedule_id}")
        if running and policy is Overlap.CANCEL_PREVIOUS and previous is not None:
            reason = f"schedule {rec.schedule_id} fired again at {sch.iso(at)}"
            with contextlib.suppress(RunNotActive, RunNotFound):
                await self.runs.cancel(ops.Cancel(run_id=previous, reason=reason), principal)
        request = ops.StartRun(
            workflow=rec.workflow,
            input=json.loads(rec.input),
            run_id=sch.fire_run_id(rec.schedule_id, at),
            version=rec.version,
            started_by=started_by or normal_identity(rec.created_by),
        )
        try:
            started = await self.runs.start_run(request, principal)
        except (QuotaExceeded, UnknownWorkflow, RunIdConflict) as exc:
            log.warning("schedule %s: fire %s not started: %s", rec.schedule_id, sch.iso(at), exc)
            return None, "not_started"
        except WaypostError as exc:
            if isinstance(exc, StoreError):
                raise
            log.warning("schedule %s: fire %s not started: %s", rec.schedule_id, sch.iso(at), exc)
            return None, "not_started"
        if started.created:
            self._observe(rec, kind, self.machinery.settings.clock() - at)
        return started.run_id, None
