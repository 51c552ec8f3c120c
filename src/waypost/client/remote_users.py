"""The console-user calls of `AsyncClient`, over `/v1/users...`: the names, parameters
and answers of the embedded engine's calls, without `tenant=` (the API key decides it).
Admin only."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from waypost.model import operations as ops
from waypost.model.identity import Role
from waypost.model.users import UserInfo

from .door import Sends
from .remote_wire import checked_here


def _path(user: str, tail: str) -> str:
    return f"/v1/users/{quote(user, safe='')}{tail}"


class UserRequests:
    """Console users of the API key's tenant (the key's principal must be an admin)."""

    _send: Sends  # the JSON answer of a request (an error answer raised as its error)

    async def create_user(self, user: str, roles: Sequence[Role | str], password: str) -> UserInfo:
        """Make a console user with `roles` and a password (8 to 512 characters; only
        its argon2id hash is kept). `UserExists` if the name is taken."""
        asked = checked_here(ops.CreateUser(user=user, roles=roles, password=password))
        body = {
            "name": asked.user,
            "roles": [Role(r).value for r in asked.roles],
            "password": password,
        }
        return UserInfo.from_json(await self._send("POST", "/v1/users", json=body))

    async def list_users(self) -> list[UserInfo]:
        """The tenant's console users, disabled ones too (never a password hash)."""
        data = await self._send("GET", "/v1/users")
        return [UserInfo.from_json(item) for item in data["users"]]

    async def disable_user(self, user: str, reason: str = "") -> None:
        """Disable a console user: it cannot sign in, its sessions end (`UserNotFound`)."""
        asked = checked_here(ops.DisableUser(user=user, reason=reason))
        await self._send("POST", _path(asked.user, "/disable"), json={"reason": asked.reason})

    async def set_password(self, user: str, password: str) -> None:
        """Replace a console user's password; its sessions end (`UserNotFound`)."""
        asked = checked_here(ops.SetPassword(user=user, password=password))
        await self._send("PUT", _path(asked.user, "/password"), json={"password": password})
