"""What operations answer: runs, approvals and definitions as callers see them.

Plain, frozen values with no behaviour beyond simple derived properties; the
engine builds them from the store's rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from waypost.model.events import Event
from waypost.model.identity import Role
from waypost.model.status import RunStatus


@dataclass(frozen=True)
class RunInfo:
    """A run as it stands: its status, result or error, and what it waits for."""

    tenant: str
    run_id: str
    workflow: str
    version: str
    status: RunStatus
    input: Any
    result: Any
    error: dict[str, Any] | None
    waiting_for: list[dict[str, Any]]
    last_seq: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    next_action: dict[str, Any] | None = None
    """What happens next, in words and data: `kind` (workflow, activity, retry, timer,
    signal, approval, condition, child, no_worker, quota, suspended, paused), `detail` (plain words)
    and `at` (ISO time, when known); None once the run has ended."""
    priority: int = 0
    """Its tasks are claimed before the tenant's tasks of lower priority."""
    parent: dict[str, Any] | None = None
    """The run that started this one as a child: `run_id`, `step`, `close` (its policy)."""
    children: list[dict[str, Any]] | None = None
    """Child runs this run started, oldest first: `run_id`, `step`, `workflow`, `version`,
    `status`, `close`. Filled when one run is read (`get`), None in lists."""

    @property
    def finished(self) -> bool:
        return self.status.finished


@dataclass(frozen=True)
class ApprovalInfo:
    """An approval as the API shows it."""

    approval_id: str
    tenant: str
    run_id: str
    step: str
    name: str
    status: str
    policy: dict[str, Any]
    started_by: str | None
    data: Any
    expires_at: datetime | None
    created_at: datetime
    votes: list[dict[str, Any]]
    refusals: list[dict[str, Any]] = field(default_factory=list)
    """Refused decisions: principal, decision, reason, credential_id, auth, how many
    times (`count`), `first_at` and `last_at`. Each distinct principal and reason is
    kept up to a limit per approval; a last entry with no principal counts the rest."""


@dataclass(frozen=True)
class DecisionReceipt:
    """What a counted decision did: `outcome` is pending (more votes needed) or final."""

    approval_id: str
    run_id: str
    principal: str
    decision: str
    outcome: str


@dataclass(frozen=True)
class DefinitionInfo:
    """A published version of a workflow defined as data."""

    name: str
    version: int
    digest: str
    tenant: str
    published_at: datetime
    published_by: str | None
    body: dict[str, Any]
    source: str
    created: bool = False  # this publish made the version (False: identical content existed)
    warnings: tuple[str, ...] = ()
    """What may keep its runs waiting (activities no running worker serves), at publish."""


