"""Retention of `AsyncEngine`: purge finished runs, read the summaries they left (a
mixin of thin methods over the one door)."""

from __future__ import annotations

from datetime import timedelta

from waypost.model import operations as ops
from waypost.model.records import PurgedRun, PurgeReport

from .door import LocalDoor


class RetentionCalls:
    """Purging runs and their summaries, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def purge_runs(
        self,
        older_than: timedelta | float,
        *,
        dry_run: bool = False,
        limit: int | None = None,
        reason: str | None = None,
        tenant: str = "default",
    ) -> PurgeReport:
        """Purge `tenant`'s finished runs that finished more than `older_than` (a timedelta,
        or seconds) ago, oldest first, at most `limit` (None: all), 500 per transaction.

        Each leaves a summary (`purged_run`, `purged_runs`: final status, times, its
        chain's length and last hash, who purged it and `reason`); its history, payloads,
        tasks, timers, approvals, credentials and outbox messages are deleted, and its id
        then answers `RunNotFound`. `dry_run` counts what would go and writes nothing.
        """
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
        request = ops.PurgeRuns(
            older_than_seconds=seconds, dry_run=dry_run, limit=limit, reason=reason
        )
        return await self._local(request, tenant)

    async def purged_run(self, run_id: str, *, tenant: str = "default") -> PurgedRun:
        """The summary the purged run `run_id` left; `RunNotFound` if it has none."""
        return await self._local(ops.GetPurged(run_id=run_id), tenant)

    async def purged_runs(self, *, limit: int = 100, tenant: str = "default") -> list[PurgedRun]:
        """`tenant`'s purged runs, most recently purged first."""
        return await self._local(ops.ListPurged(limit=limit), tenant)
