"""Runs: create, commit, read; the history; a run's tasks.

`commit_run` is the only way a run changes: in one transaction it checks the
commit's conditions (activity fence, workflow fence, sequence number, "still
active"), appends the events, writes the snapshot and the workflow task (the core),
then each of its effects with that kind's one writer (`_WRITERS`): the run's tasks,
timers, approvals, outbox messages, correlated signal waits, children, its next
generation. A failed condition raises `Abort` with the `CommitResult` that names it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from waypost.model.encryption import run_place, task_place
from waypost.model.events import Event, EventType, SignalReceived, canonical_json
from waypost.model.queues import activity_queue
from waypost.model.status import FINISHED, RunStatus

from ..commits import (
    ClaimedTask,
    CommitResult,
    Conflict,
    CreateRunResult,
    RunCommit,
    RunOutlook,
    RunRecord,
    Snapshot,
    TaskState,
    WorkflowTaskOp,
)
from ..effects import (
    ActivityTaskOp,
    CancelActivities,
    CancelTimers,
    CloseApprovals,
    CloseRunApprovals,
    ContinueAsNew,
    DropActivities,
    EscalateApprovals,
    NewRun,
    OpenApprovals,
    OpenCorrelations,
    ReopenQueue,
    ResetLapses,
    ScheduleActivities,
    SettleActivity,
    SetVersion,
    StartChildren,
    StartTimers,
    WithdrawCorrelations,
)
from ..rows import ApprovalRecord
from ..tx import TASKS, TIMERS, Abort, Row, Tx, loads_nullable
from .approval_rows import close_approval, escalate_approval, insert_approval
from .children import run_ended, start_children
from .generations import begin_generation
from .queues import limited_queues, limits_read_with
from .quotas import activity_room, admit_run, live_run_bytes, lock_admission, timer_room
from .records import approval_from_row, event_from_row, run_from_row, sealed, task_from_row
from .row_checks import input_mac, state_mac
from .run_rows import (
    activity_task_params,
    event_rows,
    history_bytes,
    on_time,
    snapshot_params,
    woken_task,
)
from .step import commit_step
from .workflow_queues import admit_enqueued_runs, admit_runs

_FINISHED = frozenset(s.value for s in FINISHED)


def get_run(tx: Tx, tenant: str, run_id: str, checked: bool = True) -> RunRecord | None:
    """The run's row; `BrokenRecord` if it fails its checks, unless not `checked`
    (what suspends such a run reads it anyway)."""
    row = tx.one("get_run", {"tenant": tenant, "run_id": run_id})
    return run_from_row(row, tx, checked=checked) if row is not None else None


def _deduplicated(tx: Tx, new: NewRun) -> CreateRunResult | None:
    """The tenant's unfinished run with the start's dedup id, if there is one."""
    if new.dedup_id is None:
        return None
    row = tx.one("run_by_dedup_id", {"tenant": new.tenant, "dedup_id": new.dedup_id})
    first = get_run(tx, new.tenant, row["run_id"]) if row is not None else None
    if first is None:
        return None
    return CreateRunResult(created=False, run=first)  # another id: the engine tells


def create_run(tx: Tx, new: NewRun) -> CreateRunResult:
    key = {"tenant": new.tenant, "run_id": new.run_id}
    existing = get_run(tx, new.tenant, new.run_id)
    if existing is not None:
        return CreateRunResult(created=False, run=existing)
    first = _deduplicated(tx, new)
    if first is not None:
        return first
    events = tx.chain.begin(new.tenant, new.run_id, [new.started, *new.signals])
    input_json = canonical_json(new.input)
    status = "enqueued" if new.named_queue is not None else "running"
    inserted = tx.run(
        "insert_run",
        {
            **key,
            "workflow": new.workflow,
            "version": new.version,
            "input": sealed(tx.keys, input_json, run_place(new.tenant, new.run_id, "input")),
            "input_mac": input_mac(tx.chain, new.tenant, new.run_id, new.workflow, input_json),
            "state_mac": state_mac(tx.chain, new.tenant, new.run_id, status, None, None),
            "last_seq": events[-1].seq,
            "last_hash": events[-1].hash,
            "now": new.ts,
            "priority": new.priority,
            "concurrency_key": new.concurrency_key,
            "dedup_id": new.dedup_id,
            "processed_seq": new.processed_seq,
            "status": status,
            "named_queue": new.named_queue,
            "history_bytes": history_bytes(events),
        },
    )
    if inserted == 0:
        # A concurrent start of the same run committed first (PostgreSQL: the insert
        # waited for it); that run is the one both starts answer.
        existing = get_run(tx, new.tenant, new.run_id)
        if existing is not None:
            return CreateRunResult(created=False, run=existing)
        first = _deduplicated(tx, new)  # a concurrent start with the same dedup id
        if first is not None:
            return first
    if new.quotas is not None:
        # After the insert: finding the same run again is free, and the count includes it.
        admit_run(tx, new.tenant, new.quotas, new.ts, history_bytes(events))
    tx.many("insert_event", event_rows(tx, new.tenant, new.run_id, events))
    status, fence = _first_task(tx, new)
    run = RunRecord(
        tenant=new.tenant,
        run_id=new.run_id,
        workflow=new.workflow,
        version=new.version,
        status=status,
        input=new.input,
        input_json=input_json,
        result=None,
        error=None,
        waiting_for=[],
        last_seq=events[-1].seq,
        last_hash=events[-1].hash,
        processed_seq=new.processed_seq,
        created_at=new.ts,
        updated_at=new.ts,
        finished_at=None,
        priority=new.priority,
        history_bytes=history_bytes(events),
    )
    if new.named_queue is not None:  # its admission (if any) appended RunAdmitted
        run = get_run(tx, new.tenant, new.run_id) or run
    return CreateRunResult(created=True, run=run, workflow_fence=fence)


def _first_task(tx: Tx, new: NewRun) -> tuple[str, int | None]:
    """The new run's workflow task (leased to the starting engine, ready, or held for its
    workflow queue, which may admit it at once); its status and the fence it was leased
    with (None: not leased)."""
    key = {"tenant": new.tenant, "run_id": new.run_id}
    claimed = new.claim_owner is not None
    held = new.named_queue is not None  # enqueued: held until its queue admits it
    fence = 1 if claimed and not held else 0
    if not claimed and not held:
        tx.notify(TASKS)
    tx.run(
        "insert_workflow_task",
        {
            **key,
            "queue": new.queue or f"{new.workflow}@{new.version}",
            "state": "held" if held else "leased" if claimed else "ready",
            "visible_at": new.ts + new.lease if claimed and not held else new.ts,
            "owner": new.claim_owner if not held else None,
            "fence": fence,
            "now": new.ts,
            "priority": new.priority,
        },
    )
    status = RunStatus.RUNNING.value
    if new.named_queue is not None:
        status = RunStatus.ENQUEUED.value
        if new.run_id in admit_runs(tx, new.tenant, new.named_queue, new.ts, commit_run):
            status, claimed = RunStatus.RUNNING.value, False
            if new.claim_owner is not None:
                leased = tx.one(
                    "lease_admitted_task",
                    {
                        **key,
                        "owner": new.claim_owner,
                        "now": new.ts,
                        "lease_until": new.ts + new.lease,
                    },
                )
                claimed, fence = leased is not None, int(leased["fence"]) if leased else 0
        else:
            claimed = False
    return status, fence if claimed else None


def commit_run(tx: Tx, c: RunCommit) -> CommitResult:
    stepped = commit_step(tx, c)  # most steps, in one statement where the dialect can
    if stepped is not None:
        return stepped
    return commit_run_in_full(tx, c)


@dataclass(slots=True)
class _Applied:
    """What the core of a commit found and wrote, as its effects' writers need it, and
    what they add to the commit's result."""

    wt: Row | None
    events: list[Event]
    status: str
    last_seq: int
    last_hash: str
    fence_after: int | None = None
    queued: tuple[str, ...] = ()


