"""A tenant's quotas in the transactions that need them: admissions and counts.

Every admission of a tenant that compares a count with a quota (a start under
`max_concurrent_runs` or `starts_per_second`, a publish under `max_definitions`,
a lease under `max_concurrent_activities`, a timer under `max_pending_timers`)
first locks the tenant's `tenant_admission` row. On PostgreSQL that orders them
across processes: each counts after the one before it committed (READ COMMITTED
gives every statement a fresh snapshot), so two engines never both take the
last place. The row also holds the start-rate bucket, so the bucket is shared by
every engine. SQLite has one writer at a time; the lock is a plain read there.

Quotas come from the engine's defaults merged with the tenant's row, read in the
same transaction (`Quotas.effective`), so a change by `SetQuotas` applies to the
next admission whatever engine makes it. A refusal raises `QuotaExceeded`, which
rolls back everything the request wrote.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from waypost.errors import QuotaExceeded
from waypost.model.events import canonical_json
from waypost.model.identity import preview
from waypost.model.quotas import Quotas, apply_overrides

from ..rows import TenantRecord
from ..tx import Row, Tx
from .records import from_row

USAGE_CAP = 1_000_000  # counts of usage stop here ("at least")
RUNS_RETRY_AFTER = 1.0  # runs end at no known time: a start over the limit may try in a second


def json_object(text: str | None) -> dict[str, Any]:
    """A stored JSON object; anything else (damaged) is empty."""
    try:
        value = json.loads(text or "")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def tenant_overrides(tx: Tx, tenant: str) -> dict[str, Any]:
    row = tx.one("tenant_row", {"tenant": tenant})
    return json_object(row["quotas"]) if row is not None else {}


def lock_admission(tx: Tx, tenant: str, burst: int, now: float) -> Row:
    """The tenant's admission row, locked (made, with a full bucket, if it is new)."""
    key = {"tenant": tenant}
    row = tx.one("lock_admission", key)
    if row is None:
        tx.run("ensure_admission", {**key, "tokens": float(burst), "now": now})
        row = tx.one("lock_admission", key)
    assert row is not None  # made just now, or by a concurrent admission
    return row


def lock_tenant_admission(tx: Tx, tenant: str, defaults: Quotas, now: float) -> None:
    """The tenant's admission row locked, as the first lock of a transaction that will
    count under it after taking a lock that claims take after it (a queue's row)."""
    lock_admission(tx, tenant, defaults.effective(tenant_overrides(tx, tenant)).start_burst, now)


def count(tx: Tx, what: str, tenant: str, cap: int, now: float = 0.0) -> int:
    row = tx.one(f"count_{what}", {"tenant": tenant, "limit": cap, "now": now})
    return int(row["n"]) if row is not None else 0


# What each count quota counts (its `count_<what>` query) and how a refusal names it.
COUNTED = {
    "max_schedules": ("schedules", "schedules"),
    "max_webhook_sources": ("webhook_sources", "webhook sources"),
    "max_queues": ("queues", "configured queues"),
    "max_users": ("users", "console users (not disabled)"),
    "max_api_keys": ("api_keys", "API keys (neither revoked nor expired)"),
}


def insert_admitted(
    tx: Tx, query: str, params: dict[str, Any], defaults: Quotas | None, quota: str, now: float
) -> bool:
    """Insert the tenant's (`params["tenant"]`) row with `query` and count it against
    `quota` (`admit_one_more`); False if the insert made no row (one was there)."""
    if tx.run(query, params) != 1:
        return False
    admit_one_more(tx, params["tenant"], defaults, quota, now)
    return True


def admit_one_more(tx: Tx, tenant: str, defaults: Quotas | None, quota: str, now: float) -> None:
    """Refuse the row just inserted (`QuotaExceeded`, which rolls the insert back) if the
    tenant now has more than its `quota` allows of what the quota counts (`COUNTED`);
    nothing is counted without `defaults` (a caller that enforces no quotas).

    Called after the insert, so the count includes the new row; the admission row is
    locked first, so concurrent creations count one after another."""
    if defaults is None:
        return
    quotas = defaults.effective(tenant_overrides(tx, tenant))
    most = getattr(quotas, quota)
    if most is None:
        return
    what, noun = COUNTED[quota]
    lock_admission(tx, tenant, quotas.start_burst, now)
    if count(tx, what, tenant, most + 1, now) > most:
        raise QuotaExceeded(
            quota,
            f"tenant {preview(tenant)} has {most} {noun}, the most it may have ({quota}); "
            "nothing was created",
        )


def live_run_bytes(tx: Tx, tenant: str) -> int:
    """The bytes of history the tenant's runs not yet finished hold."""
    row = tx.one("live_run_bytes", {"tenant": tenant})
    return int(row["n"]) if row is not None else 0


