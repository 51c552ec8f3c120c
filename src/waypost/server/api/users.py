"""The API's console-user routes (v1): `/v1/users...`, each through the one door.

Admins of a tenant make, list and disable its console users and set their passwords
(what `waypost users` does on the database). A password travels in the request body
only (never in a URL, never logged) and is kept as an argon2id hash; no answer holds
a password or its hash. Another tenant's user is not found (404).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import Field

from waypost.model import operations as ops
from waypost.model.users import UserInfo

from ..bodies import ErrorBody, api_router
from .common import Caller, StrictBody, door

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": what}
    for status, what in {
        401: "No valid API key.",
        403: "The key's roles do not allow it (admin only).",
        404: "No such user in the key's tenant.",
        409: "A user of that name exists already.",
        422: "The request is not valid.",
        503: "The database does not answer.",
    }.items()
}
router = api_router(responses=_ERRORS, tags=["users"])


class UserBody(StrictBody):
    name: Any = Field(description="The user's name (what they sign in with).")
    roles: Any = Field(description="admin, operator, starter, approver, auditor, viewer.")
    password: Any = Field(description="8 to 512 characters; only its argon2id hash is kept.")


class DisableBody(StrictBody):
    reason: Any = Field(default="", description="Why (kept with the user).")


class PasswordBody(StrictBody):
    password: Any = Field(description="The new password; the user's sessions end.")


@router.post("/v1/users", status_code=201, summary="Make a console user (admin).")
async def create_user(request: Request, body: UserBody, principal: Caller) -> dict[str, Any]:
    asked = ops.CreateUser(user=body.name, roles=body.roles, password=body.password)
    made: UserInfo = await door(request, asked, principal)
    return made.to_json()


@router.get("/v1/users", summary="The tenant's console users, disabled ones too (admin).")
async def list_users(request: Request, principal: Caller) -> dict[str, Any]:
    found = await door(request, ops.ListUsers(), principal)
    return {"users": [u.to_json() for u in found]}


@router.post(
    "/v1/users/{name:id}/disable",
    summary="Disable a console user: no sign-in, its sessions end (admin).",
)
async def disable_user(
    request: Request, name: str, principal: Caller, body: DisableBody | None = None
) -> dict[str, Any]:
    reason = body.reason if body is not None else ""
    await door(request, ops.DisableUser(user=name, reason=reason), principal)
    return {"name": name, "disabled": True}


@router.put(
    "/v1/users/{name:id}/password",
    summary="Set a console user's password; its sessions end (admin).",
)
async def set_password(
    request: Request, name: str, body: PasswordBody, principal: Caller
) -> dict[str, Any]:
    await door(request, ops.SetPassword(user=name, password=body.password), principal)
    return {"name": name, "password_set": True}
