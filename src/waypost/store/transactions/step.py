"""A run's step in one statement, where the dialect has one (PostgreSQL).

Most commits of a busy engine have one of two shapes. A **step**: an attempt's result
recorded (its task deleted under its fence), the run's workflow task checked under its
fence (held, idle, no lapses), the head and snapshot advanced from the expected event,
the events appended and the next attempts leased at once to the engine that decided
them. A **last step**: the same up to the snapshot, which is finished, and then the
run's tasks, timers and correlated signal waits removed. `commit_run` makes these in
five and ten statements, each a round trip on PostgreSQL; a dialect whose
`Tx.step_statement` can run them as one (`sql/postgres/steps.sql`) does it here.

Nothing about the commit changes: the statement locks and checks the rows
`commit_run` checks, and writes only when every condition holds. When one does not
(another engine took the run over, a queue of the new attempt has a limit, the workflow
task is not idle, the run has a parent to tell or children to close...), it writes
nothing and `commit_run` goes on the long way in the same transaction, which finds the
same rows and names the conflict, or writes what the short way does not.
"""

from __future__ import annotations

import json
from typing import Any

from waypost.model.events import Event

from ..commits import CommitResult, RunCommit, WorkflowTaskOp
from ..effects import (
    ActivityTaskOp,
    CancelTimers,
    ScheduleActivities,
    SettleActivity,
    WithdrawCorrelations,
)
from ..tx import Tx
from .run_rows import activity_task_params, event_rows, history_bytes, on_time, snapshot_params

_DONE = ActivityTaskOp.DONE
# The effects each shape may have: any other is written only the long way.
_STEP_EFFECTS = frozenset({SettleActivity, ScheduleActivities})
_FINISH_EFFECTS = frozenset({SettleActivity, CancelTimers, WithdrawCorrelations})


def _plain(c: RunCommit, effects: frozenset[type]) -> bool:
    """No part of `c` that only the long way writes (common to both shapes): its effects
    among `effects`, an attempt's result final."""
    limits = c.limits
    if not (
        c.expect_seq is not None
        and c.workflow_fence is not None
        and c.snapshot is not None
        and c.events
        and not c.require_active
        and limits.max_pending_signals is None
        and limits.max_events is None
    ):
        return False
    for e in c.effects:
        if type(e) not in effects or (isinstance(e, SettleActivity) and e.op is not _DONE):
            return False
    return True


def step_shaped(c: RunCommit) -> bool:
    """Whether `c` is a step the one statement can make (see the module's text)."""
    snap = c.snapshot
    if snap is None or snap.finished or c.workflow_op is not WorkflowTaskOp.IDLE:
        return False
    if c.limits.max_concurrent_activities is not None or not _plain(c, _STEP_EFFECTS):
        return False
    schedule = c.effect(ScheduleActivities)
    return c.effect(SettleActivity) is not None and (
        schedule is None or all(na.owner for na in schedule.tasks)
    )


def finish_shaped(c: RunCommit) -> bool:
    """Whether `c` ends its run in a way the one statement can make. Its timers and
    signal waits cancelled or withdrawn go with all the others the end removes."""
    snap = c.snapshot
    return (
        snap is not None
        and snap.finished
        and c.workflow_op is WorkflowTaskOp.DELETE
        and _plain(c, _FINISH_EFFECTS)
    )


def commit_step(tx: Tx, c: RunCommit) -> CommitResult | None:
    """`c` made in one statement, or None when it has neither shape or one of its
    conditions failed (nothing written: `commit_run` goes on the long way)."""
    snap, expect = c.snapshot, c.expect_seq
    if not tx.one_statement_steps or snap is None or expect is None:
        return None
    if step_shaped(c):
        name = "commit_step"
    elif finish_shaped(c):
        name = "finish_step"
    else:
        return None
    c = on_time(c)
    events: list[Event] = tx.chain.seal(expect, c.expect_hash, c.events)
    rows = event_rows(tx, c.tenant, c.run_id, events)
    texts = {id(ev.data): ev.data_json for ev in events}
    act, schedule = c.effect(SettleActivity), c.effect(ScheduleActivities)
    new = schedule.tasks if schedule is not None else ()
    tasks = [activity_task_params(tx, c, na, True, texts) for na in new]
    try:  # JSON has no infinity or NaN (no time here is either; the long way takes any)
        events_json = json.dumps([{k: r[k] for k in _EVENT_COLUMNS} for r in rows], allow_nan=False)
        tasks_json = json.dumps([{k: t[k] for k in _TASK_COLUMNS} for t in tasks], allow_nan=False)
    except ValueError:
        return None
    params: dict[str, Any] = {
        "tenant": c.tenant,
        "run_id": c.run_id,
        "act_step": act.step if act is not None else None,
        "act_fence": act.fence if act is not None else None,
        "wf_fence": c.workflow_fence,
        "expect_seq": expect,
        "expect_hash": c.expect_hash,
        "last_seq": events[-1].seq,
        "last_hash": events[-1].hash,
        "now": c.now,
        "added_bytes": history_bytes(events),
        "max_bytes": c.limits.max_run_bytes,
        **snapshot_params(tx, c, snap),
        # The rows as JSON: one parameter each, cheaper to send than a column of arrays.
        "events": events_json,
        "tasks": tasks_json,
    }
    row = tx.step_statement(name, params)
    if row is None or not row["ok"]:
        return None
    written = (row["advanced"], row["appended"])
    if written != (1, len(events)):  # under the statement's locks: cannot be
        raise RuntimeError(f"a one-statement step of run {c.run_id!r} wrote {written}")
    return CommitResult(
        conflict=None,
        events=events,
        prev_seq=expect,
        last_seq=events[-1].seq,
        last_hash=events[-1].hash,
        status=snap.status,
        workflow_fence=None,
        workflow_queue=row["queue"],
        now=c.now,
    )


_EVENT_COLUMNS = ("seq", "type", "data", "ts", "hash")
_TASK_COLUMNS = (
    "step",
    "queue",
    "visible_at",
    "attempt",
    "deadline",
    "heartbeat_deadline",
    "timeout",
    "heartbeat_timeout",
    "spec",
    "named_queue",
    "owner",
)
