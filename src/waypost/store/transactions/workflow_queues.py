"""Workflow queues: a run started on one waits `enqueued` until the queue's limits admit it.

Admission is counted like a claim from a limited queue of activities (decision 0018):
the queue's row is locked first (PostgreSQL `FOR UPDATE`; SQLite has one writer), then
the admitted runs of the queue that have not finished are counted, and at most what the
limits leave is admitted, by priority, then oldest first. The count is the truth by
construction (a run holds a slot exactly while its status is admitted and not finished),
so no path can leak a slot: a run's end commit admits the next in the same transaction,
and the scheduler's pass admits what a refilled rate bucket or a raised limit allows.
An enqueued run's workflow task is `held` (no claim takes it, nothing wakes it) until
the admission makes it ready; a run admitted in its own start is leased to the engine
that started it, as any new run is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from waypost.model.events import RunAdmitted
from waypost.model.queues import refill

from ..commits import RunCommit
from ..tx import TASKS, Tx
from .queues import rate_of, took_from_queue
from .row_checks import state_mac

_NO_LIMIT = 1 << 30
_MOST_PER_ADMISSION = 1000  # a queue without a concurrency limit admits in batches of this
_QUEUES_PER_PASS = 256


def admit_runs(
    tx: Tx, tenant: str, name: str, now: float, commit_run: Callable[..., Any]
) -> list[str]:
    """Admit what the workflow queue's limits allow now; the run ids admitted."""
    row = tx.one("lock_queue", {"tenant": tenant, "name": name})
    room = _NO_LIMIT
    per_key: int | None = None
    if row is not None:
        if row["concurrency"] is not None:
            most = int(row["concurrency"])
            held = tx.one(
                "count_admitted_in_queue", {"tenant": tenant, "name": name, "limit": most}
            )
            room = max(0, most - (int(held["n"]) if held is not None else 0))
        rate = rate_of(row)
        if rate is not None:
            tokens = refill(float(row["tokens"]), float(row["refilled_at"]), rate, now)
            room = min(room, math.floor(tokens + 1e-9))
        per_key = int(row["key_concurrency"]) if row["key_concurrency"] is not None else None
    if room <= 0:
        return []
    params = {"tenant": tenant, "name": name, "limit": min(room, _MOST_PER_ADMISSION)}
    if per_key is not None:
        rows = tx.all("enqueued_runs_by_key", {**params, "per_key": per_key})
    else:
        rows = tx.all("enqueued_runs", params)
    admitted: list[str] = []
    for r in rows:
        key = {"tenant": tenant, "run_id": r["run_id"]}
        # A run cancelled meanwhile (PostgreSQL: its commit came first) is passed over, and
        # so is one whose row does not say, under its check, that it is enqueued.
        checks = {
            "enqueued_mac": state_mac(tx.chain, tenant, r["run_id"], "enqueued", None, None),
            "state_mac": state_mac(tx.chain, tenant, r["run_id"], "running", None, None),
            "legacy": int(tx.chain.accept_legacy),
        }
        if tx.run("admit_run", {**key, "now": now, **checks}) != 1:
            continue
        event = RunAdmitted(queue=name).at(now)
        commit_run(tx, RunCommit(tenant=tenant, run_id=r["run_id"], events=[event], now=now))
        tx.run("release_held_task", {**key, "now": now})
        admitted.append(r["run_id"])
    if admitted:
        took_from_queue(tx, tenant, name, len(admitted), now)
        tx.notify(TASKS)
    return admitted


def admit_enqueued_runs(tx: Tx, now: float, commit_run: Callable[..., Any]) -> int:
    """The scheduler's pass: admit what every workflow queue with enqueued runs allows now
    (a refilled rate bucket, a raised limit); how many runs were admitted."""
    queues = tx.all("queues_with_enqueued", {"limit": _QUEUES_PER_PASS})
    # Rows locked in (tenant, name) order, as every claim locks them.
    return sum(
        len(admit_runs(tx, q["tenant"], q["name"], now, commit_run))
        for q in sorted(queues, key=lambda q: (q["tenant"], q["name"]))
    )
