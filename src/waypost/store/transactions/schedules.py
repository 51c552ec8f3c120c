"""Schedules' rows (see `store/schedules.py`)."""

from __future__ import annotations

from waypost.model.encryption import Keys, Place, open_text
from waypost.model.quotas import Quotas

from ..schedules import ScheduleAdvance, ScheduleCount, ScheduleRecord, SchedulesResealed
from ..tx import Row, Tx
from .quotas import insert_admitted
from .records import from_row, reseal_column, sealed


def schedule_place(tenant: str, schedule_id: str) -> Place:
    """Where a schedule's input lives (the associated data of its ciphertext)."""
    return (tenant, schedule_id, "schedule", "input")


def create_schedule(tx: Tx, schedule: ScheduleRecord, quotas: Quotas | None = None) -> bool:
    if tx.one("get_schedule", {"tenant": schedule.tenant, "schedule_id": schedule.schedule_id}):
        return False
    params = dict(schedule.__dict__)
    params["paused"] = int(schedule.paused)
    params["input"] = sealed(
        tx.keys, schedule.input, schedule_place(schedule.tenant, schedule.schedule_id)
    )
    # Two callers making the same schedule at once: the second inserts nothing.
    return insert_admitted(
        tx, "insert_schedule", params, quotas, "max_schedules", schedule.created_at
    )


def get_schedule(tx: Tx, tenant: str, schedule_id: str) -> ScheduleRecord | None:
    row = tx.one("get_schedule", {"tenant": tenant, "schedule_id": schedule_id})
    return schedule_from_row(row, tx.keys) if row is not None else None


def list_schedules(tx: Tx, tenant: str) -> list[ScheduleRecord]:
    return [schedule_from_row(row, tx.keys) for row in tx.all("list_schedules", {"tenant": tenant})]


def delete_schedule(tx: Tx, tenant: str, schedule_id: str) -> bool:
    return tx.run("delete_schedule", {"tenant": tenant, "schedule_id": schedule_id}) == 1


def set_schedule_paused(
    tx: Tx,
    tenant: str,
    schedule_id: str,
    paused: bool,
    next_fire_at: float | None,
    by: str,
    now: float,
) -> bool:
    key = {"tenant": tenant, "schedule_id": schedule_id, "by": by, "now": now}
    if paused:
        return tx.run("pause_schedule", key) == 1
    return tx.run("resume_schedule", {**key, "next_fire_at": next_fire_at}) == 1


def due_schedules(tx: Tx, now: float, limit: int) -> list[ScheduleRecord]:
    rows = tx.all("due_schedules", {"now": now, "limit": limit})
    return [schedule_from_row(row, tx.keys) for row in rows]


def advance_schedule(tx: Tx, advance: ScheduleAdvance) -> bool:
    params = dict(advance.__dict__)
    if advance.seen is None:
        return tx.run("advance_schedule_unset", params) == 1
    return tx.run("advance_schedule", params) == 1


def schedule_counts(tx: Tx) -> list[ScheduleCount]:
    return [
        ScheduleCount(row["tenant"], row["state"], int(row["schedules"]))
        for row in tx.all("schedule_counts", {})
    ]


def reencrypt_schedules(tx: Tx, tenant: str, dry_run: bool) -> SchedulesResealed:
    """Each schedule's input opened with whichever key sealed it and sealed again under
    the current one; the write is conditioned on the text read (a schedule re-created
    meanwhile was sealed under the current key already)."""
    found, resealed = reseal_column(
        tx,
        tenant,
        dry_run,
        "schedule_inputs",
        ("schedule_id", "input"),
        "reseal_schedule_input",
        schedule_place,
    )
    return SchedulesResealed(found, resealed)


def schedule_from_row(row: Row, keys: Keys | None) -> ScheduleRecord:
    place = schedule_place(row["tenant"], row["schedule_id"])
    return from_row(
        ScheduleRecord,
        row,
        "tenant schedule_id workflow version cron tz every overlap catchup catchup_window"
        " next_fire_at last_fire_at last_run_id buffered_fire_at created_at created_by"
        " changed_at changed_by",
        input=open_text(keys, row["input"], place),
        paused=bool(row["paused"]),
    )
