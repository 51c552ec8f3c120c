"""What an instance decided, as the one commit that records it.

The commands the workflow code issued while handling an event become events,
the run's snapshot, and the commit's effects (the side rows of the same transaction):
activity tasks (leased at once to this engine when it runs the activity and has a free
slot), timers, approvals, cancellations, correlated signal waits, child runs. The
commands are grouped by type once; an effect is made only for a kind of change the
decision has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from waypost.model.events import (
    ActivityCancelRequested,
    ActivityScheduled,
    ApprovalClosed,
    ApprovalEscalated,
    ApprovalRequested,
    ChildStarted,
    CorrelationRegistered,
    CorrelationWithdrawn,
    EventType,
    NewEvent,
    RunContinuedAsNew,
    RunStarted,
    SignalReceived,
    TimerCancelled,
    TimerStarted,
)
from waypost.model.quotas import Quotas
from waypost.model.status import RunStatus
from waypost.runtime.cancellation import CANCEL_GRACE_STEP, cancelled_error
from waypost.runtime.instance import WorkflowInstance
from waypost.runtime.run_timeout import RUN_TIMEOUT_STEP
from waypost.store.base import (
    NO_LIMITS,
    ChildLink,
    Limits,
    NewActivityTask,
    NewApproval,
    NewCorrelation,
    NewRun,
    NewTimer,
    RunCommit,
    Snapshot,
    WorkflowTaskOp,
)
from waypost.store.effects import (
    CancelActivities,
    CancelTimers,
    CloseApprovals,
    CloseRunApprovals,
    ContinueAsNew,
    Effect,
    EscalateApprovals,
    OpenApprovals,
    OpenCorrelations,
    ScheduleActivities,
    SettleActivity,
    StartChildren,
    StartTimers,
    WithdrawCorrelations,
)

from .tracing import TRACE_KEY, attempt_trace

_E = EventType
_LIMIT_STEPS = frozenset({CANCEL_GRACE_STEP, RUN_TIMEOUT_STEP})
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
    owner: str | None,
    lease: float,
    take_locally: Callable[[str], bool],
    activity: SettleActivity | None = None,
    start_quotas: Quotas | None = None,
    limits: Limits = NO_LIMITS,
) -> RunCommit:
    """The commit for the instance's new commands, after the events it was `fed`.

    `take_locally(activity)` says whether this engine runs a new activity task
    itself (and has reserved a slot for it): the task is then inserted leased to
    `owner`, so the attempt starts as soon as the commit returns; a next generation's
    workflow task is leased to `owner` too (None: to nobody). Child runs it starts
    are admitted under `start_quotas` (the engine's, with the tenant's overrides), as a
    start is; one refused fails at once into this run's history. The store holds the
    commit to `limits` (`decision_limits` of the tenant's quotas).
    """
    commands = inst.take_commands()
    finished = inst.outcome is not None
    by_type: dict[str, list[NewEvent]] = {}
    for ev in commands:
        same = by_type.get(ev.type)
        if same is None:
            by_type[ev.type] = [ev]
        else:
            same.append(ev)
    effects: list[Effect] = [] if activity is None else [activity]
    if by_type:
        tasks = (
            _new_activity_tasks(
                by_type,
                take_locally=take_locally,
                owner=owner,
                lease=lease,
                trace=attempt_trace(inst.started),
            )
            if not finished and _E.ACTIVITY_SCHEDULED in by_type
            else None
        )
        if tasks:
            effects.append(ScheduleActivities(tasks))
        _step_effects(by_type, effects)
        _approval_effects(by_type, effects)
        _correlation_effects(by_type, finished, effects)
        if _E.CHILD_STARTED in by_type:
            children = _children(inst, by_type[_E.CHILD_STARTED], tenant, run_id, now, start_quotas)
            effects.append(StartChildren(children))
    if finished and inst.asking:  # a run that ends while still asking: nobody may decide
        effects.append(CloseRunApprovals("cancelled"))
    snapshot, workflow_op, continuation = _snapshot_after(inst, processed_seq)
    if continuation is not None:
        effects.append(continuation)
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
        owner=owner if continuation is not None else None,
        lease=lease,
        limits=limits if limits.max_pending_timers is None else _timers_held(limits, effects),
        effects=tuple(effects),
    )


def decision_limits(quotas: Quotas) -> Limits:
    """The tenant's quotas the store holds a decision to: its pending timers, activities
    in flight and the run's bytes (the engine judges the rest, `over_quota`)."""
    return Limits(
        max_pending_timers=quotas.max_pending_timers,
        max_concurrent_activities=quotas.max_concurrent_activities,
        max_run_bytes=quotas.max_run_bytes,
    )


def _timers_held(limits: Limits, effects: Sequence[Effect]) -> Limits:
    """`limits`, but for a decision that starts the cancel grace's or the run timeout's
    timer: never held for the tenant's pending timers."""
    for e in effects:
        if isinstance(e, StartTimers) and any(t.step in _LIMIT_STEPS for t in e.timers):
            return replace(limits, max_pending_timers=None)
    return limits


def _children(
    inst: WorkflowInstance,
    started: Sequence[NewEvent],
    tenant: str,
    run_id: str,
    now: float,
    start_quotas: Quotas | None,
) -> list[NewRun]:
    """The child runs the commands start: even by a run that ends in this activation (a
    detached child)."""
    starter = inst.started.get("started_by")
    return [
        child_run(tenant, run_id, ChildStarted.parse(ev), now, start_quotas, starter)
        for ev in started
    ]


def _steps(
    by_type: dict[str, list[NewEvent]],
    cls: type[ActivityCancelRequested | TimerCancelled | CorrelationWithdrawn],
) -> list[str]:
    """The steps of the commands of one type, in order."""
    return [cls.parse(ev).step for ev in by_type.get(cls.TYPE, ())]


def _step_effects(by_type: dict[str, list[NewEvent]], effects: list[Effect]) -> None:
    """Activities cancelled, timers started and cancelled."""
    if _E.ACTIVITY_CANCEL_REQUESTED in by_type:
        effects.append(CancelActivities(_steps(by_type, ActivityCancelRequested)))
    if _E.TIMER_STARTED in by_type:
        timers = [TimerStarted.parse(ev) for ev in by_type[_E.TIMER_STARTED]]
        effects.append(StartTimers([NewTimer(t.step, float(t.fire_at)) for t in timers]))
    if _E.TIMER_CANCELLED in by_type:
        effects.append(CancelTimers(_steps(by_type, TimerCancelled)))


def _new_activity_tasks(
    by_type: dict[str, list[NewEvent]],
    *,
    take_locally: Callable[[str], bool],
    owner: str | None,
    lease: float,
    trace: Any,
) -> list[NewActivityTask]:
    """A task per activity scheduled, leased to `owner` when it takes it locally. A step
    scheduled and cancelled in the same activation (or by a run that ends in it: the
    caller gives none) gets none: work that has not started is never started."""
    dropped = set(_steps(by_type, ActivityCancelRequested))
    tasks = []
    for ev in by_type[_E.ACTIVITY_SCHEDULED]:
        step, activity, timeout, heartbeat_timeout = ActivityScheduled.task_of(ev)
        if step in dropped:
            continue
        local = take_locally(activity)
        # The task's spec is the whole scheduled data (the activity's options with it).
        spec = ev.data
        tasks.append(
            NewActivityTask(
                step=step,
                activity=activity,
                spec=spec if trace is None else {**spec, TRACE_KEY: trace},
                timeout=float(timeout),
                heartbeat_timeout=heartbeat_timeout,
                owner=owner if local else None,
                lease=lease,
            )
        )
    return tasks


def _approval_effects(by_type: dict[str, list[NewEvent]], effects: list[Effect]) -> None:
    """Approvals opened, closed (id, status) and escalated (id, group)."""
    if _E.APPROVAL_REQUESTED in by_type:
        requested = [ApprovalRequested.parse(ev) for ev in by_type[_E.APPROVAL_REQUESTED]]
        opened = [
            NewApproval(
                approval_id=r.approval_id,
                step=r.step,
                timer_step=r.timer_step,
                name=r.name,
                policy=r.policy,
                started_by=r.started_by,
                data=r.data,
                expires_at=r.expires_at,
            )
            for r in requested
        ]
        effects.append(OpenApprovals(opened))
    if _E.APPROVAL_CLOSED in by_type:
        closed = [ApprovalClosed.parse(ev) for ev in by_type[_E.APPROVAL_CLOSED]]
        effects.append(CloseApprovals([(c.approval_id, c.status) for c in closed]))
    if _E.APPROVAL_ESCALATED in by_type:
        raised = [ApprovalEscalated.parse(ev) for ev in by_type[_E.APPROVAL_ESCALATED]]
        effects.append(EscalateApprovals([(e.approval_id, e.group) for e in raised]))


def _correlation_effects(
    by_type: dict[str, list[NewEvent]], finished: bool, effects: list[Effect]
) -> None:
    """Correlated signal waits registered and withdrawn. One that ended in the activation
    that began it (or whose run ends in it) is never stored."""
    withdrawn = _steps(by_type, CorrelationWithdrawn)
    if _E.CORRELATION_REGISTERED in by_type and not finished:
        registered = [
            NewCorrelation(c.step, c.signal, c.key, c.value)
            for ev in by_type[_E.CORRELATION_REGISTERED]
            for c in (CorrelationRegistered.parse(ev),)
            if c.step not in withdrawn
        ]
        if registered:
            effects.append(OpenCorrelations(registered))
    if withdrawn:
        effects.append(WithdrawCorrelations(withdrawn))


def _snapshot_after(
    inst: WorkflowInstance, processed_seq: int
) -> tuple[Snapshot, WorkflowTaskOp, ContinueAsNew | None]:
    """The run's snapshot after the activation, what becomes of its workflow task, and
    its next generation if it continues as new."""
    outcome = inst.outcome
    if outcome is not None and outcome.type == _E.RUN_CONTINUED_AS_NEW:
        # The store resets the snapshot and moves the workflow task on to the next
        # generation (claimed by this engine, as `owner`); the ended one ends here.
        snapshot = Snapshot(RunStatus.RUNNING.value, [], processed_seq)
        return snapshot, WorkflowTaskOp.LEAVE, next_generation(inst, outcome)
    if outcome is not None:
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
        return snapshot, WorkflowTaskOp.DELETE, None
    status, waiting = inst.snapshot()
    snapshot = Snapshot(
        status.value,
        waiting,
        processed_seq,
        # What signals are admitted to the run is judged by these (`max_pending_signals`).
        unread_signals=len(inst.unread_signals()),
        signal_names=inst.signal_names(),
    )
    return snapshot, WorkflowTaskOp.IDLE, None


def next_generation(inst: WorkflowInstance, outcome: NewEvent) -> ContinueAsNew:
    """The run's next generation, as the RunContinuedAsNew that ends this one asks."""
    # Signals fed after the code continued (in the same activation) are unread as well:
    # the event that ends the generation carries them on.
    outcome.data["signals"] = inst.unread_signals()
    ended = RunContinuedAsNew.parse(outcome)
    started = replace(
        RunStarted.parse(inst.started),
        continued_from=None,
        input=ended.input,
        generation=ended.generation,
        # The run timeout spans the chain: the next generation keeps this one's deadline.
        run_timeout=inst.run_timeout.seconds,
        run_deadline=inst.run_timeout.deadline,
    )
    signals = [
        SignalReceived(name=s["name"], payload=s["payload"]).at(outcome.ts) for s in ended.signals
    ]
    return ContinueAsNew(
        input=ended.input,
        started=started.at(outcome.ts),
        signals=signals,
        generation=ended.generation,
    )


def child_run(
    tenant: str,
    parent_run_id: str,
    d: ChildStarted,
    now: float,
    quotas: Quotas | None,
    started_by: Any = None,
) -> NewRun:
    """The child run a ChildStarted command starts, linked to its parent run and step.

    The child is started on behalf of whoever started its parent (`started_by`, from the
    parent's RunStarted), so that segregation of duties holds through children: the
    parent's starter may not decide the child's approvals either."""
    started = RunStarted(
        workflow=d.workflow,
        version=d.version,
        input=d.input,
        parent={"run_id": parent_run_id, "step": d.step, "depth": d.depth},
        started_by=started_by if isinstance(started_by, str) and started_by else None,
        # A definition's `call` step: the store picks the version.
        definition=d.definition,
    )
    return NewRun(
        tenant=tenant,
        run_id=d.run_id,
        workflow=d.workflow,
        version=d.version,
        input=d.input,
        ts=now,
        started=started.at(now),
        queue=d.queue,
        parent=ChildLink(parent_run_id, d.step, d.close),
        quotas=quotas,
    )
