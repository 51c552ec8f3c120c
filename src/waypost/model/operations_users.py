"""Console users and sessions as requests: create, list and disable users, set a
password; sign in, resolve a session, sign out.

Declared beside `operations.py` in the same form (and re-exported from it). Managing
users is for admins. Signing in is open to anyone: what the caller presents (a
password, an API key, a session's token) authenticates it, and every refusal is the
one `SignInRefused` (or `SessionEnded`), so that nobody learns which users exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from waypost.errors import InvalidRequest
from waypost.model.identity import Principal, Role
from waypost.model.requests import Check, Cli, Http, NotOffered, Request, Resource, checked
from waypost.model.users import MAX_PASSWORD, MIN_PASSWORD, NewSession, SessionView, UserInfo

T = TypeVar("T")

MAX_ADDRESS = 100


def check_password(value: Any) -> str:
    """A new password: MIN_PASSWORD..MAX_PASSWORD characters, no control characters."""
    if not isinstance(value, str):
        raise InvalidRequest("a password must be text", field="password")
    if not MIN_PASSWORD <= len(value) <= MAX_PASSWORD:
        raise InvalidRequest(
            f"a password has {MIN_PASSWORD} to {MAX_PASSWORD} characters, not {len(value)}",
            field="password",
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidRequest("a password may not hold control characters", field="password")
    return value


USERS = Resource("user", "/v1/users", key="name")


@dataclass(frozen=True)
class UserRequest(Request[T]):
    """A request about one console user of the caller's tenant, named by its first field
    (admin only: no role listed)."""

    resource = USERS
    user: str = checked(Check.IDENTITY, what="user")


@dataclass(frozen=True)
class CreateUser(UserRequest[UserInfo], verb="create"):
    """Make a console user of the caller's tenant with `roles` and a password. Admin only.

    The user's `roles` field shadows the class attribute on instances (as `CreateKey`'s
    does): no role listed on the class, so admin only."""

    roles: Sequence[Role | str] = checked(Check.ROLES)  # type: ignore[assignment,misc]
    password: str = checked(Check.TOKEN, what="password")

    def checked(self, principal: Principal) -> Request[UserInfo]:
        check_password(self.password)
        return super().checked(principal)


@dataclass(frozen=True)
class ListUsers(Request[list[UserInfo]], verb="list"):
    """The console users of the caller's tenant, disabled ones too. Admin only."""

    resource = USERS


@dataclass(frozen=True)
class DisableUser(UserRequest[None], verb="disable"):
    """Disable a user: it can no longer sign in and its sessions end at once. Admin only."""

    reason: str = checked(Check.OPTIONAL_REASON, what="reason", default="")


@dataclass(frozen=True)
class SetPassword(UserRequest[None]):
    """Replace a user's password; its sessions end. Admin only."""

    name = "set password"
    call = "set_password"
    http = Http("PUT", "/v1/users/{name:id}/password", tag="users")
    cli = Cli("users set-password")
    password: str = checked(Check.TOKEN, what="password")

    def checked(self, principal: Principal) -> Request[None]:
        check_password(self.password)
        return super().checked(principal)


@dataclass(frozen=True)
class SignIn(Request[NewSession]):
    """Open a console session with a user's password (`tenant`, `user`, `password`) or an
    API key (`key`). Open to anyone; every refusal is the one `SignInRefused`.

    `address` (the client's, as the server saw it) goes to the audit log only.
    """

    open_to_anonymous = True
    name = "sign in"
    call = http = cli = NotOffered("the console's sign-in form")
    tenant: str | None = checked(Check.OPTIONAL_ID, what="tenant", default=None)
    user: str | None = checked(Check.OPTIONAL_IDENTITY, what="user", default=None)
    password: str | None = checked(Check.OPTIONAL_TOKEN, what="password", default=None)
    key: str | None = checked(Check.OPTIONAL_TOKEN, what="key", default=None)
    address: str = checked(Check.OPTIONAL_REASON, what="address", default="")

    def checked(self, principal: Principal) -> Request[NewSession]:
        by_key = self.key is not None
        by_password = self.user is not None or self.password is not None
        if by_key == by_password:
            raise InvalidRequest(
                "sign in with either an API key, or a tenant, user name and password",
                field="key" if by_key else "user",
            )
        if by_password and (self.tenant is None or self.user is None or self.password is None):
            raise InvalidRequest(
                "a password sign-in needs the tenant, the user name and the password",
                field="user",
            )
        if len(self.address) > MAX_ADDRESS:
            raise InvalidRequest(f"address: at most {MAX_ADDRESS} characters", field="address")
        return super().checked(principal)


@dataclass(frozen=True)
class SessionRequest(Request[T]):
    """A request about the console session whose token it presents: open to anyone (the
    token authenticates it), and the console's alone."""

    open_to_anonymous = True
    token: str = checked(Check.TOKEN)


@dataclass(frozen=True)
class ResolveSession(SessionRequest[SessionView]):
    """Who a session's token is now (`SessionView`), or `SessionEnded`. Open to anyone."""

    name = "resolve session"
    call = http = cli = NotOffered("the console resolves its sign-in cookie")


@dataclass(frozen=True)
class SignOut(SessionRequest[None]):
    """End a session (a token that is no session's is ignored). Open to anyone."""

    name = "sign out"
    call = http = cli = NotOffered("the console's sign-out button")


USER_OPERATIONS: tuple[type[Request[Any]], ...] = (
    CreateUser,
    ListUsers,
    DisableUser,
    SetPassword,
    SignIn,
    ResolveSession,
    SignOut,
)
