"""Due timers fired: a batch at a time, each timer once.

A batch is marked fired by one statement, which only takes a timer still pending (a
cancelled timer is not, a finished run's are gone), and skips those another transaction
is firing; then each timer's run gets its `TimerFired` after whatever it has last, and
its workflow task is woken, or leased to the engine that fires it.

Where the dialect can (`Tx.batch_timer_fires`, PostgreSQL), the batch is two statements
whatever its size: `claim_due_timers` marks the timers fired and locks and reads their
runs' heads and workflow tasks; the events are numbered and hashed here, after those
heads (the chain's key never leaves the process); `fire_timers` writes every head, event
and task at once. Elsewhere (SQLite, whose statements cost no round trip) each timer's
event goes through `commit_run`, one savepoint per timer. Either way the firing commit
carries no limits: a due timer fires whatever its tenant's quotas, as it always has.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from waypost.model.events import TimerFired
from waypost.model.status import FINISHED

from ..commits import FiredTimer, RunCommit, WorkflowTaskOp
from ..tx import TASKS, Abort, Row, Tx
from .run_rows import event_rows, history_bytes, woken_task
from .runs import commit_run

_FINISHED = frozenset(s.value for s in FINISHED)


def fire_due_timers(
    tx: Tx, now: float, limit: int, owner: str | None, queues: Sequence[str], lease: float
) -> list[FiredTimer]:
    """Fire at most `limit` timers due at `now`, earliest first; the ones fired. Their
    runs' workflow tasks are leased to `owner` where they are of one of `queues` and
    nobody holds them (`FiredTimer.workflow_fence`), else made ready for a claim."""
    if tx.batch_timer_fires:
        return _fire_in_batch(tx, now, limit, owner, queues, lease)
    # One statement marks the batch fired (a timer another scheduler took is not in it);
    # then each run gets its TimerFired, earliest due first.
    taken = tx.all("take_due_timers", {"now": now, "limit": limit})
    fired = (
        _fire_alone(tx, _firing(due, now, owner, queues, lease), due) for due in _by_due(taken)
    )
    return [one for one in fired if one is not None]


def next_timer_at(tx: Tx) -> float | None:
    row = tx.one("next_timer_at", {})
    return None if row is None or row["next_fire_at"] is None else float(row["next_fire_at"])


def _by_due(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r["fire_at"], r["tenant"], r["run_id"], r["step"]))


def _firing(
    due: Row, now: float, owner: str | None, queues: Sequence[str], lease: float
) -> RunCommit:
    """The commit that appends the timer's `TimerFired` to its run."""
    return RunCommit(
        tenant=due["tenant"],
        run_id=due["run_id"],
        events=[TimerFired(step=due["step"], generation=due["generation"]).at(now)],
        now=now,
        workflow_op=WorkflowTaskOp.CLAIM if owner else WorkflowTaskOp.WAKE,
        owner=owner,
        lease=lease,
        claim_queues=frozenset(queues),
    )


def _fire_alone(tx: Tx, c: RunCommit, due: Row) -> FiredTimer | None:
    """The timer's event committed by `commit_run` in a savepoint of its own; None if its
    run is gone (the timer stays fired)."""
    try:
        with tx.savepoint():
            result = commit_run(tx, c)
    except Abort:
        return None
    return FiredTimer(
        tenant=c.tenant,
        run_id=c.run_id,
        step=due["step"],
        queue=result.workflow_queue,
        event=result.events[0],
        workflow_fence=result.workflow_fence,
        due=due["fire_at"],
    )