def commit_run_in_full(tx: Tx, c: RunCommit) -> CommitResult:
    """`commit_run` statement by statement (what a step's one statement falls back to):
    its conditions, the history and the run's head, the workflow task, then each effect
    through its writer, in the order of `_WRITERS`."""
    c = on_time(c)
    effects: dict[type, Any] = {type(e): e for e in c.effects}
    if len(effects) != len(c.effects):
        raise ValueError(f"a commit of run {c.run_id!r} has two effects of one kind")
    settle = effects.pop(SettleActivity, None)
    if settle is not None:  # a condition: checked (its task locked) before the run's rows
        _settle_activity(tx, c, settle)
    schedule = effects.get(ScheduleActivities)
    wt = _workflow_task_for(tx, c, schedule)
    snap = c.snapshot
    head, prev_seq, prev_hash, status = _head_for(tx, c)
    # A run of a workflow queue that ends having been admitted frees its slot: the next is
    # admitted in this commit.
    ending = head if snap is not None and snap.finished else None
    events = tx.chain.seal(prev_seq, prev_hash, c.events)
    added = history_bytes(events)
    if c.expect_seq is None and head is not None:  # an append after whatever is last
        _admit_bytes(tx, c, head, added, status)
    last_seq, last_hash = (events[-1].seq, events[-1].hash) if events else (prev_seq, prev_hash)
    _advance_head(tx, c, (prev_seq, prev_hash), (last_seq, last_hash), added)
    if snap is not None:
        status = snap.status
    if events:
        tx.many("insert_event", event_rows(tx, c.tenant, c.run_id, events))
    done = _Applied(wt, events, status, last_seq, last_hash, _workflow_task_op(tx, c, wt))
    if effects:
        for kind in sorted(effects, key=_ORDER.__getitem__):
            _WRITERS[kind](tx, c, effects[kind], done)
    if snap is not None and snap.finished:  # never with ContinueAsNew (a running snapshot)
        _end_run(tx, c, snap, ending)
    return CommitResult(
        conflict=None,
        events=events,
        prev_seq=prev_seq,
        last_seq=last_seq,
        last_hash=last_hash,
        status=status,
        workflow_fence=done.fence_after,
        workflow_queue=wt["queue"] if wt is not None else "",
        queued_steps=done.queued,
        now=c.now,
    )


