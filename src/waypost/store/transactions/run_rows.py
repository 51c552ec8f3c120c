"""The rows a run's commit writes, as statement parameters: its snapshot, its events,
its new attempts' tasks (shared by `commit_run` and the one-statement step)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from waypost.model.encryption import event_place, run_place, task_place
from waypost.model.events import Event, canonical_json
from waypost.model.queues import activity_queue

from ..commits import RunCommit, Snapshot, WorkflowTaskOp
from ..effects import NewActivityTask
from ..landing import landed_at
from ..tx import Row, Tx
from .records import sealed
from .row_checks import state_mac


def on_time(c: RunCommit) -> RunCommit:
    """The commit made at the time it lands (`landed_at`). Its events keep the time they
    were decided at: the run's code saw that time, and a replay must see the same."""
    now = landed_at(c.now, c.asked)
    if now == c.now:
        return c
    return dataclasses.replace(c, now=now, asked=time.monotonic())


def history_bytes(events: Sequence[Event]) -> int:
    """What `events` add to a run's `history_bytes`: the bytes of their data's JSON."""
    return sum(len(ev.data_json.encode("utf-8", "surrogatepass")) for ev in events)


def snapshot_params(tx: Tx, c: RunCommit, snap: Snapshot) -> dict[str, Any]:
    """The columns of the run's snapshot as `snap` gives them (payloads sealed, and the
    check of its status, result and error)."""
    result = None if snap.result is None else canonical_json(snap.result)
    error = None if snap.error is None else canonical_json(snap.error)
    names = snap.signal_names
    return {
        "status": snap.status,
        "waiting_for": canonical_json(snap.waiting_for),
        "processed_seq": snap.processed_seq,
        "result": sealed(tx.keys, result, run_place(c.tenant, c.run_id, "result")),
        "error": sealed(tx.keys, error, run_place(c.tenant, c.run_id, "error")),
        "state_mac": state_mac(tx.chain, c.tenant, c.run_id, snap.status, result, error),
        "finished_at": c.now if snap.finished else None,
        "unread_signals": snap.unread_signals,
        "names_known": int(names is not None),
        "signal_names": canonical_json(sorted(names)) if names is not None else None,
    }


def activity_task_params(
    tx: Tx, c: RunCommit, na: NewActivityTask, leased: bool, texts: dict[int, str]
) -> dict[str, Any]:
    """The columns of the task of a new attempt: leased to its owner at once, or ready
    for a claim. `texts`: the JSON of the commit's events' data by id (a task's spec is
    often an event's data, encoded once)."""
    now = c.now
    deadline = now + na.timeout
    hb_deadline = now + na.heartbeat_timeout if na.heartbeat_timeout is not None else None
    return {
        "step": na.step,
        "queue": na.activity,
        "named_queue": activity_queue(na.spec),
        "state": "leased" if leased else "ready",
        "visible_at": min(now + na.lease, deadline, hb_deadline or deadline) if leased else now,
        "owner": na.owner if leased else None,
        "fence": 1 if leased else 0,
        "attempt": na.attempts + (1 if leased else 0),
        "started_at": now if leased else None,
        "deadline": deadline if leased else None,
        "heartbeat_deadline": hb_deadline if leased else None,
        "timeout": na.timeout,
        "heartbeat_timeout": na.heartbeat_timeout,
        "spec": sealed(
            tx.keys,
            texts.get(id(na.spec)) or canonical_json(na.spec),
            task_place(c.tenant, c.run_id, na.step, "spec"),
        ),
        "now": now,
    }


def event_rows(tx: Tx, tenant: str, run_id: str, events: list[Event]) -> list[dict[str, Any]]:
    """The rows of `events` (sealed by the chain) as the `events` table keeps them."""
    keys = tx.keys
    return [
        {
            "tenant": tenant,
            "run_id": run_id,
            "seq": ev.seq,
            "type": str(ev.type),
            # The chain hashed the plaintext; the store keeps it encrypted (decision 0009).
            "data": ev.data_json
            if keys is None
            else keys.seal(ev.data_json, event_place(tenant, run_id, ev.seq)),
            "ts": ev.ts,
            "hash": ev.hash,
        }
        for ev in events
    ]


@dataclass(frozen=True, slots=True)
class Woken:
    """What waking a run's workflow task (`WorkflowTaskOp.WAKE` or `CLAIM`) does to it."""

    columns: dict[str, Any] | None  # its new state, visible_at, owner, fence, lapses; None: kept
    fence: int | None = None  # the fence it was leased with, when the commit claimed it
    ready: bool = False  # it is ready for any engine's claim: tell them


def woken_task(wt: Row, c: RunCommit) -> Woken:
    """The run's workflow task `wt` (not held for a workflow queue) as `c` wakes it.

    A live lease is left alone: its holder's commit fails the sequence check and takes
    the new events in. Otherwise `c` takes the lease for its owner (CLAIM, in one of its
    `claim_queues`) or makes the task ready now; taking over a lease that lapsed counts a
    lapse, as the claim of a lapsed task does.
    """
    state, visible_at, fence = wt["state"], wt["visible_at"], wt["fence"]
    if state == "leased" and visible_at is not None and visible_at > c.now:
        return Woken(None)
    lapses = wt["lapses"] + (1 if state == "leased" else 0)
    if (
        c.workflow_op is WorkflowTaskOp.CLAIM
        and c.owner is not None
        and (c.claim_queues is None or wt["queue"] in c.claim_queues)
    ):
        leased = {
            "state": "leased",
            "visible_at": c.now + c.lease,
            "owner": c.owner,
            "fence": fence + 1,
            "lapses": lapses,
        }
        return Woken(leased, fence=int(fence + 1))
    if state == "ready" and (visible_at is None or visible_at <= c.now):
        return Woken(None, ready=True)
    ready = {
        "state": "ready",
        "visible_at": c.now,
        "owner": wt["owner"],
        "fence": fence,
        "lapses": lapses,
    }
    return Woken(ready, ready=True)
