"""Rows the store reads and writes beside runs: approvals and their credentials, the
directory's changes, the outbox, definitions, tenants and API keys.

Plain frozen records; `waypost.store.base` re-exports them with its Protocol.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


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
class NewCorrelation:
    """A signal wait made findable by (key, value) while it waits (CorrelationRegistered)."""

    step: str
    signal: str
    key: str
    value: str


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
    """A decision whose credential secret the engine has checked already.

    Who may decide is judged in the transaction that counts the vote, from the
    approval's policy as it is then. `members` is what a host application's
    directory says each of the policy's groups holds (asked just before); None
    means the built-in directory, read in that transaction.
    """

    tenant: str
    approval_id: str
    credential_id: str | None  # None: the principal decides as itself, signed in with no token
    principal: str
    decision: str
    comment: str
    auth: str
    now: float
    members: Mapping[str, Sequence[str]] | None = None
    # The credential that authenticated the caller ("key:<id>", "user:<name>",
    # "link:<credential id>", "local:<name>"), kept with the vote and in the history.
    authenticated_by: str = ""


@dataclass(frozen=True, slots=True)
class DecideResult:
    accepted: bool
    reason: str = ""  # why not, when not accepted
    outcome: str = ""  # pending / approved / rejected, when accepted
    run_id: str = ""
    seq: int = 0
    # Not accepted, but the credential was good: this principal may not decide (now).
    principal_refused: bool = False
    # Not accepted: the policy names a group `members` does not cover (it changed); ask again.
    stale: bool = False


@dataclass(frozen=True, slots=True)
class CredentialLookup:
    """A credential found by its id alone, with its approval as it stood in the same read."""

    credential: CredentialRecord
    approval: ApprovalRecord | None
    votes: list[dict[str, Any]]
    timer_fired: bool  # the approval's expiry timer has fired
    clock: float  # the database's time when it was read


@dataclass(frozen=True, slots=True)
class ApproverChange:
    """An operator's change of who may decide on a pending approval (revoke, reassign)."""

    tenant: str
    approval_id: str
    revoke: str | None  # taken off the approval; their credentials die
    add: str | None  # allowed as a named approver, and notified
    by: str
    reason: str
    now: float


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused decision, as the audit keeps it (every field bounded by the door)."""

    tenant: str
    approval_id: str
    principal: str
    decision: str
    reason: str
    credential_id: str | None  # None when the token was malformed
    auth: str
    at: float
    authenticated_by: str = ""  # as `DecideRequest.authenticated_by`


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
class TenantRecord:
    tenant: str
    created_at: float
    created_by: str
    quotas: dict[str, Any]
    disabled_at: float | None = None
    disabled_by: str | None = None


@dataclass(frozen=True, slots=True)
class NewApiKey:
    """An API key to store: its secret is not here, only the secret's hash."""

    key_id: str
    tenant: str
    principal: str
    roles: tuple[str, ...]
    secret_hash: str
    created_by: str
    expires_at: float | None
    now: float


class KeyCreation(StrEnum):
    CREATED = "created"
    NO_TENANT = "no_tenant"  # the tenant does not exist (create it first)
    DUPLICATE_ID = "duplicate_id"  # another key has this id: draw another


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    key_id: str
    tenant: str
    principal: str
    roles: tuple[str, ...]
    secret_hash: str
    created_at: float
    created_by: str
    expires_at: float | None
    revoked_at: float | None
    revoked_by: str | None
    last_used_at: float | None
    tenant_disabled_at: float | None = None  # read with the key when it authenticates


@dataclass(frozen=True, slots=True)
class RunCount:
    """How many runs of a tenant's workflow are in one status."""

    tenant: str
    workflow: str
    status: str
    runs: int


@dataclass(frozen=True, slots=True)
class QueueGauge:
    """A tenant's queue of one kind of task: how many are due and unclaimed, and since when
    the oldest of them is due."""

    tenant: str
    queue: str
    kind: str
    depth: int
    oldest_visible_at: float


# -- retention: purged runs ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PurgeCounts:
    """What one purge (or its dry run) removed, or would remove: runs and their rows."""

    runs: int = 0
    events: int = 0
    tasks: int = 0
    timers: int = 0
    approvals: int = 0
    outbox: int = 0
    correlations: int = 0


@dataclass(frozen=True, slots=True)
class PurgedRunRecord:
    """The summary a purged run leaves: its chain's length and last hash among it."""

    tenant: str
    run_id: str
    workflow: str
    version: str
    status: str
    created_at: float
    finished_at: float | None
    last_seq: int
    last_hash: str
    purged_at: float
    purged_by: str
    reason: str


@dataclass(frozen=True, slots=True)
class ResealCounts:
    """The payloads of one run re-encryption found, and how many it (would) re-seal."""

    values: int
    resealed: int
