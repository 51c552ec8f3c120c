"""What an instance decided, as the one commit that records it.

The commands the workflow code issued while handling an event become events,
the run's snapshot, and the side rows of the same transaction: activity tasks
(leased at once to this engine when it runs the activity and has a free slot),
timers, approvals, cancellations, correlated signal waits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from waypost.model.events import EventType, NewEvent
from waypost.model.quotas import Quotas
from waypost.model.status import RunStatus
from waypost.runtime.cancellation import cancelled_error
from waypost.runtime.instance import WorkflowInstance
from waypost.store.base import (
    ActivityUpdate,
    ChildLink,
    Continuation,
    NewActivityTask,
    NewApproval,
    NewCorrelation,
    NewRun,
    NewTimer,
    RunCommit,
    Snapshot,
    WorkflowTaskOp,
)

from .tracing import TRACE_KEY, attempt_trace

_E = EventType
_OUTCOME_STATUS = {
    _E.RUN_COMPLETED: RunStatus.COMPLETED,
    _E.RUN_FAILED: RunStatus.FAILED,
    _E.RUN_CANCELLED: RunStatus.CANCELLED,
}


def decision_commit(
    inst: WorkflowInstance,
    *,
    tenant: str,
    run_id: str,
    fence: int,
    fed: Sequence[NewEvent],
    expect_seq: int,
    expect_hash: str,
    processed_seq: int,
    now: float,
    owner: str,
    lease: float,
    take_locally: Callable[[str], bool],
    activity: ActivityUpdate | None = None,
    start_quotas: Quotas | None = None,
) -> RunCommit:
    """The commit for the instance's new commands, after the events it was `fed`.

    `take_locally(activity)` says whether this engine runs a new activity task
    itself (and has reserved a slot for it): the task is then inserted leased to
    `owner`, so the attempt starts as soon as the commit returns. Child runs it starts
    are admitted under `start_quotas` (the engine's, with the tenant's overrides), as a
    start is; one refused fails at once into this run's history.
    """
    commands = inst.take_commands()
    new_activities: list[NewActivityTask] = []
    cancel_activities: list[str] = []
    new_timers: list[NewTimer] = []
    cancel_timers: list[str] = []
    new_approvals: list[NewApproval] = []
    close_approvals: list[tuple[str, str]] = []
    escalations: list[tuple[str, str]] = []
    new_correlations: list[NewCorrelation] = []
    withdraw_correlations: list[str] = []
    children: list[NewRun] = []
    finished = inst.outcome is not None
    # A step scheduled and cancelled in the same activation (or by a run that
    # ends in it) gets no task: work that has not started is never started.
    dropped = {ev.data["step"] for ev in commands if ev.type == _E.ACTIVITY_CANCEL_REQUESTED}
    # Likewise a correlated wait that ended in the activation that began it is never stored.
    withdrawn = {ev.data["step"] for ev in commands if ev.type == _E.CORRELATION_WITHDRAWN}
    trace = attempt_trace(inst.started)
    for ev in commands:
        t, d = ev.type, ev.data
        if t == _E.ACTIVITY_SCHEDULED:
            if finished or d["step"] in dropped:
                continue
            local = take_locally(d["activity"])
            new_activities.append(
                NewActivityTask(
                    step=d["step"],
                    activity=d["activity"],
                    spec=d if trace is None else {**d, TRACE_KEY: trace},
                    timeout=float(d["timeout"]),
                    heartbeat_timeout=d.get("heartbeat_timeout"),
                    owner=owner if local else None,
                    lease=lease,
                )
            )
        elif t == _E.ACTIVITY_CANCEL_REQUESTED:
            cancel_activities.append(d["step"])
        elif t == _E.TIMER_STARTED:
            new_timers.append(NewTimer(d["step"], float(d["fire_at"])))
        elif t == _E.TIMER_CANCELLED:
            cancel_timers.append(d["step"])
        elif t == _E.APPROVAL_REQUESTED:
            new_approvals.append(
                NewApproval(
                    approval_id=d["approval_id"],
                    step=d["step"],
                    timer_step=d.get("timer_step"),
                    name=d["name"],
                    policy=d["policy"],
                    started_by=d.get("started_by"),
                    data=d.get("data"),
                    expires_at=d.get("expires_at"),
                )
            )
        elif t == _E.APPROVAL_CLOSED:
            close_approvals.append((d["approval_id"], d["status"]))
        elif t == _E.APPROVAL_ESCALATED:
            escalations.append((d["approval_id"], d["group"]))
        elif t == _E.CORRELATION_REGISTERED:
            if not finished and d["step"] not in withdrawn:
                new_correlations.append(
                    NewCorrelation(d["step"], d["signal"], d["key"], d["value"])
                )
        elif t == _E.CORRELATION_WITHDRAWN:
            withdraw_correlations.append(d["step"])
        elif t == _E.CHILD_STARTED:
            # Started even by a run that ends in this activation (a detached child).
            children.append(
                child_run(tenant, run_id, d, now, start_quotas, inst.started.get("started_by"))
            )
    outcome = inst.outcome
    continuation: Continuation | None = None
    if outcome is not None and outcome.type == _E.RUN_CONTINUED_AS_NEW:
        continuation = next_generation(inst, outcome)
        # The store resets the snapshot and moves the workflow task on to the next
        # generation (claimed by this engine, as `owner`); the ended one ends here.
        snapshot = Snapshot(RunStatus.RUNNING.value, [], processed_seq)
        workflow_op = WorkflowTaskOp.LEAVE
    elif outcome is not None:
        status = _OUTCOME_STATUS[outcome.type]
        error = outcome.data.get("error")
        if status is RunStatus.CANCELLED:
            error = cancelled_error(outcome.data)
        snapshot = Snapshot(
            status.value,
            [],
            processed_seq,
            result=outcome.data.get("result"),
            error=error,
            finished=True,
        )
        workflow_op = WorkflowTaskOp.DELETE
    else:
        status, waiting = inst.snapshot()
        snapshot = Snapshot(status.value, waiting, processed_seq)
        workflow_op = WorkflowTaskOp.IDLE
    return RunCommit(
        tenant=tenant,
        run_id=run_id,
        events=[*fed, *commands],
        now=now,
        expect_seq=expect_seq,
        expect_hash=expect_hash,
        snapshot=snapshot,
        workflow_fence=fence,
        workflow_op=workflow_op,
        activity=activity,
        new_activities=new_activities,
        cancel_activities=cancel_activities,
        new_timers=new_timers,
        cancel_timers=cancel_timers,
        new_approvals=new_approvals,
        close_approvals=close_approvals,
        escalate_approvals=escalations,
        # A run that ends while still asking: nobody may decide any more.
        close_run_approvals="cancelled" if finished and inst.asking else None,
        new_correlations=new_correlations,
        withdraw_correlations=withdraw_correlations,
        continue_as=continuation,
        start_children=children,
        owner=owner if continuation is not None else None,
        lease=lease,
    )


def next_generation(inst: WorkflowInstance, outcome: NewEvent) -> Continuation:
    """The run's next generation, as the RunContinuedAsNew that ends this one asks."""
    d = outcome.data
    # Signals fed after the code continued (in the same activation) are unread as well.
    d["signals"] = inst.unread_signals()
    started = {k: v for k, v in inst.started.items() if k != "continued_from"}
    started.update(input=d["input"], generation=d["generation"])
    signals = [
        NewEvent(_E.SIGNAL_RECEIVED, {"name": s["name"], "payload": s["payload"]}, outcome.ts)
        for s in d["signals"]
    ]
    return Continuation(
        input=d["input"],
        started=NewEvent(_E.RUN_STARTED, started, outcome.ts),
        signals=signals,
        generation=d["generation"],
    )


def child_run(
    tenant: str,
    parent_run_id: str,
    d: dict[str, Any],
    now: float,
    quotas: Quotas | None,
    started_by: Any = None,
) -> NewRun:
    """The child run a ChildStarted command starts, linked to its parent run and step.

    The child is started on behalf of whoever started its parent (`started_by`, from the
    parent's RunStarted), so that segregation of duties holds through children: the
    parent's starter may not decide the child's approvals either."""
    started: dict[str, Any] = {
        "workflow": d["workflow"],
        "version": d["version"],
        "input": d["input"],
        "parent": {"run_id": parent_run_id, "step": d["step"], "depth": d["depth"]},
    }
    if isinstance(started_by, str) and started_by:
        started["started_by"] = started_by
    if "definition" in d:  # a definition's `call` step: the store picks the version
        started["definition"] = d["definition"]
    return NewRun(
        tenant=tenant,
        run_id=d["run_id"],
        workflow=d["workflow"],
        version=d["version"],
        input=d["input"],
        ts=now,
        started=NewEvent(_E.RUN_STARTED, started, now),
        queue=d["queue"],
        parent=ChildLink(parent_run_id, d["step"], d["close"]),
        quotas=quotas,
    )