def _settle_activity(tx: Tx, c: RunCommit, a: SettleActivity) -> None:
    """The reported attempt's task done or set to retry, under its fence."""
    key = {"tenant": c.tenant, "run_id": c.run_id}
    if a.op is ActivityTaskOp.DONE:
        n = tx.run("finish_activity_task", {**key, "step": a.step, "fence": a.fence})
    else:
        n = tx.run(
            "retry_activity_task",
            {
                **key,
                "step": a.step,
                "fence": a.fence,
                "retry_at": a.retry_at,
                "heartbeat_details": sealed(
                    tx.keys,
                    a.heartbeat_details,
                    task_place(c.tenant, c.run_id, a.step, "heartbeat_details"),
                ),
                "lapsed": int(a.lapsed),
            },
        )
    if n != 1:
        raise Abort(CommitResult(Conflict.ACTIVITY_FENCE))


def _workflow_task_for(tx: Tx, c: RunCommit, schedule: ScheduleActivities | None) -> Row | None:
    """The run's workflow task when the commit checks its fence or changes it (with the
    tenant's limited queues when it leases attempts: one round trip fewer a step on
    PostgreSQL)."""
    needs_task = c.workflow_fence is not None or c.workflow_op in (
        WorkflowTaskOp.WAKE,
        WorkflowTaskOp.CLAIM,
        WorkflowTaskOp.IDLE,
        WorkflowTaskOp.DEFER,
    )
    if not needs_task:
        return None
    leasing = schedule is not None and any(na.owner for na in schedule.tasks)
    key = {"tenant": c.tenant, "run_id": c.run_id}
    wt = tx.one("workflow_task_and_limits" if leasing else "workflow_task", key)
    if c.workflow_fence is not None and (wt is None or wt["fence"] != c.workflow_fence):
        raise Abort(CommitResult(Conflict.WORKFLOW_FENCE))
    return wt


def _head_for(tx: Tx, c: RunCommit) -> tuple[Row | None, int, str, str]:
    """The run's head (read once, if anything needs it), the sequence number and hash the
    new events follow, and the run's status as read; the head's conditions checked."""
    finishing = c.snapshot is not None and c.snapshot.finished
    needs_head = c.expect_seq is None or c.require_active or finishing
    key = {"tenant": c.tenant, "run_id": c.run_id}
    head = tx.one("run_head", key) if needs_head else None
    if c.expect_seq is not None:
        if c.require_active:
            if head is None:
                raise Abort(CommitResult(Conflict.RUN_NOT_FOUND))
            if head["status"] in _FINISHED:
                raise Abort(CommitResult(Conflict.RUN_FINISHED, status=head["status"]))
        return head, c.expect_seq, c.expect_hash, ""
    if head is None:
        raise Abort(CommitResult(Conflict.RUN_NOT_FOUND))
    prev_seq, prev_hash, status = head["last_seq"], head["last_hash"], head["status"]
    if c.require_active and status in _FINISHED:
        raise Abort(CommitResult(Conflict.RUN_FINISHED, status=status))
    if c.limits.max_pending_signals is not None and _signal_backlog(tx, c, head):
        raise Abort(CommitResult(Conflict.BACKLOG, status=status))
    most = c.limits.max_events
    if most is not None and prev_seq + len(c.events) > most:
        raise Abort(CommitResult(Conflict.HISTORY_FULL, status=status))
    return head, prev_seq, prev_hash, status


