"""The store Protocol: the domain verbs the engine needs from a database.

Every state change of a run goes through `commit_run`: one atomic transaction that
appends events (under a sequence check), writes the snapshot, and adds or removes the
run's tasks and timers. Its conditions (the last sequence number, the workflow task's
fence, the activity task's fence) are what make stale workers and racing engines
harmless: a failed condition changes nothing and says which one failed.

Times are seconds since the epoch (floats) everywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from waypost.model.chain import Chain
from waypost.model.encryption import Keys
from waypost.model.events import Event, NewEvent
from waypost.model.quotas import Quotas

from .accounts import AccountStore
from .audits import AuditStore, LegacySeal as LegacySeal, RunAudit as RunAudit
from .children import ChildLink as ChildLink, ChildStore
from .effects import (
    ActivityTaskOp as ActivityTaskOp,
    Effect,
    NewActivityTask as NewActivityTask,
    NewRun as NewRun,
    NewTimer as NewTimer,
)
from .queues import QueueStore
from .rows import (
    ApiKeyRecord as ApiKeyRecord,
    ApprovalRecord as ApprovalRecord,
    ApproverChange as ApproverChange,
    CredentialLookup as CredentialLookup,
    CredentialRecord as CredentialRecord,
    DecideRequest as DecideRequest,
    DecideResult as DecideResult,
    DefinitionRecord as DefinitionRecord,
    KeyCreation as KeyCreation,
    NewApiKey as NewApiKey,
    NewApproval as NewApproval,
    NewCorrelation as NewCorrelation,
    NewCredential as NewCredential,
    OutboxItem as OutboxItem,
    PurgeCounts as PurgeCounts,
    PurgedRunRecord as PurgedRunRecord,
    QueueGauge as QueueGauge,
    Refusal as Refusal,
    ResealCounts as ResealCounts,
    RunCount as RunCount,
    TenantRecord as TenantRecord,
)
from .schedules import ScheduleStore
from .tenants import TenantStore
from .webhooks import WebhookSourceRecord as WebhookSourceRecord, WebhookStore

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


class Store(
    AccountStore,
    ScheduleStore,
    ChildStore,
    QueueStore,
    AuditStore,
    WebhookStore,
    TenantStore,
    Protocol,
):
    """What the engine needs from a database; SQLite and PostgreSQL implement it."""

    url: str

    @property
    def chain(self) -> Chain:
        """How the events this store appends are hashed (plain unless `use_chain` was called)."""
        ...

    def use_chain(self, chain: Chain) -> None:
        """Hash appended events with `chain` (keyed or plain); called before `open`."""
        ...

    @property
    def keys(self) -> Keys | None:
        """What payloads are encrypted with (None: stored as plaintext)."""
        ...

    def use_keys(self, keys: Keys | None) -> None:
        """Encrypt the payloads written from now on with `keys`; called before `open`."""
        ...

    def use_idle_probe(self, nearly_idle: Callable[[], bool]) -> None:
        """Ask `nearly_idle()` whether the engine using this store has next to nothing in
        hand: a write with nothing to be grouped with may then run at once."""
        ...

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
        quotas: Quotas | None = None,
        after_tenant: str = "",
        lapsed: bool = True,
        asked: float | None = None,
    ) -> list[ClaimedTask]:
        """Lease due tasks of these queues to `owner` (fence + 1 each), up to the limits.

        Fair across tenants: each tenant with ready tasks gets a share, starting after
        `after_tenant` (the one served last), and a tenant's tasks go by priority, then
        oldest first. A tenant with its `max_concurrent_activities` (the `quotas`
        defaults with its overrides) in flight gets no activity task. With `lapsed`,
        workflow tasks whose lease lapsed (a crashed engine's) are claimed first.
        `asked`: `time.monotonic()` when `now` was read; a claim that waited is made at
        the time it lands (leases and deadlines count from then).
        """
        ...

    async def renew_leases(
        self,
        owner: str,
        renewals: Sequence[LeaseRenewal],
        lease: float,
        now: float,
        asked: float | None = None,
    ) -> list[LeaseState]:
        """Extend leases the caller still holds (from the time the renewal lands, as
        `claim_tasks`); report lost ones and cancel requests."""
        ...

    async def release_tasks(self, owner: str, tasks: Sequence[TaskRef], now: float) -> None:
        """Give back leased tasks that were never started, so others take them at once."""
        ...

    async def retime_activity(
        self, owner: str, task: TaskRef, lease: float, now: float, asked: float | None = None
    ) -> float | None:
        """Time again from now an attempt leased by a write that landed late (its lease,
        deadlines; `store/landing.py`): its new deadline, or None if it is not held."""
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

    async def get_run(self, tenant: str, run_id: str, checked: bool = True) -> RunRecord | None:
        """The run's row; `BrokenRecord` if it fails its checks, unless not `checked`
        (what suspends such a run reads it anyway)."""
        ...

    async def load_history(self, tenant: str, run_id: str, after_seq: int = 0) -> list[Event]: ...

    async def history_page(
        self, tenant: str, run_id: str, after_seq: int, limit: int, max_bytes: int
    ) -> tuple[bool, list[Event], bool]:
        """Whether the run exists; its events after `after_seq`, at most `limit` of them
        and at most `max_bytes` of their data (one at least); whether more follow."""
        ...

    async def list_runs(
        self,
        tenant: str | None = None,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
        max_bytes: int | None = None,
    ) -> list[RunRecord]:
        """Up to `limit` runs (every tenant's if `tenant` is None), newest first; with
        `max_bytes`, no more than that of their stored payloads (one run at least), the
        runs left out never read."""
        ...

    async def run_tasks(self, tenant: str, run_id: str) -> list[ClaimedTask]:
        """The run's open tasks (for inspection and tests)."""
        ...

    async def load_run(
        self, tenant: str, run_id: str, after_seq: int = 0
    ) -> tuple[RunRecord | None, list[Event]]:
        """The run's snapshot and its events after `after_seq`, read together."""
        ...

    async def load_idle_run(
        self, tenant: str, run_id: str, queues: Sequence[str]
    ) -> tuple[RunRecord | None, list[Event], int | None]:
        """`load_run`, and the fence of the run's workflow task if it is idle and in one
        of `queues` (else None), read together: a decision made on this history under
        that fence commits only if nobody took the task meanwhile."""
        ...

    async def beat_worker(self, worker: WorkerRecord) -> None: ...

    async def remove_worker(self, worker_id: str) -> None: ...

    async def release_owner(self, worker_id: str, now: float) -> int:
        """A dead engine's leased tasks become due now and its worker row goes; how many."""
        ...

    async def live_workers(self, since: float) -> list[WorkerRecord]: ...

    # -- pages of runs and what is in motion for them ---------------------------------
    async def page_runs(
        self,
        tenant: str,
        status: str | None,
        workflow: str | None,
        after: tuple[float, str] | None,
        limit: int,
        max_bytes: int | None,
        version: str | None = None,
    ) -> tuple[list[RunRecord], bool]:
        """Up to `limit` of the tenant's runs, newest first (by created_at, then run_id),
        after the position `after` (or from the newest), and no more than `max_bytes` of
        their stored payloads (one run at least); whether more follow. Read through an
        index, the sizes first: the runs a page leaves out are never read."""
        ...

    async def search_runs(
        self, tenant: str, text: str, limit: int, max_bytes: int | None = None
    ) -> list[RunRecord]:
        """The run of id `text`, runs whose id starts with it, runs waiting with it as a
        correlation value: up to `limit`, newest first, and no more than `max_bytes` of
        their stored payloads (one run at least)."""
        ...

    async def count_runs(self, tenant: str) -> dict[str, int]: ...

    async def run_outlooks(self, tenant: str, run_ids: Sequence[str]) -> dict[str, RunOutlook]:
        """The tasks and pending approvals of some of the tenant's runs, by run id."""
        ...

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

    async def look_up_credential(self, credential_id: str) -> CredentialLookup | None:
        """A credential by its id alone, whatever its tenant, with its approval; changes nothing.

        For the approval page, where a token is all the caller has: the secret
        check that follows is what authorises. One read: the credential, its
        approval and votes, whether the expiry timer fired, the database's clock.
        """
        ...

    async def decide_approval(self, request: DecideRequest) -> DecideResult:
        """Consume the credential and count the vote, or nothing if a condition fails."""
        ...

    async def record_refusal(self, refusal: Refusal) -> bool:
        """Count a refused decision; True if it also became an event of the run's history."""
        ...

    async def approval_refusals(self, tenant: str, approval_id: str) -> list[dict[str, Any]]:
        """The refused decisions kept for an approval, with how often each happened."""
        ...

    async def change_approvers(self, change: ApproverChange) -> bool:
        """Revoke one approver of a pending approval and/or add one (who is notified).

        The new policy is made from the one locked in the transaction, so changes
        made at once are all kept; False if the approval is not pending.
        """
        ...

    async def issue_credentials(
        self,
        tenant: str,
        approval_id: str,
        approver: str,
        credentials: Sequence[NewCredential],
        now: float,
    ) -> ApprovalRecord | None:
        """Store credential hashes for a pending approval; None if it is not pending.

        The approver's credentials issued before on this approval stop working.
        """
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
        self, tenant: str, group: str, principals: Sequence[str], now: float
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
        quotas: Quotas | None = None,
    ) -> tuple[DefinitionRecord, bool]:
        """The version with this digest, created as the next version if new (and whether);
        a new version over the tenant's `max_definitions` raises `QuotaExceeded`."""
        ...

    async def get_definition(
        self, tenant: str, name: str, version: int | None = None
    ) -> DefinitionRecord | None:
        """A version of a definition; the newest without `version`."""
        ...

    async def list_definitions(
        self, tenant: str, name: str | None = None
    ) -> list[DefinitionRecord]: ...

    # -- tenants and API keys ----------------------------------------------------
    async def create_tenant(
        self, tenant: str, quotas: Mapping[str, Any], by: str, now: float
    ) -> bool:
        """Create a tenant; False (and nothing written) if it exists already."""
        ...

    async def list_tenants(self) -> list[TenantRecord]: ...

    async def create_api_key(
        self, key: NewApiKey, quotas: Quotas | None = None, *, distinct: bool = False
    ) -> KeyCreation:
        """Store a key of a tenant that exists (nothing written unless CREATED). Under
        `quotas`, one over `max_api_keys` is `QuotaExceeded`. With `distinct`,
        `IdentityTaken` (nothing written) if the key's principal is already a user, a
        key's principal, a group member or a pending approval's approver."""
        ...

    async def list_api_keys(self, tenant: str) -> list[ApiKeyRecord]: ...

    async def revoke_api_key(self, tenant: str, key_id: str, by: str, now: float) -> bool:
        """Revoke a key of `tenant` (a revoked one stays as it was); False if it has none."""
        ...

    async def api_key_to_authenticate(self, key_id: str) -> tuple[ApiKeyRecord | None, float]:
        """The key with this id, if its tenant exists, and the database's clock.

        The one read not scoped by a tenant: it is how a key's tenant is learnt.
        """
        ...

    async def touch_api_key(self, tenant: str, key_id: str, now: float, every: float) -> None:
        """Record that a key was used at `now`, unless it was in the last `every` seconds."""
        ...

    # -- signals from outside: signal-with-start, webhooks by correlation ------------
    async def signal_with_start(
        self, new: NewRun, signal: RunCommit
    ) -> tuple[CreateRunResult, CommitResult | None]:
        """Create the run with its signal, or commit `signal` to the run of its id (None: that
        run is of another workflow, and nothing was written), in one transaction."""
        ...

    async def deliver_correlated(self, delivery: CorrelatedDelivery) -> DeliveryResult:
        """Signal every run waiting with the delivery's (key, value), keeping its id; a kept
        id delivers nothing again. Nothing is written if no run waits or one refuses."""

    # -- quotas ---------------------------------------------------------------------
    async def tenant_state(self, tenant: str) -> tuple[TenantRecord | None, dict[str, int]]:
        """The tenant's row (None if never created) and what it holds now: running_runs,
        activities_in_flight, pending_timers, definitions."""
        ...

    async def tenant_quotas(self, tenant: str) -> dict[str, Any]:
        """The tenant's stored quota overrides (none without a row)."""
        ...

    async def set_quotas(self, tenant: str, changes: Mapping[str, Any]) -> TenantRecord | None:
        """Apply checked quota changes to an existing tenant; None if there is none."""
        ...

    # -- retention: purged runs -------------------------------------------------------
    async def purge_runs(
        self, tenant: str, cutoff: float, limit: int, now: float, by: str, reason: str
    ) -> PurgeCounts:
        """Purge up to `limit` of the tenant's runs that finished before `cutoff`, oldest
        first, in one transaction: each leaves its summary in `purged_runs`, and its
        events, tasks, timers, correlations, approvals (with their credentials, votes,
        refusals and outbox messages) and row are deleted."""
        ...

    async def count_purgeable(self, tenant: str, cutoff: float, limit: int) -> PurgeCounts:
        """How many runs (up to `limit`) and events `purge_runs` would purge; writes nothing."""
        ...

    async def get_purged_run(self, tenant: str, run_id: str) -> PurgedRunRecord | None: ...

    async def finished_run_tenants(self, after: str, limit: int) -> list[str]:
        """Up to `limit` tenants after `after` (in order) that have finished runs."""
        ...

    async def list_purged_runs(self, tenant: str, limit: int) -> list[PurgedRunRecord]:
        """The tenant's purged runs, most recently purged first."""
        ...

    # -- payload encryption -----------------------------------------------------------
    async def run_ids_after(self, tenant: str, after: str, limit: int) -> list[str]:
        """Up to `limit` of the tenant's run ids that sort after `after`, in order."""
        ...

    async def reencrypt_run(self, tenant: str, run_id: str, dry_run: bool) -> ResealCounts | None:
        """Re-encrypt the run's stored payloads under the current key, in one transaction
        (None: no such run); `dry_run` counts and writes nothing."""
        ...

    # -- gauges for metrics, across tenants (operators' counts, no run's data) ---------
    async def run_counts(self) -> list[RunCount]:
        """How many runs each tenant has of each workflow in each status."""
        ...

    async def queue_gauges(self, now: float) -> list[QueueGauge]:
        """Tasks due by `now` that nobody holds, by tenant, queue and kind."""
        ...

    async def listen(self, on_notify: Callable[[str], None]) -> None:
        """Call `on_notify(topic)` when another process has work for this one.

        Runs until cancelled; returns at once if the database cannot notify
        (then polling finds the work). Topics: "tasks", "timers", and
        "reconnected" after a lost connection came back.
        """
        ...
