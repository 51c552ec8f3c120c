"""Schedules in the store's vocabulary (decision 0017); the verbs are `Store`'s, in
`base.py`."""

from __future__ import annotations

from dataclasses import dataclass


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