def _advance_head(
    tx: Tx, c: RunCommit, prev: tuple[int, str], last: tuple[int, str], added: int
) -> None:
    """Move the run's head from `prev` to `last` (with its snapshot, if any), on the
    condition that it is still at `prev` and its history stays within its bytes."""
    key = {"tenant": c.tenant, "run_id": c.run_id}
    head_params = {
        **key,
        "last_seq": last[0],
        "last_hash": last[1],
        "now": c.now,
        "expect_seq": prev[0],
        "expect_hash": prev[1],
        "added_bytes": added,
        "max_bytes": c.limits.max_run_bytes,
    }
    snap = c.snapshot
    if snap is not None:
        n = tx.run("advance_run_snapshot", {**head_params, **snapshot_params(tx, c, snap)})
    elif c.events or c.expect_seq is not None:
        n = tx.run("advance_run_checked", head_params)
    else:
        n = 1
    if n == 1:
        return
    head = tx.one("run_head", key)
    if head is None:
        raise Abort(CommitResult(Conflict.RUN_NOT_FOUND))
    most = c.limits.max_run_bytes
    over = most is not None and head["history_bytes"] + added > most
    moved = (head["last_seq"], head["last_hash"]) != prev
    raise Abort(CommitResult(Conflict.HISTORY_BYTES if over and not moved else Conflict.SEQ))


# == the effects' writers, one for each kind ======================================
def _set_version(tx: Tx, c: RunCommit, e: SetVersion, done: _Applied) -> None:
    tx.run("set_run_version", {"tenant": c.tenant, "run_id": c.run_id, "version": e.version})


def _reopen_workflow_task(tx: Tx, c: RunCommit, e: ReopenQueue, done: _Applied) -> None:
    key = {"tenant": c.tenant, "run_id": c.run_id}
    row = tx.one("get_run", key)
    tx.run(
        "insert_workflow_task",
        {
            **key,
            "queue": e.queue,
            "state": "ready",
            "visible_at": c.now,
            "owner": None,
            "fence": 0,
            "now": c.now,
            "priority": row["priority"] if row is not None else 0,
        },
    )
    tx.notify(TASKS)


def _reset_lapses(tx: Tx, c: RunCommit, e: ResetLapses, done: _Applied) -> None:
    tx.run("reset_run_lapses", {"tenant": c.tenant, "run_id": c.run_id})


def _schedule_activities(tx: Tx, c: RunCommit, e: ScheduleActivities, done: _Applied) -> None:
    """The commit's new attempts: leased to their engine when the tenant's limits leave
    room, else ready for a claim (the steps left queued are the commit's `queued_steps`)."""
    key = {"tenant": c.tenant, "run_id": c.run_id}
    # A task's spec is often an event's data.
    texts = {id(ev.data): ev.data_json for ev in done.events}
    leasing = any(na.owner for na in e.tasks)
    most = c.limits.max_concurrent_activities
    room: int | None = None  # leases the tenant's max_concurrent_activities leaves
    if most is not None and leasing:
        room = activity_room(tx, c.tenant, most, c.now)
    queued: list[str] = []
    # The tenant's queues with a limit, read when needed (with the workflow task if any).
    wt = done.wt
    limited = limits_read_with(wt) if leasing and wt is not None else None
    for na in e.tasks:
        leased = na.owner is not None
        named = activity_queue(na.spec)
        if leased:
            # An attempt of a limited queue waits for a claim, which counts under its lock.
            if limited is None:
                limited = [name for _, name in limited_queues(tx, (c.tenant,))]
            if named in limited:
                leased = False
                queued.append(na.step)
        if leased and room is not None:
            if room <= 0:
                leased = False
                queued.append(na.step)
            room -= 1
        if not leased:
            tx.notify(TASKS)
        tx.run("insert_activity_task", {**key, **activity_task_params(tx, c, na, leased, texts)})
    if queued:
        done.queued = tuple(queued)


