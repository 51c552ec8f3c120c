"""The store verbs of schedules (decision 0017), beside the `Store` Protocol that
includes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ScheduleRecord:
    """A schedule's row. `input` is the encoded input (JSON text); times are unix seconds."""

    tenant: str
    schedule_id: str
    workflow: str
    version: str | None
    cron: str | None
    tz: str
    every: float | None
    input: str
    overlap: str
    catchup: str
    catchup_window: float
    paused: bool
    next_fire_at: float | None
    last_fire_at: float | None
    last_run_id: str | None
    buffered_fire_at: float | None
    created_at: float
    created_by: str
    # Who paused or resumed it last, and when (None: nobody since it was made).
    changed_at: float | None = None
    changed_by: str | None = None


@dataclass(frozen=True)
class ScheduleAdvance:
    """What handling a schedule's due fires changes, if its `next_fire_at` is still `seen`."""

    tenant: str
    schedule_id: str
    seen: float | None
    next_fire_at: float | None
    last_fire_at: float | None
    last_run_id: str | None
    buffered_fire_at: float | None


@dataclass(frozen=True)
class ScheduleCount:
    """How many schedules a tenant has in a state: active, buffered (a fire waits for
    the previous run to end) or paused."""

    tenant: str
    state: str
    schedules: int


@dataclass(frozen=True)
class SchedulesResealed:
    """What re-encrypting a tenant's schedules found: inputs stored, and how many it
    (would) re-seal under the current key."""

    schedules: int
    resealed: int


class ScheduleStore(Protocol):
    async def create_schedule(self, schedule: ScheduleRecord) -> bool:
        """Insert a schedule; False if the tenant has one of that id."""
        ...

    async def get_schedule(self, tenant: str, schedule_id: str) -> ScheduleRecord | None: ...

    async def list_schedules(self, tenant: str) -> list[ScheduleRecord]: ...

    async def delete_schedule(self, tenant: str, schedule_id: str) -> bool: ...

    async def set_schedule_paused(
        self,
        tenant: str,
        schedule_id: str,
        paused: bool,
        next_fire_at: float | None,
        by: str,
        now: float,
    ) -> bool:
        """Pause or resume (then from `next_fire_at`), recording `by` and `now` as who
        changed it last; False if there is no such schedule."""
        ...

    async def due_schedules(self, now: float, limit: int) -> list[ScheduleRecord]:
        """Unpaused schedules, of every tenant, due at `now` (or holding a buffered fire)."""
        ...

    async def advance_schedule(self, advance: ScheduleAdvance) -> bool:
        """Apply `advance` if the schedule's `next_fire_at` is still `advance.seen`."""
        ...

    async def schedule_counts(self) -> list[ScheduleCount]:
        """How many schedules each tenant has in each state (for the metrics' gauges)."""
        ...

    async def reencrypt_schedules(self, tenant: str, dry_run: bool) -> SchedulesResealed:
        """Re-seal the inputs of the tenant's schedules under the current encryption key
        (plaintext ones are encrypted), in one transaction; `dry_run` writes nothing."""
        ...
