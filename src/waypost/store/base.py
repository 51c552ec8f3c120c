"""The store Protocol: the domain verbs the engine needs from a database.

Every state change of a run goes through `commit_run`: one atomic
transaction that appends events (under a sequence check), writes the
snapshot, and adds or removes the run's tasks and timers. Its conditions
(the last sequence number, the workflow task's fence, the activity task's
fence) are what make stale workers and racing engines harmless: a failed
condition changes nothing and says which one failed.

Times are seconds since the epoch (floats) everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from waypost.model.events import Event, NewEvent


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


class ActivityTaskOp(StrEnum):
    DONE = "done"  # the attempt's outcome is final: remove the task
    RETRY = "retry"  # make the task claimable again at `retry_at`


@dataclass(frozen=True, slots=True)
class ActivityUpdate:
    """A reported attempt: applied only if `fence` is still the task's fence."""

    step: str
    fence: int
    op: ActivityTaskOp
    retry_at: float | None = None
    heartbeat_details: str | None = None


@dataclass(frozen=True, slots=True)
class NewActivityTask:
    step: str
    activity: str
    spec: dict[str, Any]
    timeout: float
    heartbeat_timeout: float | None
    owner: str | None = None  # leased to this owner at once (in-process dispatch)
    lease: float = 30.0


@dataclass(frozen=True, slots=True)
class NewTimer:
    step: str
    fire_at: float


@dataclass(frozen=True, slots=True)
class NewApproval:
    """An approval a workflow asked for; its notification goes to the outbox."""

    approval_id: str
    step: str
    timer_step: str | None
    name: str
    policy: dict[str, Any]
    started_by: str | None
    data: Any
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    tenant: str
    approval_id: str
    run_id: str
    step: str
    timer_step: str | None
    name: str
    policy: dict[str, Any]
    status: str
    started_by: str | None
    data: Any
    expires_at: float | None
    created_at: float
    closed_at: float | None


@dataclass(frozen=True, slots=True)
class CredentialRecord:
    tenant: str
    credential_id: str
    approval_id: str
    approver: str
    action: str
    secret_hash: str
    status: str
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class NewCredential:
    credential_id: str
    action: str
    secret_hash: str


@dataclass(frozen=True, slots=True)
class DecideRequest:
    """A decision whose credential and principal the engine has checked already."""

    tenant: str
    approval_id: str
    credential_id: str
    principal: str
    decision: str
    comment: str
    auth: str
    now: float
    eligible: int | None  # approvers who could vote, for policies without veto


@dataclass(frozen=True, slots=True)
class DecideResult:
    accepted: bool
    reason: str = ""  # why not, when not accepted
    outcome: str = ""  # pending / approved / rejected, when accepted
    run_id: str = ""
    seq: int = 0


@dataclass(frozen=True, slots=True)
class OutboxItem:
    id: str
    tenant: str
    kind: str
    payload: dict[str, Any]
    attempts: int


@dataclass(frozen=True, slots=True)
class DefinitionRecord:
    """One published, immutable version of a workflow defined as data."""

    tenant: str
    name: str
    version: int
    digest: str
    body: dict[str, Any]  # the canonical, validated definition
    source: str  # the text as published
    published_at: float
    published_by: str | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    status: str
    waiting_for: list[dict[str, Any]]
    processed_seq: int
    result: Any = None
    error: dict[str, Any] | None = None
    finished: bool = False


@dataclass(slots=True)
class RunCommit:
    """One atomic change of one run."""

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
    owner: str | None = None  # for WorkflowTaskOp.CLAIM
    lease: float = 30.0
    claim_queues: frozenset[str] | None = None  # CLAIM only tasks of these queues
    activity: ActivityUpdate | None = None
    new_activities: Sequence[NewActivityTask] = ()
    cancel_activities: Sequence[str] = ()
    new_timers: Sequence[NewTimer] = ()
    cancel_timers: Sequence[str] = ()
    new_approvals: Sequence[NewApproval] = ()
    close_approvals: Sequence[tuple[str, str]] = ()  # (approval_id, status)
    escalate_approvals: Sequence[tuple[str, str]] = ()  # (approval_id, group to add)
    close_run_approvals: str | None = None  # close every pending approval of the run (status)
    set_version: str | None = None  # the run now runs this version (a migration)


class Conflict(StrEnum):
    RUN_NOT_FOUND = "run_not_found"
    RUN_FINISHED = "run_finished"
    SEQ = "seq"
    WORKFLOW_FENCE = "workflow_fence"
    ACTIVITY_FENCE = "activity_fence"


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


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    worker_id: str
    host: str
    pid: int
    queues: list[str]
    started_at: float
    heartbeat_at: float