def _drop_activities(tx: Tx, c: RunCommit, e: DropActivities, done: _Applied) -> None:
    for step in e.steps:
        tx.run("delete_activity_task", {"tenant": c.tenant, "run_id": c.run_id, "step": step})


def _cancel_activities(tx: Tx, c: RunCommit, e: CancelActivities, done: _Applied) -> None:
    key = {"tenant": c.tenant, "run_id": c.run_id}
    for step in e.steps:
        if tx.run("delete_ready_activity", {**key, "step": step}) == 0:
            tx.run("request_activity_cancel", {**key, "step": step})


def _cancel_timers(tx: Tx, c: RunCommit, e: CancelTimers, done: _Applied) -> None:
    for step in e.steps:
        tx.run("cancel_timer", {"tenant": c.tenant, "run_id": c.run_id, "step": step})


def _start_timers(tx: Tx, c: RunCommit, e: StartTimers, done: _Applied) -> None:
    """New timers (after those cancelled), within the tenant's pending timers."""
    most = c.limits.max_pending_timers
    if most is not None and timer_room(tx, c.tenant, most, c.now) < len(e.timers):
        raise Abort(CommitResult(Conflict.TIMERS, status=done.status))
    key = {"tenant": c.tenant, "run_id": c.run_id}
    for timer in e.timers:
        tx.run("insert_timer", {**key, "step": timer.step, "fire_at": timer.fire_at})
        tx.notify(TIMERS)


def _open_approvals(tx: Tx, c: RunCommit, e: OpenApprovals, done: _Applied) -> None:
    for ap in e.approvals:
        insert_approval(tx, c, ap)


def _close_approvals(tx: Tx, c: RunCommit, e: CloseApprovals, done: _Applied) -> None:
    for approval_id, ap_status in e.closed:
        close_approval(tx, c.tenant, approval_id, ap_status, c.now)


def _escalate_approvals(tx: Tx, c: RunCommit, e: EscalateApprovals, done: _Applied) -> None:
    for approval_id, group in e.escalated:
        escalate_approval(tx, c.tenant, approval_id, group, c.now)


def _close_run_approvals(tx: Tx, c: RunCommit, e: CloseRunApprovals, done: _Applied) -> None:
    key = {"tenant": c.tenant, "run_id": c.run_id, "now": c.now}
    tx.run("close_run_approvals", {**key, "status": e.status})
    tx.run("revoke_run_credentials", key)


def _open_correlations(tx: Tx, c: RunCommit, e: OpenCorrelations, done: _Applied) -> None:
    key = {"tenant": c.tenant, "run_id": c.run_id}
    for corr in e.correlations:
        tx.run(
            "insert_correlation",
            {
                **key,
                "step": corr.step,
                "signal": corr.signal,
                "corr_key": corr.key,
                "corr_value": corr.value,
                "now": c.now,
            },
        )


def _withdraw_correlations(tx: Tx, c: RunCommit, e: WithdrawCorrelations, done: _Applied) -> None:
    for step in e.steps:
        tx.run("delete_correlation", {"tenant": c.tenant, "run_id": c.run_id, "step": step})


def _start_children(tx: Tx, c: RunCommit, e: StartChildren, done: _Applied) -> None:
    start_children(tx, c, e.runs, commit_run, create_run)


def _continue_as_new(tx: Tx, c: RunCommit, e: ContinueAsNew, done: _Applied) -> None:
    fence = begin_generation(tx, c, e, done.wt, done.last_seq, done.last_hash)
    done.fence_after = fence or None


# Each kind of effect's one writer, in the order they write, after the core (but
# SettleActivity's, `_settle_activity`: a condition, checked first). Order matters where
# one writer sees what another wrote: the lapses reset after the workflow task is set,
# timers cancelled before new ones count against the tenant's pending timers.
_WRITERS: dict[type, Callable[[Tx, RunCommit, Any, _Applied], None]] = {
    SetVersion: _set_version,
    ReopenQueue: _reopen_workflow_task,
    ResetLapses: _reset_lapses,
    ScheduleActivities: _schedule_activities,
    DropActivities: _drop_activities,
    CancelActivities: _cancel_activities,
    CancelTimers: _cancel_timers,
    StartTimers: _start_timers,
    OpenApprovals: _open_approvals,
    CloseApprovals: _close_approvals,
    EscalateApprovals: _escalate_approvals,
    CloseRunApprovals: _close_run_approvals,
    OpenCorrelations: _open_correlations,
    WithdrawCorrelations: _withdraw_correlations,
    StartChildren: _start_children,
    ContinueAsNew: _continue_as_new,
}
_ORDER = {kind: n for n, kind in enumerate(_WRITERS)}


