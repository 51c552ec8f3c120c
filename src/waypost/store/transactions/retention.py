"""Retention: finished runs purged after their tenant's retention, leaving a summary.

`purge_runs` takes a bounded batch of a tenant's runs that finished before a cutoff
(oldest first; PostgreSQL skips rows another purge holds), writes each one's summary
to `purged_runs` (workflow, version, final status, times, the chain's length and last
hash) and deletes everything else of it: events, tasks, timers, correlations,
approvals with their credentials, votes, refusals and outbox messages (whose ids
start with the approval's id), and the run's row. A finished run changes no more,
so nothing the engine does races with it; the batch bound keeps each transaction short.
"""

from __future__ import annotations

from ..rows import PurgeCounts, PurgedRunRecord
from ..tx import Row, Tx
from .records import from_row


def purge_runs(
    tx: Tx, tenant: str, cutoff: float, limit: int, now: float, by: str, reason: str
) -> PurgeCounts:
    rows = tx.all("purgeable_runs", {"tenant": tenant, "cutoff": cutoff, "limit": limit})
    counts = dict.fromkeys(("runs", "events", "tasks", "timers", "approvals", "outbox"), 0)
    counts["correlations"] = 0
    for row in rows:
        key = {"tenant": tenant, "run_id": row["run_id"]}
        if tx.run("purge_run_row", key) == 0:
            continue  # purged meanwhile
        tx.run(
            "insert_purged_run",
            {
                **key,
                "workflow": row["workflow"],
                "version": row["version"],
                "status": row["status"],
                "created_at": row["created_at"],
                "finished_at": row["finished_at"],
                "last_seq": row["last_seq"],
                "last_hash": row["last_hash"],
                "now": now,
                "by": by,
                "reason": reason,
            },
        )
        counts["runs"] += 1
        counts["events"] += tx.run("purge_run_events", key)
        counts["tasks"] += tx.run("purge_run_tasks", key)
        counts["timers"] += tx.run("purge_run_timers", key)
        counts["correlations"] += tx.run("purge_run_correlations", key)
        for approval in tx.all("run_approval_ids", key):
            approval_id = approval["approval_id"]
            akey = {"tenant": tenant, "approval_id": approval_id}
            tx.run("purge_approval_credentials", akey)
            tx.run("purge_approval_votes", akey)
            tx.run("purge_approval_refusals", akey)
            prefix = f"{approval_id}:"
            counts["outbox"] += tx.run(
                "purge_approval_outbox",
                {"tenant": tenant, "prefix": prefix, "prefix_len": len(prefix)},
            )
            counts["approvals"] += tx.run("purge_approval", akey)
    return PurgeCounts(**counts)


def count_purgeable(tx: Tx, tenant: str, cutoff: float, limit: int) -> PurgeCounts:
    row = tx.one("count_purgeable", {"tenant": tenant, "cutoff": cutoff, "limit": limit})
    if row is None:
        return PurgeCounts()
    return PurgeCounts(runs=int(row["runs"]), events=int(row["events"]))


def finished_run_tenants(tx: Tx, after: str, limit: int) -> list[str]:
    return [r["tenant"] for r in tx.all("finished_run_tenants", {"after": after, "limit": limit})]


def get_purged_run(tx: Tx, tenant: str, run_id: str) -> PurgedRunRecord | None:
    row = tx.one("get_purged_run", {"tenant": tenant, "run_id": run_id})
    return _purged(row) if row is not None else None


def list_purged_runs(tx: Tx, tenant: str, limit: int) -> list[PurgedRunRecord]:
    return [_purged(r) for r in tx.all("list_purged_runs", {"tenant": tenant, "limit": limit})]


def _purged(row: Row) -> PurgedRunRecord:
    return from_row(
        PurgedRunRecord,
        row,
        "tenant run_id workflow version status last_hash purged_by reason",
        created_at=float(row["created_at"]),
        finished_at=float(row["finished_at"]) if row["finished_at"] is not None else None,
        last_seq=int(row["last_seq"]),
        purged_at=float(row["purged_at"]),
    )
