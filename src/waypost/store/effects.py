"""What a run's commit changes beside its history and head: its effects.

A `RunCommit` (base.py) is a core (the run, the events and the conditions they are
appended under, the snapshot, what becomes of the workflow task, the tenant's limits)
and a tuple of effects. Each effect is one kind of change to the run's other rows (its
activity tasks, timers, approvals, correlated signal waits, child runs, its next
generation...), a small frozen record written by exactly one writer in the store
(`transactions/runs.py`), in the store's order whatever their order in the tuple. A
commit holds at most one effect of each kind and never an empty one: a decision that
schedules nothing has no `ScheduleActivities`.

The records they carry (a new attempt's task, a timer, a child run) are declared here
too; `base.py` re-exports those the rest of the store names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from waypost.model.events import NewEvent
from waypost.model.quotas import Quotas

from .children import ChildLink
from .rows import NewApproval, NewCorrelation


class ActivityTaskOp(StrEnum):
    DONE = "done"  # the attempt's outcome is final: remove the task
    RETRY = "retry"  # make the task claimable again at `retry_at`


@dataclass(frozen=True, slots=True)
class NewActivityTask:
    step: str
    activity: str
    spec: dict[str, Any]
    timeout: float
    heartbeat_timeout: float | None
    owner: str | None = None  # leased to this owner at once (in-process dispatch)
    lease: float = 30.0
    attempts: int = 0  # attempts already made (a retried step's numbering goes on)


@dataclass(frozen=True, slots=True)
class NewTimer:
    step: str
    fire_at: float


@dataclass(frozen=True, slots=True)
class NewRun:
    tenant: str
    run_id: str
    workflow: str
    version: str
    input: Any
    ts: float
    started: NewEvent
    claim_owner: str | None = None
    lease: float = 30.0
    queue: str | None = None  # the workflow task's queue; "<workflow>@<version>" by default
    signals: Sequence[NewEvent] = ()  # appended after RunStarted (signal-with-start)
    priority: int = 0  # given to the run's tasks: claimed before the tenant's lower ones
    concurrency_key: str | None = None  # given to its activity tasks (a queue's per-key limit)
    dedup_id: str | None = None  # while a run with it is unfinished, a start finds that run
    # The engine's default quotas, with the tenant's overrides, admit it or refuse it (None: admit).
    quotas: Quotas | None = None
    processed_seq: int = 0  # the last event the code has seen (of a fork's copied history)
    parent: ChildLink | None = None  # a child run's parent run and step, and close policy
    named_queue: str | None = None  # a workflow queue: the run is enqueued until admitted


# == the effects ==================================================================
@dataclass(frozen=True, slots=True)
class SettleActivity:
    """A reported attempt's task done or set to retry, only if `fence` is still the
    task's fence (else the commit fails with `Conflict.ACTIVITY_FENCE`)."""

    step: str
    fence: int
    op: ActivityTaskOp
    retry_at: float | None = None
    heartbeat_details: str | None = None
    lapsed: bool = False  # the attempt lost its engine (its lease lapsed): counted on the task


@dataclass(frozen=True, slots=True)
class ScheduleActivities:
    """New attempts' tasks: leased at once to their `owner` when the tenant's limits leave
    room, else ready for a claim (`CommitResult.queued_steps` names those)."""

    tasks: Sequence[NewActivityTask]


@dataclass(frozen=True, slots=True)
class DropActivities:
    """Activity tasks removed whatever their state (a skipped step: a late result of its
    attempt is kept as audit)."""

    steps: Sequence[str]


@dataclass(frozen=True, slots=True)
class CancelActivities:
    """Activity steps cancelled: a task not yet leased is removed, a leased one is asked
    to cancel."""

    steps: Sequence[str]


@dataclass(frozen=True, slots=True)
class CancelTimers:
    steps: Sequence[str]


@dataclass(frozen=True, slots=True)
class StartTimers:
    """New timers, within the tenant's `Limits.max_pending_timers` (else the commit fails
    with `Conflict.TIMERS`)."""

    timers: Sequence[NewTimer]


@dataclass(frozen=True, slots=True)
class OpenApprovals:
    approvals: Sequence[NewApproval]


@dataclass(frozen=True, slots=True)
class CloseApprovals:
    closed: Sequence[tuple[str, str]]  # (approval_id, status)


@dataclass(frozen=True, slots=True)
class EscalateApprovals:
    escalated: Sequence[tuple[str, str]]  # (approval_id, group to add)


@dataclass(frozen=True, slots=True)
class CloseRunApprovals:
    """Every pending approval of the run closed with `status`, its credentials revoked."""

    status: str


@dataclass(frozen=True, slots=True)
class OpenCorrelations:
    """Correlated signal waits opened."""

    correlations: Sequence[NewCorrelation]


@dataclass(frozen=True, slots=True)
class WithdrawCorrelations:
    steps: Sequence[str]


@dataclass(frozen=True, slots=True)
class StartChildren:
    """Child runs created, each linked to the committing run (`NewRun.parent`)."""

    runs: Sequence[NewRun]


@dataclass(frozen=True, slots=True)
class ContinueAsNew:
    """The run's generation ends with this commit and the next begins: its RunStarted
    (the store adds `continued_from`: the ended generation's number, length and last
    hash) and the signals it inherits. The commit's snapshot is not a finished one."""

    input: Any
    started: NewEvent
    signals: Sequence[NewEvent] = ()
    generation: int = 2


@dataclass(frozen=True, slots=True)
class SetVersion:
    """The run now runs this version (a migration)."""

    version: str


@dataclass(frozen=True, slots=True)
class ReopenQueue:
    """A finished run's workflow task made again, on this queue (a retry)."""

    queue: str


@dataclass(frozen=True, slots=True)
class ResetLapses:
    """The run's tasks' lapses counted afresh (an operator resumed it)."""


RESET_LAPSES = ResetLapses()

Effect = (
    SettleActivity
    | ScheduleActivities
    | DropActivities
    | CancelActivities
    | CancelTimers
    | StartTimers
    | OpenApprovals
    | CloseApprovals
    | EscalateApprovals
    | CloseRunApprovals
    | OpenCorrelations
    | WithdrawCorrelations
    | StartChildren
    | ContinueAsNew
    | SetVersion
    | ReopenQueue
    | ResetLapses
)
