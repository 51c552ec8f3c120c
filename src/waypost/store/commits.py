"""The records of runs and of their commits: a run's row, one atomic change of a run
(`RunCommit`) and its result, the tasks and timers the store hands out, the workers.
`base.py` re-exports them with the Protocol that names them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from waypost.model.events import Event, NewEvent
from waypost.model.quotas import Quotas

from .effects import Effect
from .rows import ApprovalRecord

E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class RunRecord:
    """The snapshot row of a run."""

    tenant: str
    run_id: str
    workflow: str
    version: str
    status: str
    input: Any
    input_json: str
    result: Any
    error: dict[str, Any] | None
    waiting_for: list[dict[str, Any]]
    last_seq: int
    last_hash: str
    processed_seq: int
    created_at: float
    updated_at: float
    finished_at: float | None
    priority: int = 0
    history_bytes: int = 0  # bytes of JSON of its history's events' data (this generation)


@dataclass(frozen=True, slots=True)
class CreateRunResult:
    created: bool
    run: RunRecord
    workflow_fence: int | None = None


class WorkflowTaskOp(StrEnum):
    """What a commit does to the run's workflow task."""

    LEAVE = "leave"
    IDLE = "idle"  # nothing to do until an event wakes it
    WAKE = "wake"  # claimable now (unless someone holds a live lease)
    CLAIM = "claim"  # wake, and take the lease for `owner` if nobody holds it
    DELETE = "delete"
    DEFER = "defer"  # claimable again at `defer_until`: the run's decision waits for a quota


@dataclass(frozen=True, slots=True)
class Snapshot:
    status: str
    waiting_for: list[dict[str, Any]]
    processed_seq: int
    result: Any = None
    error: dict[str, Any] | None = None
    finished: bool = False
    # What the code has of the signals it received, as of `processed_seq` (a decision
    # knows; None keeps what is stored): those it holds unread, and the names it takes in
    # now (it waits for them or handles them). They bound what signals are admitted.
    unread_signals: int | None = None
    signal_names: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """The tenant's quotas a commit is held to (None: unlimited).

    An append after whatever is last is refused if the run has `max_pending_signals`
    signals its code has not taken in yet (Conflict.BACKLOG: a flood of signals must not
    bury the run's own progress; signals of a name the code takes in now count only while
    not yet processed, others count with those the code holds unread,
    `Snapshot.unread_signals`), or if it would take the history past `max_events`
    (HISTORY_FULL). New timers that would take the tenant past `max_pending_timers`
    refuse the commit (TIMERS); new activity tasks to lease at once beyond the tenant's
    `max_concurrent_activities` are queued instead (`CommitResult.queued_steps`). Events
    that would take the run's history past `max_run_bytes` (`history_bytes`) refuse the
    commit (HISTORY_BYTES); an append after whatever is last that would take the bytes of
    the tenant's live runs past `max_live_run_bytes` too (TENANT_BYTES).
    """

    max_pending_signals: int | None = None
    max_events: int | None = None
    max_pending_timers: int | None = None
    max_concurrent_activities: int | None = None
    max_run_bytes: int | None = None
    max_live_run_bytes: int | None = None

    @classmethod
    def of_signal(cls, quotas: Quotas | None, max_pending_signals: int | None) -> Limits:
        """What a signal appended from outside the run is held to under `quotas`."""
        if quotas is None:
            return cls(max_pending_signals=max_pending_signals)
        return cls(
            max_pending_signals=max_pending_signals,
            max_events=quotas.max_events_per_run,
            max_run_bytes=quotas.max_run_bytes,
            max_live_run_bytes=quotas.max_live_run_bytes,
        )


NO_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class RunCommit:
    """One atomic change of one run: a core and its effects.

    The core is what every commit has: the events and the conditions they are appended
    under, the snapshot, what becomes of the run's workflow task, the limits. `effects`
    are the other changes (store/effects.py), at most one of each kind, none empty; the
    store writes each with its one writer, in its own order.
    """

    tenant: str
    run_id: str
    events: Sequence[NewEvent]
    now: float
    # Append after this event (optimistic check); None appends after whatever is last.
    expect_seq: int | None = None
    expect_hash: str = ""
    require_active: bool = False
    snapshot: Snapshot | None = None
    workflow_fence: int | None = None
    workflow_op: WorkflowTaskOp = WorkflowTaskOp.LEAVE
    owner: str | None = None  # for WorkflowTaskOp.CLAIM (and a next generation's task)
    lease: float = 30.0
    claim_queues: frozenset[str] | None = None  # CLAIM only tasks of these queues
    defer_until: float | None = None  # for WorkflowTaskOp.DEFER
    limits: Limits = NO_LIMITS
    effects: tuple[Effect, ...] = ()
    # `time.monotonic()` when `now` was read: a commit that waits (for a connection, a
    # lock, a store that is away) is moved on by its wait when it lands (`on_time`).
    asked: float = field(default_factory=time.monotonic, compare=False, repr=False)

    def effect(self, kind: type[E]) -> E | None:
        """The commit's effect of this kind, if it has one."""
        for e in self.effects:
            if isinstance(e, kind):
                return e
        return None