class Store(Protocol):
    """What the engine needs from a database; SQLite and PostgreSQL implement it."""

    url: str

    async def open(self) -> None:
        """Connect, and bring the schema up to date (safe when several processes start)."""
        ...

    async def close(self) -> None: ...

    async def create_run(self, new: NewRun) -> CreateRunResult:
        """Create a run with its first event and workflow task, or return the existing one."""
        ...

    async def commit_run(self, commit: RunCommit) -> CommitResult:
        """Apply one atomic change to a run, or nothing if a condition fails."""
        ...

    async def claim_tasks(
        self,
        owner: str,
        workflow_queues: Sequence[str],
        activity_queues: Sequence[str],
        workflow_limit: int,
        activity_limit: int,
        lease: float,
        now: float,
    ) -> list[ClaimedTask]:
        """Lease due tasks of these queues to `owner` (fence + 1 each), up to the limits."""
        ...

    async def renew_leases(
        self, owner: str, renewals: Sequence[LeaseRenewal], lease: float, now: float
    ) -> list[LeaseState]:
        """Extend leases the caller still holds; report lost ones and cancel requests."""
        ...

    async def release_tasks(self, owner: str, tasks: Sequence[TaskRef], now: float) -> None:
        """Give back leased tasks that were never started, so others take them at once."""
        ...

    async def expired_activities(self, now: float, limit: int) -> list[ClaimedTask]:
        """Leased activity tasks past their lease, deadline or heartbeat deadline."""
        ...

    async def fire_due_timers(
        self, now: float, limit: int, owner: str | None, queues: Sequence[str], lease: float
    ) -> list[FiredTimer]:
        """Fire due timers once each: mark fired, append TimerFired, wake the run.

        A workflow task whose queue is in `queues` is claimed for `owner`.
        """
        ...

    async def next_timer_at(self) -> float | None: ...

    async def get_run(self, tenant: str, run_id: str) -> RunRecord | None: ...

    async def load_history(self, tenant: str, run_id: str, after_seq: int = 0) -> list[Event]: ...

    async def list_runs(
        self,
        tenant: str | None = None,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]: ...

    async def run_tasks(self, tenant: str, run_id: str) -> list[ClaimedTask]:
        """The run's open tasks (for inspection and tests)."""
        ...

    async def load_run(
        self, tenant: str, run_id: str, after_seq: int = 0
    ) -> tuple[RunRecord | None, list[Event]]:
        """The run's snapshot and its events after `after_seq`, read together."""
        ...

    async def beat_worker(self, worker: WorkerRecord) -> None: ...

    async def remove_worker(self, worker_id: str) -> None: ...

    async def live_workers(self, since: float) -> list[WorkerRecord]: ...

    # -- approvals, the directory and the outbox --------------------------------
    async def get_approval(self, tenant: str, approval_id: str) -> ApprovalRecord | None: ...

    async def list_approvals(
        self,
        tenant: str | None,
        status: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
    ) -> list[ApprovalRecord]: ...

    async def get_credential(self, tenant: str, credential_id: str) -> CredentialRecord | None: ...

    async def approval_votes(self, tenant: str, approval_id: str) -> list[dict[str, Any]]: ...

    async def decide_approval(self, request: DecideRequest) -> DecideResult:
        """Consume the credential and count the vote, or nothing if a condition fails."""
        ...

    async def change_approvers(
        self,
        tenant: str,
        approval_id: str,
        policy: dict[str, Any],
        revoke: str | None,
        notify: str | None,
        event: NewEvent,
        now: float,
    ) -> bool:
        """Set a pending approval's policy, revoke one approver's credentials, notify one."""
        ...

    async def issue_credentials(
        self,
        tenant: str,
        approval_id: str,
        approver: str,
        credentials: Sequence[NewCredential],
        now: float,
    ) -> ApprovalRecord | None:
        """Store credential hashes for a pending approval; None if it is not pending."""
        ...

    async def add_outbox(self, items: Sequence[OutboxItem], now: float) -> None: ...

    async def claim_outbox(
        self, owner: str, now: float, limit: int, lease: float
    ) -> list[OutboxItem]: ...

    async def finish_outbox(
        self, item_id: str, owner: str, now: float, error: str | None, retry_at: float | None
    ) -> None:
        """Sent (error None), to retry at `retry_at`, or given up (retry_at None)."""
        ...

    async def group_members(self, tenant: str, group: str) -> list[str]: ...

    async def list_groups(self, tenant: str) -> dict[str, list[str]]: ...

    async def add_group_members(
        self, tenant: str, group: str, principals: Sequence[str], now: float
    ) -> int: ...

    async def remove_group_members(
        self, tenant: str, group: str, principals: Sequence[str]
    ) -> int: ...

    # -- definitions -------------------------------------------------------------
    async def publish_definition(
        self,
        tenant: str,
        name: str,
        digest: str,
        body: dict[str, Any],
        source: str,
        by: str | None,
        now: float,
    ) -> tuple[DefinitionRecord, bool]:
        """The version with this digest, created as the next version if new (and whether)."""
        ...

    async def get_definition(
        self, tenant: str, name: str, version: int | None = None
    ) -> DefinitionRecord | None:
        """A version of a definition; the newest without `version`."""
        ...

    async def list_definitions(self, tenant: str) -> list[DefinitionRecord]: ...

    async def listen(self, on_notify: Callable[[str], None]) -> None:
        """Call `on_notify(topic)` when another process has work for this one.

        Runs until cancelled; returns at once if the database cannot notify
        (then polling finds the work). Topics: "tasks", "timers", and
        "reconnected" after a lost connection came back.
        """
        ...
