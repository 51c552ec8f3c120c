"""Exceptions raised by waypost.

Every error a caller can act on has its own type and a message that names the
thing that was wrong (the workflow, the run, the field), so that a log line is
enough to understand it.
"""

from __future__ import annotations

from typing import Any


class WaypostError(Exception):
    """Base class of every error waypost raises on purpose."""


class ConfigurationError(WaypostError):
    """The engine was set up wrongly (a bad URL, an option out of range)."""


class InvalidRequest(WaypostError, ValueError):
    """A request refused as it stands (a bad id, name, text or value); nothing was written.

    `field` names the part of the request that was wrong. The message quotes at
    most a short prefix of the offending value.
    """

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class PermissionDenied(WaypostError, PermissionError):
    """The caller's roles do not allow the operation, or it acts for someone else."""


class UnknownWorkflow(WaypostError, LookupError):
    """No workflow of this name (and version) is registered."""


class UnknownActivity(WaypostError, LookupError):
    """No activity of this name is registered."""


class RunNotFound(WaypostError, LookupError):
    """No run with this id exists in this tenant."""


class ApprovalNotFound(WaypostError, LookupError):
    """No approval with this id exists in this tenant."""


class DefinitionNotFound(WaypostError, LookupError):
    """No published definition (or version) of this name exists in this tenant."""