class Conflict(StrEnum):
    RUN_NOT_FOUND = "run_not_found"
    RUN_FINISHED = "run_finished"
    SEQ = "seq"
    WORKFLOW_FENCE = "workflow_fence"
    ACTIVITY_FENCE = "activity_fence"
    BACKLOG = "backlog"  # the run has more signals waiting than the commit allows
    HISTORY_FULL = "history_full"  # the run's history has the most events its tenant allows
    TIMERS = "timers"  # the tenant has the most pending timers it may have
    HISTORY_BYTES = "history_bytes"  # the events would take the run past its max_run_bytes
    TENANT_BYTES = "tenant_bytes"  # ...the tenant's live runs past its max_live_run_bytes


@dataclass(frozen=True, slots=True)
class CommitResult:
    conflict: Conflict | None
    events: list[Event] = field(default_factory=list)
    prev_seq: int = 0
    last_seq: int = 0
    last_hash: str = ""
    status: str = ""
    workflow_fence: int | None = None  # set when the commit claimed the workflow task
    workflow_queue: str = ""
    # New activity tasks meant to be leased at once but queued: the tenant had its
    # `max_concurrent_activities` in flight.
    queued_steps: tuple[str, ...] = ()
    # The time the commit was made at: its `now`, moved on by any wait before it landed;
    # its new attempts' deadlines count from it.
    now: float = 0.0

    @property
    def ok(self) -> bool:
        return self.conflict is None


@dataclass(frozen=True, slots=True)
class ClaimedTask:
    """A task leased to the caller: the fence proves it in every later report."""

    kind: str
    tenant: str
    run_id: str
    step: str
    queue: str
    fence: int
    attempt: int
    spec: dict[str, Any] | None = None
    deadline: float | None = None
    heartbeat_deadline: float | None = None
    visible_at: float | None = None
    owner: str | None = None
    heartbeat_details: Any = None
    cancel_requested: bool = False
    lapses: int = 0  # how often its lease lapsed without the work getting through
    taken_over: bool = False  # claimed because its holder's lease lapsed


@dataclass(frozen=True, slots=True)
class TaskRef:
    """A task by its natural key, with the fence its holder was given."""

    tenant: str
    run_id: str
    kind: str
    step: str
    fence: int


@dataclass(frozen=True, slots=True)
class LeaseRenewal:
    task: TaskRef
    heartbeat_at: float | None = None
    heartbeat_details: str | None = None


@dataclass(frozen=True, slots=True)
class LeaseState:
    task: TaskRef
    held: bool
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class FiredTimer:
    tenant: str
    run_id: str
    step: str
    queue: str
    event: Event
    workflow_fence: int | None  # set when the firing claimed the workflow task
    due: float = 0.0  # when it was to fire (its lag is the firing's time minus this)


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    worker_id: str
    host: str
    pid: int
    queues: list[str]
    started_at: float
    heartbeat_at: float


# -- pages of runs and what is in motion for them -------------------------------------
@dataclass(frozen=True, slots=True)
class TaskState:
    """A run's task as it stands: what a reader needs to say what happens next."""

    run_id: str
    kind: str  # workflow | activity
    step: str
    queue: str
    state: str  # ready | leased | idle
    visible_at: float | None  # ready: claimable from; leased: the lease ends
    owner: str | None
    attempt: int
    deadline: float | None  # a leased attempt's start-to-close deadline


@dataclass(frozen=True, slots=True)
class RunOutlook:
    """What is in motion for one run: its tasks and its pending approvals."""

    tasks: list[TaskState] = field(default_factory=list)
    approvals: list[ApprovalRecord] = field(default_factory=list)


# -- signals from outside: signal-with-start, webhooks by correlation ------------------
@dataclass(frozen=True, slots=True)
class CorrelatedDelivery:
    """A webhook's signal for the runs of a tenant waiting for it with (key, value)."""

    tenant: str
    source: str
    delivery_id: str
    signal: str
    key: str
    value: str
    event: NewEvent  # the SignalReceived each run gets
    wake: RunCommit  # how each run's commit wakes it (its run_id and events are set per run)
    now: float
    keep_since: float  # the source's delivery ids received before this are forgotten
    max_runs: int


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """The runs delivered to; a `duplicate` id's first outcome; or nothing (`conflict`)."""

    duplicate: bool = False
    outcome: dict[str, Any] | None = None
    delivered: list[tuple[str, CommitResult]] = field(default_factory=list)
    conflict: Conflict | None = None
    run_id: str = ""
