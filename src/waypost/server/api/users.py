"""The API's console-user routes (v1): `/v1/users...`, each through the one door.

Admins of a tenant make, list and disable its console users and set their passwords
(what `waypost users` does on the database). A password travels in the request body
only (never in a URL, never logged) and is kept as an argon2id hash; no answer holds
a password or its hash. Another tenant's user is not found (404).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from waypost.model import operations as ops

from ..bodies import api_router
from .common import CORE_REFUSALS, StrictBody, refusals
from .derived import add_route, done, listed, renamed

router = api_router(
    responses=refusals(
        *CORE_REFUSALS,
        said={
            403: "The key's roles do not allow it (admin only).",
            404: "No such user in the key's tenant.",
            409: "A user of that name exists already.",
        },
    )
)


class UserBody(StrictBody):
    name: Any = Field(description="The user's name (what they sign in with).")
    roles: Any = Field(description="admin, operator, starter, approver, auditor, viewer.")
    password: Any = Field(description="8 to 512 characters; only its argon2id hash is kept.")


class DisableBody(StrictBody):
    reason: Any = Field(default="", description="Why (kept with the user).")


class PasswordBody(StrictBody):
    password: Any = Field(description="The new password; the user's sessions end.")


add_route(
    router,
    ops.CreateUser,
    lambda made, _: made.to_json(),
    summary="Make a console user (admin).",
    body=UserBody,
    fields=renamed(name="user"),
)
add_route(
    router,
    ops.ListUsers,
    listed("users", lambda u: u.to_json()),
    summary="The tenant's console users, disabled ones too (admin).",
)
add_route(
    router,
    ops.DisableUser,
    done("disabled"),
    summary="Disable a console user: no sign-in, its sessions end (admin).",
    body=DisableBody,
    body_required=False,
    fields=renamed(name="user"),
)
add_route(
    router,
    ops.SetPassword,
    done("password_set"),
    summary="Set a console user's password; its sessions end (admin).",
    body=PasswordBody,
    fields=renamed(name="user"),
)
