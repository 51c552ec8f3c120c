"""Console users of `AsyncEngine`: create, list and disable them, set a password (a mixin
of thin methods over the one door). Signing in is the console's, through the door too."""

from __future__ import annotations

from collections.abc import Sequence

from waypost.model import operations as ops
from waypost.model.identity import Role
from waypost.model.users import UserInfo

from .door import LocalDoor


class UserCalls:
    """Console users of a tenant, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def create_user(
        self, user: str, roles: Sequence[Role | str], password: str, *, tenant: str = "default"
    ) -> UserInfo:
        """Make a console user of `tenant` (which must exist) with `roles` and a password
        (8 to 512 characters; only its argon2id hash is kept). `UserExists` if the name
        is taken. Needs `argon2-cffi` (the `server` extra)."""
        request = ops.CreateUser(user=user, roles=roles, password=password)
        return await self._local(request, tenant)

    async def list_users(self, *, tenant: str = "default") -> list[UserInfo]:
        """The console users of `tenant`, disabled ones too (never a password hash)."""
        return await self._local(ops.ListUsers(), tenant)

    async def disable_user(self, user: str, reason: str = "", *, tenant: str = "default") -> None:
        """Disable a console user: it cannot sign in, its sessions end (`UserNotFound`)."""
        await self._local(ops.DisableUser(user=user, reason=reason), tenant)

    async def set_password(self, user: str, password: str, *, tenant: str = "default") -> None:
        """Replace a console user's password; its sessions end (`UserNotFound`)."""
        await self._local(ops.SetPassword(user=user, password=password), tenant)