class QuotaExceeded(WaypostError):
    """A tenant's limit refuses the request as it stands (`quota` names the limit).

    Nothing was written; the same request may succeed later (when the run has taken
    in its signals) or smaller (a payload within the limit). `retry_after`, when
    known, is how many seconds until it may (a start over the tenant's start rate).
    """

    def __init__(self, quota: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.quota = quota
        self.retry_after = retry_after


class RunIdConflict(WaypostError):
    """A run with this id exists already with a different workflow or input."""


class RunNotActive(WaypostError):
    """The command needs a run that has not finished, and this one has."""


class InvalidState(WaypostError):
    """The run has not finished, but its state does not allow the command (pausing a
    paused run, resuming a run that is not paused). HTTP 409."""


class PayloadError(WaypostError, TypeError):
    """A value cannot be stored as JSON (or read back as the declared type)."""


class StoreError(WaypostError):
    """The store failed (I/O error, corrupted file, lost connection)."""


class StoreContention(StoreError):
    """The store gave up on a change because other writers kept taking what it needed.

    Nothing was written. The operation can be tried again as it is.
    """


class StoreRejected(StoreError):
    """The database refused this one write for what it holds (a value it cannot store, a
    limit it enforces), not for its own state: sending the same write again fails again.

    Nothing was written. The engine does not retry it without end: a run whose step
    keeps being refused is suspended with the database's reason.
    """


class StoreCorrupted(StoreError):
    """The database file is damaged; waypost refuses to serve it."""


class EncryptionKeyMissing(StoreError):
    """A stored payload is encrypted under a key id this process was not given.

    `key_id` names it; give the process that key (next to the current one) and
    nothing is lost. The message never holds the payload.
    """

    def __init__(self, message: str, *, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id


class PayloadTampered(StoreError):
    """A stored encrypted payload fails authentication: damaged, edited, or moved
    from another run, event or column. Its plaintext is never returned."""


class PlaintextRefused(PayloadTampered):
    """A payload column holds plaintext although encryption keys are set: written before
    encryption was turned on, or by someone without the keys. It is read only in the
    migration mode (`WAYPOST_ENCRYPTION_ACCEPT_PLAINTEXT=1`, `Keys(accept_plaintext=True)`)
    while `waypost runs re-encrypt` seals such values; the message names the column and
    the run."""


class SchemaError(StoreError):
    """The database schema is newer than this version of waypost, or damaged."""


class ResultTimeout(WaypostError, TimeoutError):
    """`result(timeout=...)` elapsed before the run ended."""


class WaitTimeout(WaypostError, TimeoutError):
    """A workflow's `wait_signal(..., timeout=...)` elapsed without the signal."""


class NonRetryableError(WaypostError):
    """Raise from an activity to fail it at once, whatever its retry policy says."""


class ActivityCancelled(WaypostError):
    """Raised in an activity by `heartbeat()` once its run asked it to stop."""


class BrokenHistory(WaypostError):
    """A run's stored history fails its integrity check (numbering, hash chain or data).

    The engine suspends such a run with the reason and never replays it: its code is
    never fed events that may have been edited.
    """


class BrokenRecord(BrokenHistory):
    """A stored run or approval row fails its check under the chain key: edited, copied
    from another run, written without the key, or carrying no check at all (written before
    rows were checked). Its values are never returned; `waypost runs verify` says more."""


class NondeterminismError(WaypostError):
    """Workflow code did something other than what its history records.

    Besides the message, what is known of the mismatch: the history event expected
    (`seq`, `event_type`, `step`; None where the history has nothing there), what
    the code did instead (`code_did`, e.g. "ctx.run(refund)", or "" if nothing) and
    the code's `file:line` (`site`).
    """

    def __init__(
        self,
        message: str,
        *,
        seq: int | None = None,
        event_type: str | None = None,
        step: str | None = None,
        code_did: str = "",
        site: str = "",
    ) -> None:
        super().__init__(message)
        self.seq = seq
        self.event_type = event_type
        self.step = step
        self.code_did = code_did
        self.site = site


class InvalidHistory(WaypostError, ValueError):
    """A history handed to replay (a file, a list of events) cannot be read as one."""


class WorkflowError(WaypostError):
    """Workflow code used the context wrongly (e.g. an OS timer inside a workflow)."""


class Failure(WaypostError):
    """Raise in workflow code to fail the run: a business outcome, not a bug.

    The run ends `failed` with `type` (default "Failure"), the message and
    `details` (JSON-able) as its error. Any other exception that escapes the
    workflow (a `KeyError`, a `TypeError`...) is taken for a bug: the run is
    suspended until the code is fixed and an operator resumes it. A workflow
    may declare more failing types with `@workflow(failure_types=(...))`; an
    `ActivityError` the code does not catch fails the run too.
    """

    def __init__(self, message: str, *, type: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.error_type = type or "Failure"
        self.error_details = details


class WorkflowBug(WaypostError):
    """Workflow code raised an exception that is not a business failure.

    The engine suspends the run with the error's `error_type`, message, traceback and
    the workflow code's `site` (`file.py:line`); a fixed version of the code and a
    `resume` take it on from its last recorded step.
    """

    def __init__(
        self,
        message: str,
        *,
        error_type: str,
        error_message: str,
        module: str,
        site: str,
        traceback_text: str,
    ) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.error_message = error_message
        self.module = module
        self.site = site
        self.traceback_text = traceback_text

    def to_json(self) -> dict[str, Any]:
        """The error a run suspended by this bug records."""
        file, _, line = self.site.rpartition(":")
        out: dict[str, Any] = {
            "type": self.error_type,
            "module": self.module,
            "message": self.error_message,
            "bug": True,
            "traceback": self.traceback_text,
        }
        if file and line.isdigit():
            out.update(site=self.site, file=file, line=int(line))
        return out


class ActivityError(WaypostError):
    """Raised inside a workflow when an activity failed for good.

    `type` and `message` describe the activity's last error; `causes`, the errors
    it was raised from (`raise ... from`, or while handling), each a dict of `type`,
    `module`, `message` (and `details`); `attempts` says how many attempts were made.
    """

    def __init__(self, activity: str, step_id: str, error: dict[str, Any], attempts: int) -> None:
        self.activity = activity
        self.step_id = step_id
        self.error = error
        self.type = str(error.get("type", "Exception"))
        self.message = str(error.get("message", ""))
        self.attempts = attempts
        self.causes: list[dict[str, Any]] = []
        cause = error.get("cause")
        while isinstance(cause, dict):
            self.causes.append({k: v for k, v in cause.items() if k != "cause"})
            cause = cause.get("cause")
        super().__init__(
            f"activity {activity!r} (step {step_id}) failed after {attempts} "
            f"attempt{'s' if attempts != 1 else ''}: {self.type}: {self.message}"
        )


class ChildFailed(WaypostError):
    """Raised inside a workflow when a child run it waits for ended without a result.

    `status` is how the child ended (`failed`, `cancelled`, `terminated`, or
    `not_started` when its run id was another run's); `type` and `message` describe
    the child's error, which `error` holds whole.
    """

    def __init__(self, run_id: str, step_id: str, status: str, error: dict[str, Any]) -> None:
        self.run_id = run_id
        self.step_id = step_id
        self.status = status
        self.error = error
        self.type = str(error.get("type", ""))
        self.message = str(error.get("message", ""))
        super().__init__(
            f"child run {run_id!r} (step {step_id}) {status.replace('_', ' ')}: "
            f"{self.type}: {self.message}"
        )


class RunEndedError(WaypostError):
    """Raised by `result()` when a run ended without a result."""

    def __init__(self, run_id: str, status: str, error: dict[str, Any] | None) -> None:
        self.run_id = run_id
        self.status = status
        self.error = error or {}
        self.type = str(self.error.get("type", ""))
        self.message = str(self.error.get("message", ""))
        detail = f": {self.type}: {self.message}" if self.type else ""
        super().__init__(f"run {run_id!r} {status}{detail}")


class WorkflowFailed(RunEndedError):
    """The run ended `failed`; `.error` holds the stored error."""


class WorkflowCancelled(RunEndedError):
    """The run ended `cancelled`."""


class WorkflowTerminated(RunEndedError):
    """The run ended `terminated`."""


class InvalidCredential(WaypostError):
    """The credential is not valid for this decision (the same answer whatever the cause)."""

    def __init__(self) -> None:
        super().__init__(
            "the approval credential is not valid: it is unknown, used, expired, revoked, or "
            "not for this approval, action or approver"
        )


class DecisionRefused(WaypostError):
    """The credential is valid but this principal may not decide now (the reason says why)."""


# == tenants and API keys ==============================================================
class Unauthenticated(WaypostError):
    """The API key is not valid (the same answer whatever the cause; the key is never quoted)."""

    def __init__(self) -> None:
        super().__init__(
            "the API key is not valid: it is unknown, malformed, revoked or expired, or its "
            "tenant no longer exists"
        )


class TenantExists(WaypostError):
    """A tenant of this name exists already; nothing was written."""


class TenantNotFound(WaypostError, LookupError):
    """No tenant of this name exists (tenants are made with `create_tenant`)."""


class TenantDisabled(WaypostError):
    """The tenant is disabled: none of its API keys or console sessions is accepted until
    the platform operator enables it again (HTTP 403 `tenant_disabled`)."""


class TenantNotDisabled(InvalidState):
    """Only a disabled tenant can be deleted: disable it first (nothing was deleted)."""


class KeyNotFound(WaypostError, LookupError):
    """No API key with this id exists in this tenant."""


class QueueNotFound(WaypostError, LookupError):
    """The tenant has no queue of this name: none configured, and no attempt waits in it."""


# == webhooks by correlation ============================================================
class WebhookRefused(WaypostError):
    """A webhook delivery not accepted as sent by its source: unknown source, missing or
    wrong signature (one message for both, so a source's existence is not told), or a
    timestamp outside the source's tolerance. Nothing was delivered."""


class WebhookSourceExists(WaypostError):
    """A webhook source of this id exists already (ids are unique across tenants)."""


class WebhookSourceNotFound(WaypostError, LookupError):
    """No webhook source of this id in this tenant."""


class NoRunWaiting(WaypostError, LookupError):
    """No run of the webhook source's tenant waits for its signal with the delivery's
    correlation value; nothing was delivered or kept (the sender's retry may find one)."""


# == console users and sessions ========================================================
class SignInRefused(WaypostError):
    """A sign-in was refused. One message whatever the cause (no such user or tenant,
    a wrong password or key, a disabled account, too many failures), so that nobody
    learns which users exist."""

    def __init__(self) -> None:
        super().__init__(
            "sign-in refused: the tenant, user name, password or API key is not right, or "
            "the account cannot sign in now"
        )


class SignInBusy(WaypostError):
    """This server is checking as many passwords as it checks at once, and as many wait
    already: the sign-in was not tried (nothing counted against anyone). Try again
    after `retry_after` seconds."""

    retry_after = 1.0

    def __init__(
        self, message: str = "the server is busy checking other sign-ins: try again in a moment"
    ) -> None:
        super().__init__(message)


class SessionEnded(WaypostError):
    """The console session is unknown, signed out or expired, or its user or key no
    longer may sign in (one message for every cause)."""

    def __init__(self) -> None:
        super().__init__("the session has ended: sign in again")


class UserExists(WaypostError):
    """A user of this name exists already in the tenant; nothing was written."""


class IdentityTaken(UserExists):
    """A tenant admin asked for a console user or an API key for a name that is already
    another person's identity in the tenant (a user, a key's principal, a member of a
    group, an approver named in a pending approval); nothing was written. Only the
    platform operator (the command line, the embedded API) makes a second credential for
    someone who has one."""


class UserNotFound(WaypostError, LookupError):
    """No user of this name in this tenant."""


# == schedules ==========================================================================
class ScheduleExists(WaypostError):
    """The tenant has a schedule of this id already."""


class ScheduleNotFound(WaypostError, LookupError):
    """No schedule of this id in this tenant."""


# == queries and updates ================================================================
class QueryFailed(WaypostError):
    """A query could not be answered: the run has no handler of that name, the handler
    raised, or it tried to do something (sleep, run an activity) a query may not.
    Nothing was recorded."""


class ComputeLimitExceeded(WaypostError):
    """Work run for a tenant (a replay, a query, an activation of a definition run) took
    more CPU time than one call may, and was stopped; nothing of it was recorded."""


class ComputeUnavailable(WaypostError):
    """The process that does a server's expensive work (queries, replays, definition runs)
    ended or stopped answering; it is started again: try again shortly."""


class UpdateRejected(WaypostError):
    """An update's validator refused it: nothing was recorded in the run's history."""


class UpdateFailed(WaypostError):
    """An accepted update's handler raised; its error is recorded in the history (the
    run goes on)."""


class UpdateTimeout(ResultTimeout):
    """The caller stopped waiting for an accepted update's result; the update is recorded
    and goes on: ask again with the same update id for its result."""
