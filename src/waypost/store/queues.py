"""The store's verbs for named queues, declared apart from `base.py` for its size (`Store`
includes them). A queue's limits are a row per (tenant, name); the claim enforces them
(`transactions/queues.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from waypost.model.queues import QueueInfo
from waypost.model.quotas import Quotas


@dataclass(frozen=True)
class QueueLoad:
    """For metrics: a tenant's queue, of one kind of task, with `depth` tasks due and not
    claimed (the oldest due at `oldest_visible_at`, None if none) and `running` leased.
    `named` tells a named queue of activities from an activity's or workflow's own."""

    tenant: str
    queue: str
    kind: str
    named: bool
    depth: int
    running: int
    oldest_visible_at: float | None


class QueueStore(Protocol):
    async def configure_queue(
        self,
        tenant: str,
        name: str,
        changes: Mapping[str, Any],
        now: float,
        by: str,
        quotas: Quotas | None = None,
    ) -> QueueInfo:
        """Set checked limits of the tenant's queue `name` (`concurrency`, `rate`; None: no
        such limit; a limit not in `changes` stays as it was); the queue as it is now. Under
        `quotas`, a new queue over `max_queues` is `QuotaExceeded`."""
        ...

    async def list_queues(
        self, tenant: str, now: float, only: str | None = None
    ) -> list[QueueInfo]:
        """The tenant's queues (configured, or holding attempts), by name; or just `only`."""
        ...

    async def admit_enqueued(self, now: float) -> int:
        """Admit the enqueued runs that their workflow queues' limits allow now (a refilled
        rate bucket, a raised limit, a slot freed); how many were admitted."""
        ...

    async def queue_loads(self, now: float) -> list[QueueLoad]:
        """For metrics, across tenants: the tasks each queue holds running (leased), and
        the named queues' depth, running count and oldest due task."""
        ...
