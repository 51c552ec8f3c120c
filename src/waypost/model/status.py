from __future__ import annotations

from enum import StrEnum
from typing import Any


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


def why_suspended(error: dict[str, Any] | None) -> str:
    """Why a suspended run waits (its `error`), for a caller that waited on it in vain."""
    if not error:
        return ""
    site = f" at {error['site']}" if error.get("site") else ""
    what = f"{error.get('type', 'an error')}{site}: {error.get('message', '')}"
    return f" ({what[:300]}; fix the cause, then resume it or terminate it)"