def _end_run(tx: Tx, c: RunCommit, snap: Snapshot, ending: Row | None) -> None:
    """A finished run's tasks, timers and signal waits removed, its ending's policies
    applied, and the next run of its workflow queue admitted."""
    key = {"tenant": c.tenant, "run_id": c.run_id}
    tx.run("delete_run_tasks", key)
    tx.run("delete_run_timers", key)
    tx.run("delete_run_correlations", key)
    run_ended(tx, c, snap, commit_run)
    if ending is not None and ending["named_queue"] and ending["status"] != "enqueued":
        admit_runs(tx, c.tenant, ending["named_queue"], c.now, commit_run)


def _signal_backlog(tx: Tx, c: RunCommit, head: Row) -> bool:
    """Whether the run has `c.limits.max_pending_signals` signals its code has not taken in, as
    they count for the signals `c` appends. Those not yet processed always count; those
    the code holds unread (buffered for a name it does not wait for) count too, unless
    every signal appended is of a name the code takes in now: a flood of signals it never
    reads is refused, and the signal it waits for still gets in."""
    most = c.limits.max_pending_signals
    assert most is not None  # the caller checked
    row = tx.one(
        "pending_signals", {"tenant": c.tenant, "run_id": c.run_id, "after": head["processed_seq"]}
    )
    pending = int(row["pending"]) if row is not None else 0
    names = {
        SignalReceived.parse(ev).name for ev in c.events if ev.type == EventType.SIGNAL_RECEIVED
    }
    taken = set(loads_nullable(head["signal_names"]) or ())
    if not (names and names <= taken):
        pending += int(head["unread_signals"])
    return pending >= most


def _admit_bytes(tx: Tx, c: RunCommit, head: Row, added: int, status: str) -> None:
    """Refuse an append after whatever is last that would take the run past its
    `max_run_bytes`, or the tenant's live runs past `max_live_run_bytes` (counted under
    the tenant's admission lock, taken after the run's rows, as every admission does)."""
    limits = c.limits
    if limits.max_run_bytes is not None and head["history_bytes"] + added > limits.max_run_bytes:
        raise Abort(CommitResult(Conflict.HISTORY_BYTES, status=status))
    if limits.max_live_run_bytes is not None:
        lock_admission(tx, c.tenant, 1, c.now)
        if live_run_bytes(tx, c.tenant) + added > limits.max_live_run_bytes:
            raise Abort(CommitResult(Conflict.TENANT_BYTES, status=status))


def _workflow_task_op(tx: Tx, c: RunCommit, wt: Row | None) -> int | None:
    op = c.workflow_op
    if op is WorkflowTaskOp.LEAVE:
        return None
    if op is WorkflowTaskOp.DELETE:
        tx.run("delete_workflow_task", {"tenant": c.tenant, "run_id": c.run_id})
        return None
    if wt is None or wt["state"] == "held":  # an enqueued run's task waits for admission
        return None
    if op is WorkflowTaskOp.DEFER:
        tx.run(
            "set_workflow_task",
            {
                "tenant": c.tenant,
                "run_id": c.run_id,
                "state": "ready",
                "visible_at": c.defer_until if c.defer_until is not None else c.now,
                "owner": None,
                "fence": wt["fence"],
                "lapses": wt["lapses"],
            },
        )
        return None
    if op is WorkflowTaskOp.IDLE:
        # The holder got through: its lapses are forgotten.
        if wt["state"] != "idle" or wt["lapses"]:  # a busy run's step leaves the row untouched
            tx.run(
                "set_workflow_task",
                {
                    "tenant": c.tenant,
                    "run_id": c.run_id,
                    "state": "idle",
                    "visible_at": None,
                    "owner": wt["owner"],
                    "fence": wt["fence"],
                    "lapses": 0,
                },
            )
        return None
    woken = woken_task(wt, c)
    if woken.columns is not None:
        tx.run("set_workflow_task", {"tenant": c.tenant, "run_id": c.run_id, **woken.columns})
    if woken.ready:
        tx.notify(TASKS)
    return woken.fence


