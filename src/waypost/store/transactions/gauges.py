"""What the database holds right now, across tenants, for metrics read at scrape time.

Grouped reads, each one statement: how many runs each (tenant, workflow, status)
has; for each tenant's queue how many tasks are due and waiting to be claimed and
since when the oldest of them waits, and how many are leased; and the same of each
named queue of activities. They answer operators, never
a tenant's caller: counts and names, no run's data.
"""

from __future__ import annotations

from ..queues import QueueLoad
from ..rows import QueueGauge, RunCount
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


def queue_loads(tx: Tx, now: float) -> list[QueueLoad]:
    """Per tenant and queue: leased tasks of each task queue (an activity's, a workflow
    version's), and of each named queue its due and leased attempts."""
    loads = [
        QueueLoad(r["tenant"], r["queue"], r["kind"], False, 0, int(r["running"]), None)
        for r in tx.all("queue_running", {})
    ]
    loads.extend(
        QueueLoad(
            r["tenant"],
            r["queue"],
            "activity",
            True,
            int(r["depth"] or 0),
            int(r["running"] or 0),
            float(r["oldest_visible_at"]) if r["oldest_visible_at"] is not None else None,
        )
        for r in tx.all("named_queue_loads", {"now": now})
    )
    return loads