def admit_run(tx: Tx, tenant: str, defaults: Quotas, now: float, run_bytes: int = 0) -> None:
    """Refuse the run just inserted if the tenant is over a start quota; else take a token.

    Called after the insert, so the count includes the new run (and the bytes of its live
    runs the new run's `run_bytes`).
    """
    quotas = defaults.effective(tenant_overrides(tx, tenant))
    if quotas.max_run_bytes is not None and run_bytes > quotas.max_run_bytes:
        raise QuotaExceeded(
            "max_run_bytes",
            f"the run's first events are {run_bytes} bytes of JSON; tenant {preview(tenant)} "
            f"allows a run's history at most {quotas.max_run_bytes} (max_run_bytes); nothing "
            "was started",
        )
    most, rate = quotas.max_concurrent_runs, quotas.starts_per_second
    live_most = quotas.max_live_run_bytes
    if most is None and rate is None and live_most is None:
        return
    row = lock_admission(tx, tenant, quotas.start_burst, now)
    if live_most is not None and live_run_bytes(tx, tenant) > live_most:
        raise QuotaExceeded(
            "max_live_run_bytes",
            f"tenant {preview(tenant)}'s runs not yet finished would hold more than "
            f"{live_most} bytes of history (max_live_run_bytes); nothing was started: try "
            "again when runs have ended",
            retry_after=RUNS_RETRY_AFTER,
        )
    if most is not None and count(tx, "active_runs", tenant, most + 1) > most:
        raise QuotaExceeded(
            "max_concurrent_runs",
            f"tenant {preview(tenant)} has {most} runs not yet finished, the most it may "
            "have at once; nothing was started: try again when one has ended",
            retry_after=RUNS_RETRY_AFTER,
        )
    if rate is None:
        return
    burst = float(quotas.start_burst)
    refilled_at = float(row["refilled_at"])
    tokens = min(burst, float(row["tokens"]) + max(0.0, now - refilled_at) * rate)
    if tokens < 1.0:
        wait = (1.0 - tokens) / rate
        raise QuotaExceeded(
            "starts_per_second",
            f"tenant {preview(tenant)} may start {rate:g} runs a second (bursts of "
            f"{quotas.start_burst}); nothing was started: try again in {math.ceil(wait)}s",
            retry_after=wait,
        )
    tx.run(
        "set_admission",
        {"tenant": tenant, "tokens": tokens - 1.0, "refilled_at": max(refilled_at, now)},
    )


def admit_definition(tx: Tx, tenant: str, defaults: Quotas, now: float) -> None:
    """Refuse a new definition version if the tenant has `max_definitions` already."""
    quotas = defaults.effective(tenant_overrides(tx, tenant))
    most = quotas.max_definitions
    if most is None:
        return
    lock_admission(tx, tenant, quotas.start_burst, now)
    if count(tx, "definitions", tenant, most + 1) >= most:
        raise QuotaExceeded(
            "max_definitions",
            f"tenant {preview(tenant)} has published {most} definition versions, the most it "
            "may keep; nothing was published",
        )


def activity_room(tx: Tx, tenant: str, most: int, now: float) -> int:
    """How many more activity attempts the tenant may have in flight (`most` at once)."""
    lock_admission(tx, tenant, 1, now)
    return max(0, most - count(tx, "leased_activities", tenant, most))


def timer_room(tx: Tx, tenant: str, most: int, now: float) -> int:
    """How many more timers the tenant may have pending (`most` at once)."""
    lock_admission(tx, tenant, 1, now)
    return max(0, most - count(tx, "pending_timers", tenant, most))


def tenant_state(tx: Tx, tenant: str) -> tuple[TenantRecord | None, dict[str, int]]:
    """The tenant's row (None if it was never created) and what it holds now (each count
    stops at `USAGE_CAP`)."""
    row = tx.one("tenant_row", {"tenant": tenant})
    usage = {
        "running_runs": count(tx, "active_runs", tenant, USAGE_CAP),
        "activities_in_flight": count(tx, "leased_activities", tenant, USAGE_CAP),
        "pending_timers": count(tx, "pending_timers", tenant, USAGE_CAP),
        "definitions": count(tx, "definitions", tenant, USAGE_CAP),
    }
    clock = tx.one("clock", {})  # the keys that still work, by the database's clock
    now = float(clock["now"]) if clock is not None else 0.0
    for what, _ in COUNTED.values():
        usage[what] = count(tx, what, tenant, USAGE_CAP, now)
    return (tenant_record(row) if row is not None else None), usage


def tenant_quotas(tx: Tx, tenant: str) -> dict[str, Any]:
    """The tenant's stored quota overrides (none for a tenant without a row)."""
    return tenant_overrides(tx, tenant)


def set_quotas(tx: Tx, tenant: str, changes: Mapping[str, Any]) -> TenantRecord | None:
    """Apply checked changes to the tenant's overrides; None if the tenant does not exist."""
    row = tx.one("lock_tenant_row", {"tenant": tenant})
    if row is None:
        return None
    quotas = apply_overrides(json_object(row["quotas"]), changes)
    tx.run("set_tenant_quotas", {"tenant": tenant, "quotas": canonical_json(quotas)})
    return tenant_record(row, quotas)


def tenant_record(row: Row, quotas: dict[str, Any] | None = None) -> TenantRecord:
    """The tenant of `row`, with `quotas` (its stored overrides if None)."""
    if quotas is None:
        quotas = json_object(row["quotas"])
    columns = "tenant created_at created_by disabled_at disabled_by"
    return from_row(TenantRecord, row, columns, quotas=quotas)
