"""Every public operation as a typed request: what it takes, who may ask, how it is bounded.

A request is a frozen dataclass. Its class says which roles may send it
(`roles`; `admin` may send anything) and what it answers (`Request[T]`). Each
field that carries outside input names its check in the field's metadata;
`Request.checked(principal)` applies them all (ids exact and bounded,
identities in their normal form, texts bounded, counts in range) and returns
the request as the engine will see it, or raises `InvalidRequest` /
`PermissionDenied`. The one door (`waypost.client.door`) calls it once for
every operation, whoever the caller is; nothing below the door checks again.

Fields that name a person acting (`by`, the approver who decides, who started
a run) must name the caller itself unless the caller is a local principal (the
embedded API and the CLI), which may act for anyone in its tenant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from waypost.errors import InvalidRequest, PermissionDenied
from waypost.model.identity import (
    Principal,
    Role,
    check_id,
    preview,
)
from waypost.model.numbers import whole_number
from waypost.model.operations_approvals import (
    AddToGroup as AddToGroup,
    Decide as Decide,
    GetApproval as GetApproval,
    ListApprovals as ListApprovals,
    ListGroups as ListGroups,
    Reassign as Reassign,
    RemoveFromGroup as RemoveFromGroup,
    Revoke as Revoke,
)
from waypost.model.operations_definitions import (
    GetDefinition as GetDefinition,
    ListDefinitions as ListDefinitions,
    Migrate as Migrate,
    MigrateAll as MigrateAll,
    Publish as Publish,
)
from waypost.model.operations_encryption import (
    ReEncrypt as ReEncrypt,
    ReEncryptReport as ReEncryptReport,
)
from waypost.model.operations_fork import Fork as Fork
from waypost.model.operations_repair import (
    REPAIR_OPERATIONS,
    Retry as Retry,
    Skip as Skip,
    UpdateInput as UpdateInput,
)
from waypost.model.operations_runs import (
    RUN_PAGE_OPERATIONS,
    CountRuns as CountRuns,
    PageHistory as PageHistory,
    PageRuns as PageRuns,
    RunDataAt as RunDataAt,
    SearchRuns as SearchRuns,
    check_status,
)
from waypost.model.operations_sealing import (
    SealLegacy as SealLegacy,
    SealLegacyReport as SealLegacyReport,
)
from waypost.model.operations_start import (
    MAX_PRIORITY as MAX_PRIORITY,
    StartFields as StartFields,
    check_priority as check_priority,
    run_timeout_seconds as run_timeout_seconds,
)
from waypost.model.operations_tenants import (
    TENANT_OPERATIONS,
    DeleteTenant as DeleteTenant,
    DisableTenant as DisableTenant,
    EnableTenant as EnableTenant,
    PlatformCommand,
    TenantCommand,
)
from waypost.model.operations_updates import (
    UPDATE_OPERATIONS,
    Query as Query,
    Update as Update,
    UpdateAnswer as UpdateAnswer,
)
from waypost.model.operations_users import (
    USER_OPERATIONS,
    CreateUser as CreateUser,
    DisableUser as DisableUser,
    ListUsers as ListUsers,
    ResolveSession as ResolveSession,
    SetPassword as SetPassword,
    SignIn as SignIn,
    SignOut as SignOut,
)
from waypost.model.quotas import check_overrides
from waypost.model.records import Started
from waypost.model.requests import (
    APPROVAL_READERS as APPROVAL_READERS,
    MAX_LIMIT as MAX_LIMIT,
    MAX_MAPPING as MAX_MAPPING,
    MAX_MEMBERS as MAX_MEMBERS,
    MAX_TOKEN as MAX_TOKEN,
    MAX_VERSION as MAX_VERSION,
    PLATFORM_ONLY,
    READERS as READERS,
    REMOTE_LATER,
    TOKENLESS_AUTH as TOKENLESS_AUTH,
    Check as Check,
    Cli,
    Form,
    Http,
    NotOffered,
    Request as Request,
    RunCommand,
    RunRequest,
    acting as acting,
    check_flag,
    check_roles as check_roles,
    checked as checked,
    command_cli,
    command_route,
)
from waypost.model.schedules import (
    SCHEDULE_OPERATIONS,
    BackfillSchedule as BackfillSchedule,
    CreateSchedule as CreateSchedule,
    DeleteSchedule as DeleteSchedule,
    GetSchedule as GetSchedule,
    ListSchedules as ListSchedules,
    PauseSchedule as PauseSchedule,
    ResumeSchedule as ResumeSchedule,
    TriggerSchedule as TriggerSchedule,
)
from waypost.model.status import RunStatus

T = TypeVar("T")


# == runs ==============================================================================
@dataclass(frozen=True)
class Start(StartFields, Request[str]):
    """Start a run of a workflow (a `@workflow` function or a name); answers its run id."""

    roles = frozenset({Role.STARTER, Role.OPERATOR})
    name = "start"
    call = "start"
    http = NotOffered("over HTTP a run is started by StartRun (POST /v1/runs)")
    cli = Cli("start")

    def checked(self, principal: Principal) -> Request[str]:
        self.check_start()
        return super().checked(principal)


@dataclass(frozen=True)
class Signal(RunRequest[None]):
    """Deliver a signal to a run."""

    roles = frozenset({Role.STARTER, Role.OPERATOR})
    name = "signal"
    call = "signal"
    http = Http("POST", "/v1/runs/{run_id:id}/signals/{name:id}", status=202)
    cli = Cli("signal")
    signal: str = checked(Check.ID, what="signal name")
    payload: Any = None


@dataclass(frozen=True)
class Cancel(RunCommand):
    """Ask a run to stop."""

    name = call = "cancel"
    http = command_route("cancel", "Ask a run to stop; it ends `cancelled`.")
    cli = Cli("cancel")
    form = Form("Cancel", danger=True)


@dataclass(frozen=True)
class GetRun(RunRequest[Any]):
    """One run as it stands (`RunInfo`)."""

    roles = READERS
    name = "get"
    call = "get"
    http = Http("GET", "/v1/runs/{run_id:id}")
    cli = Cli("runs show")


@dataclass(frozen=True)
class ListRuns(Request[Any]):
    """Runs, newest first (`list[RunInfo]`); `all_tenants` for local callers only."""

    roles = READERS
    name = "list runs"
    call = "list_runs"
    http = NotOffered("over HTTP runs are read in pages: PageRuns")
    cli = Cli("runs list")
    status: str | RunStatus | None = None
    workflow: str | None = checked(Check.OPTIONAL_ID, what="workflow", default=None)
    limit: int = checked(Check.LIMIT, default=100)
    all_tenants: bool = False
    cursor: str | None = checked(Check.CURSOR, default=None)

    def checked(self, principal: Principal) -> Request[Any]:
        if self.all_tenants and not principal.local:
            raise PermissionDenied("only the embedded API may list every tenant's runs")
        if self.all_tenants and self.cursor is not None:
            raise InvalidRequest(
                "a cursor pages one tenant's runs, not all_tenants", field="cursor"
            )
        check_status(self.status)
        return super().checked(principal)


@dataclass(frozen=True)
class GetHistory(RunRequest[Any]):
    """A run's history (`list[Event]`)."""

    roles = READERS
    name = "history"
    call = "history"
    http = NotOffered("over HTTP a history is read in pages: PageHistory")
    cli = Cli("runs show")


