"""Named queues in the transactions that need them: limits at claim time, and listings.

A claim from a queue with a limit first locks the queue's row (on PostgreSQL a
`FOR UPDATE` that orders the claims of every engine: each counts the leases after
the one before it committed; SQLite has one writer at a time). It then takes at
most what the limit leaves: `concurrency` less the attempts leased now, and no
more than the whole tokens in the queue's bucket, from which it takes one per
attempt claimed. A lapsed lease still counts until the scheduler finds it and
makes the attempt ready again, so a killed engine's slots come back exactly when
its work can be taken over.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from waypost.model.queues import WORKER_TTL, QueueInfo, refill, serves_entry
from waypost.model.quotas import Quotas

from ..tx import Row, Tx
from .quotas import admit_one_more, lock_tenant_admission

_NO_LIMIT = 1 << 30  # more than any claim takes


def limited_queues(tx: Tx, tenants: Iterable[str]) -> list[tuple[str, str]]:
    """The (tenant, name) of these tenants' queues with a limit, in the order their rows
    are locked everywhere: by tenant, then name."""
    wanted = sorted(set(tenants))
    if not wanted:
        return []
    rows = tx.all("limited_queues", {"tenants": json.dumps(wanted)})
    return sorted((r["tenant"], r["name"]) for r in rows)


def limits_read_with(row: Row) -> list[str]:
    """The tenant's queues with a limit, as `workflow_task_and_limits` read them with the
    run's workflow task (the names of `limited_queues`, one round trip fewer)."""
    names = json.loads(row["limited_queues"])
    return [str(name) for name in names]


def queue_room(
    tx: Tx, tenant: str, name: str, now: float, owner: str | None = None
) -> tuple[int, int | None]:
    """How many attempts the queue's limits let start now (its row locked), and at most
    how many at once per concurrency key (None: no such limit). With `owner`, the engine
    claiming: at most what its per-worker limit leaves."""
    row = tx.one("lock_queue", {"tenant": tenant, "name": name})
    if row is None:  # removed since it was listed: no limit this time
        return _NO_LIMIT, None
    room = _NO_LIMIT
    if row["concurrency"] is not None:
        most = int(row["concurrency"])
        leased = tx.one("count_leased_in_queue", {"tenant": tenant, "name": name, "limit": most})
        room = max(0, most - (int(leased["n"]) if leased is not None else 0))
    if owner is not None:
        room = min(room, _own_room(tx, row, tenant, name, now, owner))
    rate = rate_of(row)
    if rate is not None:
        tokens = refill(float(row["tokens"]), float(row["refilled_at"]), rate, now)
        whole = math.floor(tokens + 1e-9)
        room = min(room, whole)
    per_key = row["key_concurrency"]
    return room, (int(per_key) if per_key is not None else None)


