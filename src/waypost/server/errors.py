"""Errors as HTTP answers: one status per kind, one body shape for all.

Every refusal is `{"error": {"code", "message", "details"}}`. `code` is the error's
kind in snake case (`run_not_found`, `quota_exceeded`, ...), stable for clients;
`message` is the engine's bounded message; `details` carries what a client acts
on (the located problems of a definition or an input, the quota's name, the field).
Another tenant's objects are "not found", exactly as objects that do not exist.
"""

from __future__ import annotations

import math
import re
from typing import Any

from waypost import errors as e
from waypost.model.definitions import DefinitionError, InputError
from waypost.model.logs import logger

log = logger("waypost.server")

# Checked in order: the first class an error is an instance of gives its status.
STATUSES: list[tuple[type[BaseException], int]] = [
    (e.Unauthenticated, 401),
    (e.SignInRefused, 401),
    (e.SignInBusy, 503),
    (e.SessionEnded, 401),
    (e.WebhookRefused, 401),
    (e.PermissionDenied, 403),
    (e.TenantDisabled, 403),
    (e.InvalidCredential, 403),
    (e.RunNotFound, 404),
    (e.UserNotFound, 404),
    (e.ApprovalNotFound, 404),
    (e.DefinitionNotFound, 404),
    (e.WebhookSourceNotFound, 404),
    (e.QueueNotFound, 404),
    (e.ScheduleNotFound, 404),
    (e.NoRunWaiting, 404),
    (e.RunIdConflict, 409),
    (e.UserExists, 409),
    (e.ScheduleExists, 409),
    (e.RunNotActive, 409),
    (e.InvalidState, 409),
    (e.DecisionRefused, 409),
    (e.WebhookSourceExists, 409),
    (e.StoreContention, 503),
    (e.ComputeUnavailable, 503),
    (e.StoreRejected, 422),
    (e.StoreError, 503),
    (e.ResultTimeout, 408),
    (e.UpdateRejected, 422),
    (e.UpdateFailed, 422),
    (e.QueryFailed, 422),
    (e.ComputeLimitExceeded, 422),
    (DefinitionError, 422),
    (InputError, 422),
    (e.UnknownWorkflow, 422),
    (e.InvalidRequest, 422),
    (e.PayloadError, 422),
    (e.ConfigurationError, 422),
]

# Seconds a client should wait before trying again, where waiting helps.
RETRY_AFTER = {
    e.StoreContention: 1,
    e.StoreError: 5,
    e.ComputeUnavailable: 1,
    e.SignInBusy: 1,
}


# A path segment that is itself a credential: an approval link's token.
_CREDENTIAL_PATH = re.compile(r"^(/approve/)[^/]*")


def logged_path(path: str) -> str:
    """`path` as a log line may show it: an approval link's credential is left out."""
    return _CREDENTIAL_PATH.sub(r"\1[credential]", path)


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def code_of(exc: BaseException) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__).lower()


def answer(exc: e.WaypostError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, body, headers) for a refusal."""
    headers: dict[str, str] = {}
    details: dict[str, Any] = {}
    status = 500
    if isinstance(exc, e.QuotaExceeded):
        # A payload over its size limit is too large; any other quota is "try later".
        status = 413 if exc.quota == "max_payload_bytes" else 429
        details["quota"] = exc.quota
        retry = exc.retry_after
        if retry is not None:
            details["retry_after"] = retry
        if status == 429:
            headers["Retry-After"] = str(max(1, math.ceil(retry or 1)))
    else:
        for kind, code in STATUSES:
            if isinstance(exc, kind):
                status = code
                break
    for kind, seconds in RETRY_AFTER.items():
        if isinstance(exc, kind) and not isinstance(exc, e.StoreRejected):
            headers["Retry-After"] = str(seconds)
    if isinstance(exc, DefinitionError | InputError):
        details["problems"] = [{"path": p.path, "message": p.message} for p in exc.problems]
    if isinstance(exc, InputError):
        details["definition"] = exc.name
    if isinstance(exc, e.InvalidRequest) and exc.field:
        details["field"] = exc.field
    if isinstance(exc, e.Unauthenticated):
        headers["WWW-Authenticate"] = 'Bearer realm="waypost"'
    if isinstance(exc, e.BrokenHistory | e.PayloadTampered):
        # A stored record fails its integrity check (edited, copied, plaintext where a
        # ciphertext belongs): nothing of it is answered, the message says which and why.
        log.error("a stored record fails its integrity check: %s", exc)
        return 500, error_body(code_of(exc), str(exc)), {}
    if isinstance(exc, e.StoreRejected):
        # Sending it again fails again; the database's words stay in the log.
        log.warning("the store refused a request's write: %s", exc)
        message = "the database refused to store what the request carries"
        return status, error_body("store_rejected", message), headers
    if isinstance(exc, e.StoreError) and not isinstance(exc, e.StoreContention):
        # The store's own words may name hosts and tables: the log has them.
        log.warning("store error answering a request: %s", exc)
        return status, error_body("store_unavailable", "the database is not answering"), headers
    if status == 500:
        log.error("unexpected %s answering a request: %s", type(exc).__name__, exc)
        return status, error_body("internal", "internal error"), headers
    return status, error_body(code_of(exc), str(exc), details), headers
