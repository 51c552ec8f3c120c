"""What the database holds right now, across tenants, for metrics read at scrape time.

Two grouped reads, each one statement: how many runs each (tenant, workflow,
status) has, and for each tenant's queue how many tasks are due and waiting to
be claimed and since when the oldest of them waits. They answer operators, never
a tenant's caller: counts and names, no run's data.
"""

from __future__ import annotations

from ..base import QueueGauge, RunCount
from ..tx import Tx


def run_counts(tx: Tx) -> list[RunCount]:
    """How many runs each tenant has of each workflow in each status."""
    return [
        RunCount(r["tenant"], r["workflow"], r["status"], int(r["runs"]))
        for r in tx.all("run_counts", {})
    ]


def queue_gauges(tx: Tx, now: float) -> list[QueueGauge]:
    """Per tenant, queue and kind of task: the tasks due by `now` that nobody holds, and
    when the oldest of them became due."""
    return [
        QueueGauge(
            r["tenant"], r["queue"], r["kind"], int(r["depth"]), float(r["oldest_visible_at"])
        )
        for r in tx.all("queue_gauges", {"now": now})
    ]