def _own_room(tx: Tx, row: Row, tenant: str, name: str, now: float, owner: str) -> int:
    """What the claiming engine may still take of the queue: its `worker_concurrency`, and
    its fair share of `concurrency` among the live workers that serve the queue.

    The share keeps one engine from holding every slot: on SQLite nothing wakes the
    other engines when a slot frees, so the engine whose attempt ended would claim it
    again at once, every time (measured in bench/queue_fairness.py)."""
    most = _NO_LIMIT
    if row["worker_concurrency"] is not None:
        most = int(row["worker_concurrency"])
    if row["concurrency"] is not None:
        serving = tx.one(
            "count_workers_serving",
            {"since": now - WORKER_TTL, "entry": serves_entry(name)},
        )
        workers = max(1, int(serving["n"]) if serving is not None else 1)
        most = min(most, -(-int(row["concurrency"]) // workers))  # ceil: no slot idles
    if most >= _NO_LIMIT:
        return _NO_LIMIT
    held = tx.one(
        "count_leased_in_queue_by_owner",
        {"tenant": tenant, "name": name, "owner": owner, "limit": most},
    )
    return max(0, most - (int(held["n"]) if held is not None else 0))


def took_from_queue(tx: Tx, tenant: str, name: str, taken: int, now: float) -> None:
    """Take `taken` tokens from the queue's bucket (its row locked by `queue_room`)."""
    row = tx.one("queue_row", {"tenant": tenant, "name": name})
    rate = rate_of(row) if row is not None else None
    if row is None or rate is None or taken <= 0:
        return
    tokens = refill(float(row["tokens"]), float(row["refilled_at"]), rate, now)
    tx.run(
        "take_queue_tokens",
        {
            "tenant": tenant,
            "name": name,
            "tokens": max(0.0, tokens - taken),
            "refilled_at": max(float(row["refilled_at"]), now),
        },
    )


def configure_queue(
    tx: Tx,
    tenant: str,
    name: str,
    changes: Mapping[str, Any],
    now: float,
    by: str,
    quotas: Quotas | None = None,
) -> QueueInfo:
    """Set checked limits of the queue (others kept); a new or changed rate starts with a
    full bucket. The queue as it is now. A new queue is counted under `max_queues`."""
    if quotas is not None:  # claims lock the tenant's admission row before its queues' rows
        lock_tenant_admission(tx, tenant, quotas, now)
    row = tx.one("lock_queue", {"tenant": tenant, "name": name})
    concurrency = row["concurrency"] if row is not None else None
    per_key = row["key_concurrency"] if row is not None else None
    per_worker = row["worker_concurrency"] if row is not None else None
    rate = rate_of(row) if row is not None else None
    tokens = float(row["tokens"]) if row is not None else 0.0
    refilled_at = float(row["refilled_at"]) if row is not None else now
    if "concurrency" in changes:
        concurrency = changes["concurrency"]
    if "key_concurrency" in changes:
        per_key = changes["key_concurrency"]
    if "worker_concurrency" in changes:
        per_worker = changes["worker_concurrency"]
    if "rate" in changes and changes["rate"] != rate:
        rate = changes["rate"]
        tokens, refilled_at = (float(rate[0]) if rate is not None else 0.0), now
    tx.run(
        "upsert_queue",
        {
            "tenant": tenant,
            "name": name,
            "concurrency": concurrency,
            "key_concurrency": per_key,
            "worker_concurrency": per_worker,
            "rate_count": rate[0] if rate is not None else None,
            "rate_period": rate[1] if rate is not None else None,
            "tokens": tokens,
            "refilled_at": refilled_at,
            "now": now,
            "by": by,
        },
    )
    if row is None:
        admit_one_more(tx, tenant, quotas, "max_queues", now)
    return list_queues(tx, tenant, now, name)[0]


def list_queues(tx: Tx, tenant: str, now: float, only: str | None = None) -> list[QueueInfo]:
    """The tenant's queues, configured or holding tasks, by name (or just `only`)."""
    usage = {r["name"]: r for r in tx.all("queue_usage", {"tenant": tenant, "now": now})}
    runs = {r["name"]: r for r in tx.all("workflow_queue_usage", {"tenant": tenant})}
    rows = {r["name"]: r for r in tx.all("queue_rows", {"tenant": tenant})}
    names = sorted(set(usage) | set(rows) | set(runs))
    if only is not None:
        names = [only] if only in names else []
    found = []
    for n in names:
        info = _info(n, rows.get(n), usage.get(n), now)
        held = runs.get(n)
        if held is not None:
            waited = held["oldest_ready"]
            info = replace(
                info,
                runs_enqueued=int(held["depth"] or 0),
                runs_admitted=int(held["running"] or 0),
                oldest_age=max(info.oldest_age or 0.0, now - float(waited))
                if waited is not None
                else info.oldest_age,
            )
        found.append(info)
    return found


def rate_of(row: Row) -> tuple[int, float] | None:
    if row["rate_count"] is None or row["rate_period"] is None:
        return None
    return int(row["rate_count"]), float(row["rate_period"])


def _info(name: str, row: Row | None, usage: Row | None, now: float) -> QueueInfo:
    extra: dict[str, Any] = {}
    if row is not None:
        extra = {
            "configured": True,
            "updated_at": datetime.fromtimestamp(float(row["updated_at"]), UTC),
            "updated_by": row["updated_by"],
        }
    oldest = usage["oldest_ready"] if usage is not None else None
    return QueueInfo(
        name=name,
        concurrency=int(row["concurrency"])
        if row is not None and row["concurrency"] is not None
        else None,
        rate=rate_of(row) if row is not None else None,
        key_concurrency=int(row["key_concurrency"])
        if row is not None and row["key_concurrency"] is not None
        else None,
        worker_concurrency=int(row["worker_concurrency"])
        if row is not None and row["worker_concurrency"] is not None
        else None,
        depth=int(usage["depth"] or 0) if usage is not None else 0,
        running=int(usage["running"] or 0) if usage is not None else 0,
        oldest_age=max(0.0, now - float(oldest)) if oldest is not None else None,
        **extra,
    )
