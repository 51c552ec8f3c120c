"""Named queues in the store's vocabulary (the verbs are `Store`'s, in `base.py`). A
queue's limits are a row per (tenant, name); the claim enforces them
(`transactions/queues.py`)."""

from __future__ import annotations

from dataclasses import dataclass


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