def load_run(
    tx: Tx, tenant: str, run_id: str, after_seq: int = 0
) -> tuple[RunRecord | None, list[Event]]:
    """The snapshot and the events after `after_seq`; run in one (snapshot) transaction."""
    run = get_run(tx, tenant, run_id)
    if run is None:
        return None, []
    return run, load_history(tx, tenant, run_id, after_seq)


def load_idle_run(
    tx: Tx, tenant: str, run_id: str, queues: Sequence[str]
) -> tuple[RunRecord | None, list[Event], int | None]:
    """`load_run`, and the fence of the run's workflow task if it is idle (nobody holds
    it, nothing waits to be processed) and in one of `queues`; read in one (snapshot)
    transaction. A decision made on this history under that fence commits only if
    nobody took the task meanwhile, as one made by the engine that last held it.
    Otherwise no fence and no history (the caller goes the long way)."""
    task = tx.one("workflow_task_state", {"tenant": tenant, "run_id": run_id})
    if task is None or task["state"] != "idle" or task["queue"] not in queues:
        return None, [], None
    run = get_run(tx, tenant, run_id)
    if run is None:
        return None, [], None
    return run, load_history(tx, tenant, run_id), int(task["fence"])


def history_page(
    tx: Tx, tenant: str, run_id: str, after_seq: int, limit: int, max_bytes: int
) -> tuple[bool, list[Event], bool]:
    """Whether the run exists; its events after `after_seq`, at most `limit` and no more
    than `max_bytes` of data (one at least); and whether more follow. Read in one
    (snapshot) transaction; the sizes first, so that what the page leaves out is never
    read."""
    key = {"tenant": tenant, "run_id": run_id}
    if tx.one("run_exists", key) is None:
        return False, [], False
    sizes = tx.all("history_sizes", {**key, "after_seq": after_seq, "limit": limit + 1})
    through, total = after_seq, 0
    for row in sizes[:limit]:
        total += int(row["size"] or 0)
        if total > max_bytes and through > after_seq:
            break
        through = int(row["seq"])
    more = len(sizes) > limit or (bool(sizes) and through < int(sizes[-1]["seq"]))
    if through == after_seq:
        return True, [], False
    params = {**key, "after_seq": after_seq, "through": through}
    events = [
        event_from_row(r, tx.keys, tenant, run_id) for r in tx.all("load_history_range", params)
    ]
    return True, events, more


def load_history(tx: Tx, tenant: str, run_id: str, after_seq: int = 0) -> list[Event]:
    rows = tx.all("load_history", {"tenant": tenant, "run_id": run_id, "after_seq": after_seq})
    return [event_from_row(r, tx.keys, tenant, run_id) for r in rows]


def run_tasks(tx: Tx, tenant: str, run_id: str) -> list[ClaimedTask]:
    return [
        task_from_row(r, tx.keys) for r in tx.all("run_tasks", {"tenant": tenant, "run_id": run_id})
    ]


# == what is in motion for runs of a page (run_pages.py reads the page) ============
def run_outlooks(tx: Tx, tenant: str, run_ids: Sequence[str]) -> dict[str, RunOutlook]:
    """The tasks and pending approvals of some of the tenant's runs, by run id."""
    if not run_ids:
        return {}
    params = {"tenant": tenant, "run_ids": json.dumps(list(run_ids))}
    tasks: dict[str, list[TaskState]] = {}
    for r in tx.all("outlook_tasks", params):
        tasks.setdefault(r["run_id"], []).append(
            TaskState(
                run_id=r["run_id"],
                kind=r["kind"],
                step=r["step"],
                queue=r["queue"],
                state=r["state"],
                visible_at=r["visible_at"],
                owner=r["owner"],
                attempt=r["attempt"],
                deadline=r["deadline"],
            )
        )
    approvals: dict[str, list[ApprovalRecord]] = {}
    for r in tx.all("outlook_approvals", params):
        approvals.setdefault(r["run_id"], []).append(approval_from_row(r, tx))
    return {
        run_id: RunOutlook(tasks.get(run_id, []), approvals.get(run_id, [])) for run_id in run_ids
    }


def admit_enqueued(tx: Tx, now: float) -> int:
    """The scheduler's pass over the workflow queues with enqueued runs: admit what their
    limits allow now; how many runs were admitted."""
    return admit_enqueued_runs(tx, now, commit_run)
