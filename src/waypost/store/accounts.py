"""The store's verbs for console users and sessions, declared apart from `base.py` for its
size (`Store` includes them).

A user is kept with its argon2 password hash, never the password; a session with the
SHA-256 of its token, never the token. Every read and change of a user is scoped by
its tenant. A session is found by its token's hash (that is how its tenant is learnt),
with its user's or API key's row, so that a disabled user or a revoked key ends it.

Sign-in attempts are counted here, before a password is checked (`reserve_sign_in`),
so that every server process counts them and concurrent guesses cannot all pass a
check made before any of them was counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from waypost.model.quotas import Quotas
from waypost.model.users import HeldBy, SignInLimits

from .rows import ApiKeyRecord


@dataclass(frozen=True)
class UserRecord:
    tenant: str
    name: str
    roles: tuple[str, ...]
    password_hash: str
    created_at: float
    created_by: str
    disabled_at: float | None
    disabled_by: str | None
    password_changed_at: float | None
    failed_sign_ins: int
    locked_until: float | None


@dataclass(frozen=True)
class SessionRecord:
    """A stored session and what it was opened with: a user (`user`) or a key (`key`)."""

    token_hash: str
    tenant: str
    subject: str
    kind: str
    credential: str  # the user's name, or the API key's id
    created_at: float
    expires_at: float
    user: UserRecord | None
    key: ApiKeyRecord | None
    tenant_disabled: bool = False


@dataclass(frozen=True)
class SignInAttempt:
    """Who tries to sign in, from where: `user` is None for an API key (counted by its
    address only). `address` is what throttling goes by (an IPv6 address's /64)."""

    address: str
    tenant: str = ""
    user: str | None = None

    def keys(self) -> list[dict[str, str]]:
        """The attempts' rows it counts in, in the order they are locked: the address's,
        the user's from everywhere, the user's at the address."""
        rows = [{"tenant": "", "user_name": "", "address": self.address}]
        if self.user is not None:
            rows.append({"tenant": self.tenant, "user_name": self.user, "address": ""})
            rows.append({"tenant": self.tenant, "user_name": self.user, "address": self.address})
        return rows


class AccountStore(Protocol):
    """Users and sessions."""

    async def create_user(
        self, user: UserRecord, quotas: Quotas | None = None, *, distinct: bool = False
    ) -> bool:
        """Store a user of a tenant that exists; False (nothing written) if the tenant
        has a user of that name, or does not exist. Under `quotas`, one over `max_users`
        is `QuotaExceeded`. With `distinct`, `IdentityTaken` (nothing written) if the name
        is already a key's principal, a group member or a pending approval's approver."""
        ...

    async def get_user(self, tenant: str, name: str) -> UserRecord | None: ...

    async def list_users(self, tenant: str) -> list[UserRecord]: ...

    async def disable_user(self, tenant: str, name: str, by: str, now: float) -> bool:
        """Disable a user (a disabled one stays as it was) and end its sessions; False if
        the tenant has no such user."""
        ...

    async def set_password(self, tenant: str, name: str, password_hash: str, now: float) -> bool:
        """Replace a user's password hash, clear its failures and end its sessions."""
        ...

    async def record_sign_in(
        self, tenant: str, name: str, succeeded: bool, locked_until: float | None
    ) -> None:
        """Count a failed sign-in of a user (and hold it back until `locked_until`), or
        clear the count after a success."""
        ...

    async def reserve_sign_in(
        self, attempt: SignInAttempt, limits: SignInLimits, now: float
    ) -> HeldBy | None:
        """Count an attempt as a failure before its password is checked (None), or say
        what holds it back (nothing counted). Rows untouched for `limits.forget_after`
        are forgotten."""
        ...

    async def settle_sign_in(self, attempt: SignInAttempt, now: float) -> None:
        """An attempt reserved before succeeded: it is no failure of its address or user,
        and the user's failures in a row at that address are cleared."""
        ...

    async def create_session(self, session: SessionRecord) -> None: ...

    async def get_session(self, token_hash: str) -> SessionRecord | None:
        """The live (not ended) session of this token hash, with its user's or key's row."""
        ...

    async def end_session(self, token_hash: str, now: float) -> None: ...