def _fire_in_batch(
    tx: Tx, now: float, limit: int, owner: str | None, queues: Sequence[str], lease: float
) -> list[FiredTimer]:
    """`fire_due_timers` in two statements (see the module's text), whatever the batch."""
    taken = _by_due(tx.all("claim_due_timers", {"now": now, "limit": limit}))
    heads: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    fired: list[FiredTimer] = []
    ready = False
    stray = [due for due in taken if due["last_seq"] is None or due["state"] is None]
    ordered = sorted(
        (due for due in taken if due["last_seq"] is not None and due["state"] is not None),
        key=lambda r: (r["tenant"], r["run_id"]),  # stable: each run's timers by due
    )
    for (tenant, run_id), group in groupby(ordered, key=lambda r: (r["tenant"], r["run_id"])):
        timers = list(group)
        head = timers[0]  # the run's head and workflow task, as claim_due_timers locked them
        if head["status"] in _FINISHED:
            continue  # its timers stay fired; a finished run takes no event
        commits = [_firing(due, now, owner, queues, lease) for due in timers]
        sealed = tx.chain.seal(head["last_seq"], head["last_hash"], [c.events[0] for c in commits])
        heads.append(
            {
                "tenant": tenant,
                "run_id": run_id,
                "expect_seq": head["last_seq"],
                "expect_hash": head["last_hash"],
                "last_seq": sealed[-1].seq,
                "last_hash": sealed[-1].hash,
                "added_bytes": history_bytes(sealed),
            }
        )
        events.extend(event_rows(tx, tenant, run_id, sealed))
        fence = None
        if head["state"] != "held":  # an enqueued run's task waits for admission
            woken = woken_task(head, commits[0])
            if woken.columns is not None:
                tasks.append(
                    {**_WORKFLOW_TASK, "tenant": tenant, "run_id": run_id, **woken.columns}
                )
            ready = ready or woken.ready
            fence = woken.fence
        fired.extend(
            FiredTimer(
                tenant=tenant,
                run_id=run_id,
                step=due["step"],
                queue=head["queue"],
                event=event,
                workflow_fence=fence if n == 0 else None,  # the run is processed once
                due=due["fire_at"],
            )
            for n, (due, event) in enumerate(zip(timers, sealed, strict=True))
        )
    if heads:
        _write_batch(tx, now, heads, events, tasks)
    if ready:
        tx.notify(TASKS)
    for due in stray:  # a run gone or without its workflow task: the long way
        one = _fire_alone(tx, _firing(due, now, owner, queues, lease), due)
        if one is not None:
            fired.append(one)
    return sorted(fired, key=lambda f: (f.due, f.tenant, f.run_id, f.step))


def _write_batch(
    tx: Tx,
    now: float,
    heads: list[dict[str, Any]],
    events: list[dict[str, Any]],
    tasks: list[dict[str, Any]],
) -> None:
    """Every head, event and workflow task of the batch in the one statement `fire_timers`."""
    params = {
        "now": now,
        **_arrays(heads, _HEAD_COLUMNS, "head_"),
        **_arrays(tasks, _TASK_COLUMNS, "task_"),
        # The events as JSON, one parameter (as the one-statement step sends them).
        "events": json.dumps([{k: r[k] for k in _EVENT_COLUMNS} for r in events]),
    }
    row = tx.one("fire_timers", params)
    written = (row["advanced"], row["appended"], row["woken"]) if row is not None else None
    if written != (len(heads), len(events), len(tasks)):  # under the claim's locks: cannot be
        raise RuntimeError(f"firing a batch of timers wrote {written}")


def _arrays(rows: list[dict[str, Any]], columns: tuple[str, ...], key: str) -> dict[str, list[Any]]:
    """`rows` as one list per column, named by column (`tenant` and `run_id` after `key`)."""
    return {
        (key + name if name in ("tenant", "run_id") else name): [r[name] for r in rows]
        for name in columns
    }


_HEAD_COLUMNS = (
    "tenant",
    "run_id",
    "expect_seq",
    "expect_hash",
    "last_seq",
    "last_hash",
    "added_bytes",
)
_TASK_COLUMNS = (
    "tenant",
    "run_id",
    "kind",
    "step",
    "state",
    "visible_at",
    "owner",
    "fence",
    "lapses",
)
_WORKFLOW_TASK = {"kind": "workflow", "step": ""}  # the rest of a workflow task's key
_EVENT_COLUMNS = ("tenant", "run_id", "seq", "type", "data", "ts", "hash")
