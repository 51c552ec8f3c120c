from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is. The string values are what the store and the API show."""

    ENQUEUED = "enqueued"  # waiting in a workflow queue until its limits admit it
    RUNNING = "running"
    WAITING = "waiting"
    PAUSED = "paused"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TERMINATED = "terminated"

    @property
    def finished(self) -> bool:
        return self in FINISHED


FINISHED = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TERMINATED}
)
