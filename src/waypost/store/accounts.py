"""Console users and sessions in the store's vocabulary (the verbs are `Store`'s, in
`base.py`; `transactions/users.py` does them).

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
