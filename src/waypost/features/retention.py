"""Retention: a tenant's finished runs purged once they are old enough.

`PurgeRuns` purges, oldest first, the caller's tenant's runs that finished (completed,
failed, cancelled, terminated) before `now - older_than_seconds`, in transactions of
`batch` runs (`Store.purge_runs`), so that no transaction holds the engine's tables
long. Each purged run leaves its summary in `purged_runs` (`GetPurged`, `ListPurged`):
its workflow, version, final status, times, its chain's length and last hash, who
purged it and why; everything else of it is deleted, and its id answers `RunNotFound`
like any unknown id. A dry run counts what would go and writes nothing.

Scheduled retention: every engine runs `retain_forever` (every `retention_every`
seconds), which purges, for each tenant that has finished runs and a `retention_days`
quota, the runs that finished more than that many days ago, in transactions of
`RETENTION_BATCH` runs, yielding to the engine's other work between them. Several
engines may do it at once: a run is purged once (PostgreSQL's claim skips runs another
purge holds; SQLite has one writer), and a purge that finds nothing does nothing.
"""

from __future__ import annotations

import asyncio

from waypost.engine.ports import Machinery
from waypost.errors import RunNotFound, StoreError
from waypost.model import operations as ops
from waypost.model.identity import Principal, preview
from waypost.model.logs import logger
from waypost.model.records import PurgedRun, PurgeReport
from waypost.model.requests import handles
from waypost.store.base import PurgeCounts, PurgedRunRecord
from waypost.store.reach import warn_unless_away

from .stored import answer_of, moment

log = logger("waypost.retention")

_FIELDS = ("runs", "events", "tasks", "timers", "approvals", "outbox", "correlations")
RETENTION_BATCH = 500  # runs purged in one transaction by the scheduled job
TENANT_PAGE = 1000
DAY = 86_400.0
RETENTION_BY = "waypost:retention"  # `purged_by` of what the scheduled job purges


class Retention:
    """Purges finished runs and reads the summaries they leave."""

    def __init__(self, machinery: Machinery):
        self.machinery = machinery

    @handles(ops.PurgeRuns)
    async def purge(self, req: ops.PurgeRuns, principal: Principal) -> PurgeReport:
        store = self.machinery.store
        clock = self.machinery.settings.clock
        cutoff = clock() - req.older_than_seconds
        tenant = principal.tenant
        budget = req.limit if req.limit is not None else ops.MAX_PURGE
        when = moment(cutoff)
        if req.dry_run:
            counted = await store.count_purgeable(tenant, cutoff, budget)
            return PurgeReport(tenant, when, True, counted.runs, counted.events)
        totals = dict.fromkeys(_FIELDS, 0)
        batches = 0
        while budget > 0:
            size = min(req.batch, budget)
            done = await store.purge_runs(
                tenant, cutoff, size, clock(), principal.subject, req.reason or ""
            )
            batches += 1
            _add(totals, done)
            budget -= done.runs
            if done.runs < size:
                break
        if totals["runs"]:
            log.info(
                "purged %d finished runs of tenant %s (%d events) in %d batches",
                totals["runs"],
                tenant,
                totals["events"],
                batches,
            )
        return PurgeReport(tenant, when, False, batches=batches, **totals)

    async def retain_forever(self) -> None:
        """Apply every tenant's `retention_days`, every `retention_every` seconds."""
        every = self.machinery.settings.retention_every
        if every is None:
            return
        while True:
            try:
                await self.retain()
            except StoreError as exc:
                store, why = self.machinery.store, "retention put off by a database error"
                warn_unless_away(log, store, "%s (will retry): %s", why, exc)
            await asyncio.sleep(every)

    async def retain(self) -> int:
        """One retention pass over every tenant with finished runs; how many runs it purged."""
        m = self.machinery
        clock = m.settings.clock
        purged = 0
        after = ""
        while True:
            tenants = await m.store.finished_run_tenants(after, TENANT_PAGE)
            for tenant in tenants:
                days = (await m.quotas.get(tenant)).retention_days
                if days is None:
                    continue
                cutoff = clock() - days * DAY
                reason = f"retention: finished more than {days} days ago"
                while True:
                    done = await m.store.purge_runs(
                        tenant, cutoff, RETENTION_BATCH, clock(), RETENTION_BY, reason
                    )
                    purged += done.runs
                    await asyncio.sleep(0)  # the engine's other work goes first
                    if done.runs < RETENTION_BATCH:
                        break
            if len(tenants) < TENANT_PAGE:
                break
            after = tenants[-1]
        if purged:
            log.info("retention purged %d finished runs", purged)
        return purged

    @handles(ops.GetPurged)
    async def get_purged(self, req: ops.GetPurged, principal: Principal) -> PurgedRun:
        record = await self.machinery.store.get_purged_run(principal.tenant, req.run_id)
        if record is None:
            where = f"in tenant {preview(principal.tenant)}"
            raise RunNotFound(f"no purged run {preview(req.run_id)} {where}")
        return purged_run(record)

    @handles(ops.ListPurged)
    async def list_purged(self, req: ops.ListPurged, principal: Principal) -> list[PurgedRun]:
        records = await self.machinery.store.list_purged_runs(principal.tenant, req.limit)
        return [purged_run(r) for r in records]


def _add(totals: dict[str, int], counts: PurgeCounts) -> None:
    for name in _FIELDS:
        totals[name] += getattr(counts, name)


def purged_run(r: PurgedRunRecord) -> PurgedRun:
    return answer_of(PurgedRun, r)