@dataclass(frozen=True)
class MigrationReport:
    """What `migrate` found (and did) for one run."""

    run_id: str
    tenant: str
    definition: str | None
    from_version: int | None
    to_version: int
    from_step: str | None
    to_step: str | None
    compatible: bool
    migrated: bool
    dry_run: bool
    reasons: list[str]
    """Why the run cannot be moved (empty when it can)."""
    notes: list[str]
    """What moving it does (approvals revoked or requested, waits started again)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # its fields in order, the lists copied


# == tenants and API keys ==============================================================
@dataclass(frozen=True)
class TenantInfo:
    """A tenant: API keys are made for tenants that exist.

    From `create_tenant` and `list_tenants`, `quotas` are the tenant's overrides as
    stored. From `get_tenant`, `quotas` are the effective quotas (every name: the
    engine's defaults with the overrides applied, None for unlimited), `overrides`
    the stored ones and `usage` what the tenant holds now (`running_runs`,
    `activities_in_flight`, `pending_timers`, `definitions`); `created_at` is None
    for a tenant that has runs but was never created (no API keys can be made for it).
    """

    tenant: str
    created_at: datetime | None
    created_by: str
    quotas: dict[str, Any]
    usage: dict[str, int] | None = None
    overrides: dict[str, Any] | None = None
    disabled_at: datetime | None = None  # disabled since then (`disable_tenant`)
    disabled_by: str | None = None

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None


@dataclass(frozen=True)
class TenantDeletion:
    """One batch of a tenant's deletion: the rows it removed by table, and whether the
    tenant is gone (`done`: its own row removed last, nothing of it left)."""

    tenant: str
    deleted: dict[str, int]
    done: bool

    @property
    def rows(self) -> int:
        return sum(self.deleted.values())


@dataclass(frozen=True)
class NewKey:
    """An API key just made: the only time its secret (`key`) can be read.

    `key` is what a client sends (`Authorization: Bearer <key>`); only its hash is
    stored, so it cannot be shown again. It is left out of the repr.
    """

    key_id: str
    key: str = field(repr=False)
    tenant: str
    principal: str
    roles: tuple[Role, ...]
    expires_at: datetime | None


@dataclass(frozen=True)
class KeyInfo:
    """An API key as an admin sees it: never its secret or its hash."""

    key_id: str
    tenant: str
    principal: str
    roles: tuple[Role, ...]
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    revoked_by: str | None = None


@dataclass(frozen=True)
class CredentialView:
    """What an approval link's credential may decide now: what the approval page shows.

    It never holds the token. `action` is what the credential decides ("approve"
    or "reject"), `approver` whose it is, `requested_by` who started the run (if
    known), `decisions` the decisions so far (`approver`, `decision`, `at`,
    `comment`), `status` the approval's (pending, or the token would not resolve).
    """

    tenant: str
    approval_id: str
    run_id: str
    step: str
    name: str
    action: str
    approver: str
    data: Any
    requested_by: str | None
    decisions: list[dict[str, Any]]
    expires_at: datetime | None
    status: str


# == runs for the HTTP API ===============================================================
@dataclass(frozen=True)
class Started:
    """A start's answer: the run's id, and whether this start created it (False: the
    same run, same workflow and input, existed already)."""

    run_id: str
    created: bool


@dataclass(frozen=True)
class RunPage:
    """One page of runs, newest first; `next_cursor` asks for the next (None: no more)."""

    runs: list[RunInfo]
    next_cursor: str | None


@dataclass(frozen=True)
class HistoryPage:
    """Part of a run's history, oldest first: the events after the `after_seq` asked for,
    at most `limit` of them and at most a page's bytes (always at least one, if any).
    `next_after` asks for the next page (None: this page reaches the history's end)."""

    events: list[Event]
    next_after: int | None


# == webhooks by correlation =============================================================
@dataclass(frozen=True)
class WebhookSourceInfo:
    """A webhook source as an admin sees it (never its secret): deliveries to
    `POST /v1/webhooks/{url_id}` (`url_path`) signal the tenant's runs waiting for
    `signal` with `correlate=(correlate_key, <the body's value at correlate_path>)`.
    `source` is the tenant's own id of it; `url_id` is random and unique across tenants
    (a source made before it existed has its id as its URL id)."""

    source: str
    tenant: str
    signal: str
    correlate_key: str
    correlate_path: str
    tolerance_seconds: int
    created_at: datetime
    created_by: str
    url_id: str = ""

    @property
    def url_path(self) -> str:
        """Where its sender POSTs: `/v1/webhooks/{url_id}`."""
        return f"/v1/webhooks/{self.url_id or self.source}"


@dataclass(frozen=True)
class NewWebhookSource(WebhookSourceInfo):
    """A source just created, with its signing secret (`whsec_...`, Standard Webhooks'
    form): shown this once by the answer (its repr leaves it out); the server keeps it to
    check signatures."""

    secret: str = field(default="", repr=False)


@dataclass(frozen=True)
class WebhookDelivered:
    """A webhook delivered: the runs it signalled. `duplicate`: the delivery id was
    delivered before, and this is what that first delivery answered (nothing was sent
    again)."""

    source: str
    delivery_id: str
    runs: tuple[str, ...]
    duplicate: bool = False


# == retention: purged runs ==============================================================
@dataclass(frozen=True)
class PurgeReport:
    """What a purge removed (or, with `dry_run`, would remove): finished runs whose
    `finished_at` is before `cutoff`, and their rows. Each purged run left a `PurgedRun`."""

    tenant: str
    cutoff: datetime
    dry_run: bool
    runs: int
    events: int
    tasks: int = 0
    timers: int = 0
    approvals: int = 0
    outbox: int = 0
    correlations: int = 0
    batches: int = 0


@dataclass(frozen=True)
class PurgedRun:
    """The audit summary a purged run leaves: its final status, times, and its chain's
    length (`last_seq`) and last hash (`last_hash`), as they were when it was purged."""

    tenant: str
    run_id: str
    workflow: str
    version: str
    status: RunStatus
    created_at: datetime
    finished_at: datetime | None
    last_seq: int
    last_hash: str
    purged_at: datetime
    purged_by: str
    reason: str
