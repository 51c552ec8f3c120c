"""Schedules' rows (see `store/schedules.py`)."""

from __future__ import annotations

from waypost.errors import ConfigurationError
from waypost.model.encryption import Keys, Place, open_text

from ..schedules import ScheduleAdvance, ScheduleCount, ScheduleRecord, SchedulesResealed
from ..tx import Row, Tx
from .records import sealed


def schedule_place(tenant: str, schedule_id: str) -> Place:
    """Where a schedule's input lives (the associated data of its ciphertext)."""
    return (tenant, schedule_id, "schedule", "input")


def create_schedule(tx: Tx, schedule: ScheduleRecord) -> bool:
    if tx.one("get_schedule", {"tenant": schedule.tenant, "schedule_id": schedule.schedule_id}):
        return False
    params = dict(schedule.__dict__)
    params["paused"] = int(schedule.paused)
    params["input"] = sealed(
        tx.keys, schedule.input, schedule_place(schedule.tenant, schedule.schedule_id)
    )
    # Two callers making the same schedule at once: the second inserts nothing.
    return tx.run("insert_schedule", params) == 1


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
    keys = tx.keys
    if keys is None:
        raise ConfigurationError("re-encrypting needs encryption keys (WAYPOST_ENCRYPTION_KEYS)")
    found = resealed = 0
    for row in tx.all("schedule_inputs", {"tenant": tenant}):
        found += 1
        # a missing key or a forged ciphertext stops the transaction, as for runs
        new = keys.reseal(row["input"], schedule_place(tenant, row["schedule_id"]))
        if new is None:
            continue
        resealed += 1
        if not dry_run:
            params = {"tenant": tenant, "schedule_id": row["schedule_id"]}
            tx.run("reseal_schedule_input", {**params, "old": row["input"], "new": new})
    return SchedulesResealed(found, resealed)


def schedule_from_row(row: Row, keys: Keys | None) -> ScheduleRecord:
    place = schedule_place(row["tenant"], row["schedule_id"])
    return ScheduleRecord(
        tenant=row["tenant"],
        schedule_id=row["schedule_id"],
        workflow=row["workflow"],
        version=row["version"],
        cron=row["cron"],
        tz=row["tz"],
        every=row["every"],
        input=open_text(keys, row["input"], place),
        overlap=row["overlap"],
        catchup=row["catchup"],
        catchup_window=row["catchup_window"],
        paused=bool(row["paused"]),
        next_fire_at=row["next_fire_at"],
        last_fire_at=row["last_fire_at"],
        last_run_id=row["last_run_id"],
        buffered_fire_at=row["buffered_fire_at"],
        created_at=row["created_at"],
        created_by=row["created_by"],
        changed_at=row["changed_at"],
        changed_by=row["changed_by"],
    )
