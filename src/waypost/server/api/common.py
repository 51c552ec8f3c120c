"""What every route of the API (v1) shares: the caller from its API key, the one door,
the answers every route may give, and the strict base of request bodies.

Every route but the health checks and the webhooks' (signed by their senders)
needs `Authorization: Bearer <API key>`; the key's principal (its tenant, name and
roles) is who asks, and the door checks what that principal may do. Objects of
another tenant are not found.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict

from waypost.client.engine import AsyncEngine
from waypost.engine import tracing
from waypost.errors import Unauthenticated
from waypost.model import operations as ops
from waypost.model.identity import Principal

from ..bodies import ErrorBody

_SAID = {
    400: "The body is not JSON.",
    401: "No valid API key.",
    403: "The key's roles do not allow it.",
    404: "Not found in the key's tenant.",
    409: "Conflicts with the current state.",
    413: "The body is too large.",
    422: "The request is not valid.",
    429: "A tenant quota; see Retry-After.",
    503: "The database does not answer.",
}


def refusals(*statuses: int, said: dict[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI description of the refusals of `statuses`: an error body each, in the
    words of `said` where a router says more than every route's."""
    words = {**_SAID, **(said or {})}
    return {status: {"model": ErrorBody, "description": words[status]} for status in statuses}


ERRORS = refusals(*_SAID)
CORE_REFUSALS = (401, 403, 404, 409, 422, 503)
"""What any authenticated route may refuse with, beside a body's refusals (which
`ApiRoute` adds to the routes that take one) and the quotas' 429."""

_bearer = HTTPBearer(auto_error=False, description="An API key: `waypost keys create`.")

MAX_WAIT = 60.0  # seconds a result request may wait for the run to end


def engine_of(request: Request) -> AsyncEngine:
    engine: AsyncEngine = request.app.state.engine
    return engine


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The principal of the request's API key (401 without a valid one)."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthenticated()
    return await engine_of(request).authenticate(credentials.credentials)


Caller = Annotated[Principal, Depends(caller)]


async def door(request: Request, operation: ops.Request[Any], principal: Principal) -> Any:
    # A W3C `traceparent` header makes a run this request starts part of the caller's trace.
    with tracing.caller_context(request.headers.get("traceparent")):
        return await engine_of(request).execute(operation, principal)


# == the base of request bodies ==========================================================
class StrictBody(BaseModel):
    # Numbers and flags of operator commands are strict (StrictInt, StrictBool): `true`
    # or "1" is no event number or batch size, and is refused rather than read as 1.
    model_config = ConfigDict(extra="forbid")
