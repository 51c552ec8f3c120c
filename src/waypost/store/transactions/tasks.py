"""Tasks and workers: claiming and leasing work.

A claim takes due tasks and bumps each one's fence, so a holder whose lease
ran out is refused when it reports. (Due timers are fired in timers.py.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from waypost.model.encryption import task_place
from waypost.model.quotas import Quotas

from ..commits import ClaimedTask, LeaseRenewal, LeaseState, TaskRef, WorkerRecord
from ..landing import landed_at
from ..tx import TASKS, Tx
from .queues import limited_queues, queue_room, took_from_queue
from .quotas import activity_room, json_object
from .records import sealed, task_from_row, worker_from_row

MAX_TENANTS_PER_CLAIM = 64
LAPSE_BACKOFF = 1.0
"""A workflow task whose lease lapsed n times waits n² seconds more before it is claimed..."""
LAPSE_BACKOFF_MOST = 60.0
"""...at most this many: a run that keeps killing engines is not taken up in a tight loop."""


def claim_tasks(
    tx: Tx,
    owner: str,
    workflow_queues: Sequence[str],
    activity_queues: Sequence[str],
    workflow_limit: int,
    activity_limit: int,
    lease: float,
    now: float,
    quotas: Quotas | None = None,
    after_tenant: str = "",
    lapsed: bool = True,
    asked: float | None = None,
) -> list[ClaimedTask]:
    if asked is not None:  # leases and deadlines count from when the claim lands
        now = landed_at(now, asked)
    claimed: list[ClaimedTask] = []
    params = {"owner": owner, "now": now, "lease_until": now + lease}
    if workflow_queues and workflow_limit > 0:
        queues = json.dumps(list(workflow_queues))
        if lapsed:
            # A crashed engine's runs first: their lease lapsed, they were due long ago.
            rows = tx.all(
                "claim_lapsed_workflow_tasks",
                {
                    **params,
                    "queues": queues,
                    "limit": workflow_limit,
                    "backoff": LAPSE_BACKOFF,
                    "backoff_most": LAPSE_BACKOFF_MOST,
                },
            )
            # Taken over: the lapse is found by the claim that takes the task up.
            claimed.extend(replace(task_from_row(r, tx.keys), taken_over=True) for r in rows)
        claimed.extend(
            _claim_fairly(
                tx,
                "workflow",
                {**params, "queues": queues},
                workflow_limit - len(claimed),
                after_tenant,
                None,
            )
        )
    if activity_queues and activity_limit > 0:
        claimed.extend(
            _claim_fairly(
                tx,
                "activity",
                {**params, "queues": json.dumps(list(activity_queues))},
                activity_limit,
                after_tenant,
                quotas,
            )
        )
    return claimed


def _claim_fairly(
    tx: Tx,
    kind: str,
    params: dict[str, Any],
    limit: int,
    after_tenant: str,
    quotas: Quotas | None,
) -> list[ClaimedTask]:
    """Up to `limit` ready tasks of `kind`, shared among the tenants that have some.

    Tenants are visited in name order from the one after `after_tenant`, wrapping
    round, at most `MAX_TENANTS_PER_CLAIM` of them; each takes an equal share of
    what is left (its own by priority, then oldest first), so a tenant with a long
    queue takes no more than a tenant with a short one. A tenant's activities are
    further bounded by its `max_concurrent_activities`.
    """
    if limit <= 0:
        return []
    found = _tenants_with_ready(tx, kind, after_tenant)
    if not found:
        return []
    tenants = list(found)
    room: dict[str, int] = {}
    if quotas is not None:
        for tenant in sorted(tenants):  # admission rows are locked in one order everywhere
            most = quotas.effective(found[tenant]).max_concurrent_activities
            if most is not None:
                room[tenant] = activity_room(tx, tenant, most, params["now"])
    # Limited named queues' rows are locked after the admission rows, all in one order
    # (tenant, name), so two claims never wait on each other in a cycle.
    queue_rooms: dict[tuple[str, str], tuple[int, int | None]] = {}
    if kind == "activity":
        for tenant, name in limited_queues(tx, tenants):
            queue_rooms[(tenant, name)] = queue_room(
                tx, tenant, name, params["now"], params["owner"]
            )
    claimed: list[ClaimedTask] = []
    for i, tenant in enumerate(tenants):
        left = limit - len(claimed)
        if left <= 0:
            break
        share = -(-left // (len(tenants) - i))  # ceil: what is left, shared by who is left
        share = min(share, room.get(tenant, share))
        if share <= 0:
            continue
        if kind == "activity":
            rooms = {n: r for (t, n), r in queue_rooms.items() if t == tenant}
            claimed.extend(_claim_activities_of_tenant(tx, params, tenant, share, rooms))
            continue
        rows = tx.all(f"claim_{kind}_tasks_of_tenant", {**params, "tenant": tenant, "limit": share})
        claimed.extend(task_from_row(r, tx.keys) for r in rows)
    return claimed


def _claim_activities_of_tenant(
    tx: Tx,
    params: dict[str, Any],
    tenant: str,
    limit: int,
    rooms: dict[str, tuple[int, int | None]],
) -> list[ClaimedTask]:
    """Up to `limit` of the tenant's ready activity attempts, within its queues' limits.

    `rooms`: what each of the tenant's limited queues lets start now (its row locked),
    and at most how many per concurrency key.
    Those queues go first, each taking at most its room; then every other queue, by
    priority. (Priorities order the attempts within each of these claims, not across a
    limited queue and the rest.)
    """
    query = "claim_activity_tasks_of_tenant"
    base = {**params, "tenant": tenant, "named_queue": None, "named_out": "[]"}
    claimed: list[ClaimedTask] = []
    for name, (room, per_key) in sorted(rooms.items()):
        take = min(limit - len(claimed), room)
        if take <= 0:
            continue
        if per_key is not None:
            keyed = {**base, "named_queue": name, "limit": take, "per_key": per_key}
            rows = tx.all("claim_activity_tasks_by_key", keyed)
        else:
            rows = tx.all(query, {**base, "named_queue": name, "limit": take})
        took_from_queue(tx, tenant, name, len(rows), params["now"])
        claimed.extend(task_from_row(r, tx.keys) for r in rows)
    left = limit - len(claimed)
    if left > 0:
        rows = tx.all(query, {**base, "named_out": json.dumps(sorted(rooms)), "limit": left})
        claimed.extend(task_from_row(r, tx.keys) for r in rows)
    return claimed


def _tenants_with_ready(tx: Tx, kind: str, after_tenant: str) -> dict[str, dict[str, Any]]:
    """Tenants with ready tasks of `kind` and their quota overrides, in the order to serve
    them: after `after_tenant`, then from the first (one scan while they are few)."""
    cap = MAX_TENANTS_PER_CLAIM
    rows = tx.all("fair_tenants", {"kind": kind, "after": "", "tenants": cap})
    if len(rows) == cap and after_tenant:
        # More than one claim takes: go on from the one served last, then wrap round.
        later = tx.all("fair_tenants", {"kind": kind, "after": after_tenant, "tenants": cap})
        rows = [*later, *(r for r in rows if r["tenant"] <= after_tenant)][:cap]
    else:
        rows = [
            *(r for r in rows if r["tenant"] > after_tenant),
            *(r for r in rows if r["tenant"] <= after_tenant),
        ]
    return {r["tenant"]: json_object(r["quotas"]) for r in rows}


_RENEW_CHUNK = 500  # leases renewed by one statement


def renew_leases(
    tx: Tx,
    owner: str,
    renewals: Sequence[LeaseRenewal],
    lease: float,
    now: float,
    asked: float | None = None,
) -> list[LeaseState]:
    """Renew leases: those with nothing but the lease to renew in one statement per
    chunk (one round trip for all of an engine's runs), those with a heartbeat one by one."""
    if asked is not None:
        now = landed_at(now, asked)
    states = []
    plain = [r.task for r in renewals if r.heartbeat_at is None and r.heartbeat_details is None]
    for i in range(0, len(plain), _RENEW_CHUNK):
        chunk = plain[i : i + _RENEW_CHUNK]
        refs = [[t.tenant, t.run_id, t.kind, t.step, t.fence] for t in chunk]
        rows = tx.all(
            "renew_plain_leases",
            {"refs": json.dumps(refs), "owner": owner, "lease_until": now + lease},
        )
        held = {
            (r["tenant"], r["run_id"], r["kind"], r["step"], r["fence"]): bool(
                r["cancel_requested"]
            )
            for r in rows
        }
        for t in chunk:
            cancel = held.get((t.tenant, t.run_id, t.kind, t.step, t.fence))
            states.append(LeaseState(t, held=cancel is not None, cancel_requested=bool(cancel)))
    for r in renewals:
        if r.heartbeat_at is None and r.heartbeat_details is None:
            continue
        t = r.task
        row = tx.one(
            "renew_lease",
            {
                **_held_by(t, owner),
                "lease_until": now + lease,
                "heartbeat_at": r.heartbeat_at,
                "heartbeat_details": sealed(
                    tx.keys,
                    r.heartbeat_details,
                    task_place(t.tenant, t.run_id, t.step, "heartbeat_details"),
                ),
            },
        )
        if row is None:
            states.append(LeaseState(t, held=False, cancel_requested=False))
        else:
            states.append(LeaseState(t, held=True, cancel_requested=bool(row["cancel_requested"])))
    return states


def release_tasks(tx: Tx, owner: str, tasks: Sequence[TaskRef], now: float) -> None:
    if tasks:
        tx.notify(TASKS)
    for t in tasks:
        tx.run("release_task", {**_held_by(t, owner), "now": now})


def retime_activity(
    tx: Tx, owner: str, task: TaskRef, lease: float, now: float, asked: float | None = None
) -> float | None:
    """The attempt `owner` holds as `task`, leased by a write that landed late, timed again
    from now: its lease, heartbeat deadline and start-to-close deadline. Its new deadline,
    or None when `owner` no longer holds it."""
    if asked is not None:
        now = landed_at(now, asked)
    row = tx.one("retime_activity_task", {**_held_by(task, owner), "lease": lease, "now": now})
    return None if row is None else float(row["deadline"])


def expired_activities(tx: Tx, now: float, limit: int) -> list[ClaimedTask]:
    return [
        task_from_row(r, tx.keys)
        for r in tx.all("expired_activities", {"now": now, "limit": limit})
    ]


def beat_worker(tx: Tx, worker: WorkerRecord) -> None:
    tx.run(
        "beat_worker",
        {
            "worker_id": worker.worker_id,
            "host": worker.host,
            "pid": worker.pid,
            "queues": json.dumps(worker.queues),
            "started_at": worker.started_at,
            "heartbeat_at": worker.heartbeat_at,
        },
    )


def remove_worker(tx: Tx, worker_id: str) -> None:
    tx.run("remove_worker", {"worker_id": worker_id})


def release_owner(tx: Tx, worker_id: str, now: float) -> int:
    """A dead engine's leases lapse now, and its worker row goes; how many were released."""
    released = tx.run("release_owner_tasks", {"owner": worker_id, "now": now})
    tx.run("remove_worker", {"worker_id": worker_id})
    if released:
        tx.notify(TASKS)
    return released


def live_workers(tx: Tx, since: float) -> list[WorkerRecord]:
    return [worker_from_row(r) for r in tx.all("live_workers", {"since": since})]


def _held_by(t: TaskRef, owner: str) -> dict[str, Any]:
    """The parameters that name a task as `owner` holds it (under its fence)."""
    return {
        "tenant": t.tenant,
        "run_id": t.run_id,
        "kind": t.kind,
        "step": t.step,
        "fence": t.fence,
        "owner": owner,
    }