@dataclass(frozen=True)
class Verify(RunRequest[Any]):
    """Problems in a run's hash chain (`list[ChainProblem]`, empty when intact)."""

    roles = frozenset({Role.AUDITOR, Role.OPERATOR, Role.VIEWER})
    name = "verify"
    call = "verify"
    http = Http("GET", "/v1/runs/{run_id:id}/verify")
    cli = Cli("runs verify")


@dataclass(frozen=True)
class AwaitResult(RunRequest[Any]):
    """Wait for a run to end; answer its result or raise its error."""

    roles = READERS
    name = "result"
    call = "result"
    http = Http("GET", "/v1/runs/{run_id:id}/result")
    cli = NotOffered(
        "waiting for a result is a program's; `waypost runs show` prints a finished run's"
    )
    timeout: float | None = None

    def checked(self, principal: Principal) -> Request[Any]:
        if self.timeout is not None and (
            isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float)
        ):
            raise InvalidRequest(
                f"timeout must be seconds, not {preview(self.timeout)}", field="timeout"
            )
        return super().checked(principal)


# == tenants and keys ==================================================================
MAX_QUOTAS = 50


def _check_quotas(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequest("quotas must map quota names to whole numbers", field="quotas")
    if len(value) > MAX_QUOTAS:
        raise InvalidRequest(f"quotas: {len(value)} entries, at most {MAX_QUOTAS}", field="quotas")
    out: dict[str, int] = {}
    for name, limit in value.items():
        check_id(name, "quota name")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit < 2**53:
            raise InvalidRequest(
                f"quota {preview(name)} must be a whole number from 0, not {preview(limit)}",
                field="quotas",
            )
        out[name] = limit
    return out


@dataclass(frozen=True)
class CreateTenant(TenantCommand[Any], verb="create"):
    """Create a tenant, so that API keys can be made for it (`TenantInfo`); platform only."""

    quotas: Mapping[str, int] | None = None

    def checked(self, principal: Principal) -> Request[Any]:
        done = super().checked(principal)
        return dataclasses.replace(done, quotas=_check_quotas(self.quotas))  # type: ignore[type-var]


@dataclass(frozen=True)
class ListTenants(PlatformCommand[Any]):
    """Every tenant (`list[TenantInfo]`); platform only."""

    name = "list tenants"
    call = "list_tenants"
    cli = Cli("tenants list")
    refused = "list tenants"


@dataclass(frozen=True)
class CreateKey(Request[Any]):
    """Make an API key for a principal of the caller's tenant (`NewKey`: the only time its
    secret is shown). Admin only.

    `roles` are what the key may do (role names, at least one); `expires_at` (a datetime
    with a time zone) must be in the future, and None never expires.
    """

    # The key's `roles` field shadows the class attribute `Request.roles` on instances,
    # so the door reads who may send a request from its class: CreateKey keeps the
    # default there (no role listed: admin only).
    name = "create key"
    call = "create_key"
    http = PLATFORM_ONLY
    cli = Cli("keys create")
    principal: str = checked(Check.IDENTITY, what="principal")
    roles: Sequence[Role | str] = checked(Check.ROLES)  # type: ignore[assignment,misc]
    expires_at: datetime | None = None

    def checked(self, principal: Principal) -> Request[Any]:
        if self.expires_at is not None and (
            not isinstance(self.expires_at, datetime) or self.expires_at.utcoffset() is None
        ):
            raise InvalidRequest(
                f"expires_at must be a datetime with a time zone, not {preview(self.expires_at)}",
                field="expires_at",
            )
        return super().checked(principal)


@dataclass(frozen=True)
class ListKeys(Request[Any]):
    """The API keys of the caller's tenant (`list[KeyInfo]`: never a secret or a hash)."""

    roles = frozenset({Role.ADMIN})
    name = "list keys"
    call = "list_keys"
    http = PLATFORM_ONLY
    cli = Cli("keys list")


@dataclass(frozen=True)
class RevokeKey(Request[None]):
    """Revoke an API key of the caller's tenant: it stops working at once."""

    roles = frozenset({Role.ADMIN})
    name = "revoke key"
    call = "revoke_key"
    http = PLATFORM_ONLY
    cli = Cli("keys revoke")
    key_id: str = checked(Check.ID, what="key_id")


# == the approval page =================================================================
@dataclass(frozen=True)
class ResolveCredential(Request[Any]):
    """What an approval link's credential may decide now (`CredentialView`).

    Open to anyone, the unauthenticated principal included: the token
    authenticates. It changes nothing (opening a link is not deciding; mail
    scanners follow links). Any token that cannot decide now raises the one
    `InvalidCredential`.
    """

    open_to_anonymous = True
    name = "resolve credential"
    call = "resolve_credential"
    http = NotOffered("the approval page (GET /approve) resolves a link's token")
    cli = NotOffered("an approval link is opened in a browser")
    token: str = checked(Check.TOKEN)


# == runs for the HTTP API ==============================================================
@dataclass(frozen=True)
class StartRun(StartFields, Request[Started]):
    """`Start`, answering whether this start created the run (`Started`): a start of the
    same run (same run_id, workflow and input) again answers `created=False`."""

    roles = frozenset({Role.STARTER, Role.OPERATOR})
    name = "start run"
    call = "start_run"
    remote = "start"
    http = Http("POST", "/v1/runs", status=201)
    cli = NotOffered("`waypost start` sends Start")

    def checked(self, principal: Principal) -> Request[Started]:
        self.check_start()
        return super().checked(principal)


# == signal-with-start and webhooks by correlation =====================================
@dataclass(frozen=True)
class SignalWithStart(Request[Started]):
    """Start the run `run_id` and deliver `signal` to it, or deliver `signal` to the run that
    has that id (its input is then not compared), atomically (`Started`: `created` says
    which). A run of that id of another workflow is `RunIdConflict`, a finished one
    `RunNotActive`."""

    roles = frozenset({Role.STARTER, Role.OPERATOR})
    name = "signal with start"
    call = "signal_with_start"
    http = Http("POST", "/v1/runs/signal-with-start", status=201)
    cli = NotOffered("a program's call: start the run if none waits for the signal")
    workflow: Any
    input: Any
    run_id: str = checked(Check.ID, what="run_id")
    signal: str = checked(Check.ID, what="signal name")
    payload: Any = None
    version: str | int | None = checked(Check.VERSION, default=None)
    started_by: str | None = checked(Check.STARTER, what="started_by", default=None)
    priority: int = 0

    def checked(self, principal: Principal) -> Request[Started]:
        if isinstance(self.workflow, str):
            check_id(self.workflow, "workflow")
        check_priority(self.priority)
        return super().checked(principal)


# == quotas and fair scheduling ==========================================================
@dataclass(frozen=True)
class GetTenant(Request[Any]):
    """The caller's own tenant (`TenantInfo`): its effective quotas and what it holds now."""

    roles = frozenset(Role)
    name = "tenant"
    call = "get_tenant"
    remote = REMOTE_LATER
    http = Http("GET", "/v1/tenant", tag="tenants")
    cli = Cli("tenants show")


@dataclass(frozen=True)
class SetQuotas(TenantCommand[Any]):
    """Change a tenant's quota overrides (`TenantInfo` as `GetTenant` answers); platform only.

    `quotas` maps quota names (`waypost.model.quotas.Quotas`) to a number, None (or
    "unlimited") for no limit, or "default" to take the engine's default again;
    names not given keep their override.
    """

    name = "set quotas"
    call = "set_quotas"
    cli = Cli("tenants set-quota")
    refused = "change quotas"
    quotas: Mapping[str, Any] | None = None

    def checked(self, principal: Principal) -> Request[Any]:
        done = super().checked(principal)
        changes = check_overrides(self.quotas)
        if not changes:
            raise InvalidRequest("give at least one quota to set", field="quotas")
        return dataclasses.replace(done, quotas=changes)  # type: ignore[type-var]


# == retention: purged runs =============================================================
MAX_RETENTION_SECONDS = 100 * 366 * 86400  # a century: longer is surely a mistake
PURGE_BATCH = 500  # runs purged per transaction
MAX_PURGE = 1_000_000  # runs one purge removes at most


def check_seconds(value: Any, what: str) -> float:
    """A duration in seconds: a finite number from 0 to a century (not a bool)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != value
        or not 0 <= value <= MAX_RETENTION_SECONDS
    ):
        raise InvalidRequest(
            f"{what} must be a number of seconds from 0 to {MAX_RETENTION_SECONDS}, "
            f"not {preview(value)}",
            field=what,
        )
    return float(value)


@dataclass(frozen=True)
class PurgeRuns(Request[Any]):
    """Purge the tenant's finished runs (completed, failed, cancelled, terminated) that
    finished more than `older_than_seconds` ago, oldest first, at most `limit` (None: all),
    in transactions of `batch` runs (`PurgeReport`). Each leaves a `PurgedRun` summary;
    its history, payloads, tasks, timers, approvals, credentials and outbox messages are
    deleted, and its id then answers `RunNotFound`. `dry_run` counts and writes nothing."""

    roles = frozenset({Role.OPERATOR})
    name = "purge runs"
    call = "purge_runs"
    http = Http("POST", "/v1/runs/purge")
    cli = Cli("runs purge")
    older_than_seconds: float
    dry_run: bool = False
    limit: int | None = None
    reason: str | None = checked(Check.COMMENT, what="purge's reason", default=None)
    batch: int = PURGE_BATCH

    def checked(self, principal: Principal) -> Request[Any]:
        seconds = check_seconds(self.older_than_seconds, "older_than_seconds")
        if self.limit is not None:
            whole_number(self.limit, "limit", 1, MAX_PURGE)
        whole_number(self.batch, "batch", 1, 5_000)
        check_flag(self.dry_run, "dry_run")
        done = super().checked(principal)
        return dataclasses.replace(done, older_than_seconds=seconds)  # type: ignore[type-var]


@dataclass(frozen=True)
class GetPurged(RunRequest[Any]):
    """The summary a purged run of the tenant left (`PurgedRun`); `RunNotFound` if none."""

    roles = READERS
    name = "get purged"
    call = "purged_run"
    http = Http("GET", "/v1/purged-runs/{run_id:id}")
    cli = Cli("runs purged")


@dataclass(frozen=True)
class ListPurged(Request[Any]):
    """The tenant's purged runs, most recently purged first (`list[PurgedRun]`)."""

    roles = READERS
    name = "list purged"
    call = "purged_runs"
    http = Http("GET", "/v1/purged-runs")
    cli = Cli("runs purged")
    limit: int = checked(Check.LIMIT, default=100)


# == operator commands ==================================================================
@dataclass(frozen=True)
class Terminate(RunCommand):
    """End a run now, `terminated`: no compensation, its timers and credentials die."""

    name = call = "terminate"
    http = command_route("terminate", "End a run now; it ends `terminated`, no compensation.")
    cli = command_cli("terminate", lambda r: f"{r.run_id} terminated")
    form = Form("Terminate", danger=True)


@dataclass(frozen=True)
class Pause(RunCommand):
    """Hold a run: nothing new starts; signals and timers wait for `Resume`."""

    name = call = "pause"
    http = command_route("pause", "Pause a run: nothing new starts; signals and timers are held.")
    cli = command_cli("pause", lambda r: f"{r.run_id} paused")
    form = Form("Pause")


@dataclass(frozen=True)
class Resume(RunCommand):
    """Let a paused run go on, or a suspended one replay with the engine's current code."""

    name = call = "resume"
    http = command_route("resume", "Resume a paused run, or a suspended one after a fix.")
    cli = command_cli("resume", lambda r: f"{r.run_id} resumed")
    form = Form("Resume")


OPERATIONS: tuple[type[Request[Any]], ...] = (
    Start,
    Signal,
    Cancel,
    GetRun,
    ListRuns,
    GetHistory,
    Verify,
    AwaitResult,
    ListApprovals,
    GetApproval,
    Decide,
    Revoke,
    Reassign,
    AddToGroup,
    RemoveFromGroup,
    ListGroups,
    Publish,
    ListDefinitions,
    GetDefinition,
    Migrate,
    MigrateAll,
    CreateTenant,
    ListTenants,
    CreateKey,
    ListKeys,
    RevokeKey,
    ResolveCredential,
    StartRun,
    SignalWithStart,
    GetTenant,
    SetQuotas,
    PurgeRuns,
    GetPurged,
    ListPurged,
    Terminate,
    Pause,
    Resume,
    Fork,
    ReEncrypt,
    SealLegacy,
    *REPAIR_OPERATIONS,
    *USER_OPERATIONS,
    *RUN_PAGE_OPERATIONS,
    *SCHEDULE_OPERATIONS,
    *UPDATE_OPERATIONS,
    *TENANT_OPERATIONS,
)
"""Every operation the door serves (a test checks each has a handler and an engine method)."""
