"""Console users and sessions as the engine answers them (never a password or its hash,
never a session's token after it was made)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from waypost.model.identity import Principal, Role

MIN_PASSWORD = 8  # characters
MAX_PASSWORD = 512  # characters: the door's bound on any credential
SESSION_SECONDS = 12 * 3600.0  # a session's life from sign-in
FAILURES_BEFORE_LOCK = 5  # failed sign-ins of a user in a row before it is held back
LOCK_SECONDS = 60.0  # the first hold; each further failure doubles it
MAX_LOCK_SECONDS = 3600.0


class SignInKind(StrEnum):
    """What a session was opened with."""

    PASSWORD = "password"
    KEY = "key"


@dataclass(frozen=True)
class UserInfo:
    """A console user as an admin sees it."""

    tenant: str
    name: str
    roles: tuple[Role, ...]
    created_at: datetime
    created_by: str
    disabled_at: datetime | None = None
    disabled_by: str | None = None
    password_changed_at: datetime | None = None

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None

    def to_json(self) -> dict[str, Any]:
        """The user as the API and `waypost users list --json` show it."""

        def when(moment: datetime | None) -> str | None:
            return moment.isoformat() if moment is not None else None

        return {
            "tenant": self.tenant,
            "name": self.name,
            "roles": [r.value for r in self.roles],
            "created_at": self.created_at.isoformat(),
            "created_by": self.created_by,
            "disabled_at": when(self.disabled_at),
            "disabled_by": self.disabled_by,
            "password_changed_at": when(self.password_changed_at),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> UserInfo:
        def when(text: Any) -> datetime | None:
            return datetime.fromisoformat(text) if isinstance(text, str) else None

        return UserInfo(
            tenant=str(data["tenant"]),
            name=str(data["name"]),
            roles=tuple(Role(r) for r in data["roles"]),
            created_at=datetime.fromisoformat(data["created_at"]),
            created_by=str(data["created_by"]),
            disabled_at=when(data.get("disabled_at")),
            disabled_by=data.get("disabled_by"),
            password_changed_at=when(data.get("password_changed_at")),
        )


@dataclass(frozen=True)
class NewSession:
    """A session just opened: `token` goes into the browser's cookie and is never shown
    again (only its hash is stored)."""

    principal: Principal
    kind: SignInKind
    expires_at: datetime
    token: str = field(repr=False)


@dataclass(frozen=True)
class SessionView:
    """Who a live session is, with the roles its user or key holds now."""

    principal: Principal
    kind: SignInKind
    expires_at: datetime


def lock_seconds(failures: int) -> float:
    """How long a user is held back after `failures` failed sign-ins in a row."""
    if failures < FAILURES_BEFORE_LOCK:
        return 0.0
    return min(MAX_LOCK_SECONDS, LOCK_SECONDS * 2.0 ** (failures - FAILURES_BEFORE_LOCK))


# == sign-in attempts, counted before the password is checked ============================
ADDRESS_FAILURES = 30  # failed sign-ins from one address (to any user) ...
ADDRESS_WINDOW = 900.0  # ... within this many seconds, then it is refused until the window ends
ACCOUNT_FAILURES = 50  # failed sign-ins of one user from all addresses ...
ACCOUNT_WINDOW = 3600.0  # ... within this many seconds, then it is refused everywhere
FORGET_AFTER = 86400.0  # an attempts' row untouched this long is forgotten


@dataclass(frozen=True)
class SignInLimits:
    """How attempts hold sign-ins back. One address holding a user back (after
    `FAILURES_BEFORE_LOCK` failures in a row, `lock_seconds`) holds it back from that
    address only; a user is held back from everywhere only after `account_failures` in
    `account_window`, more than one address can reach under its own holds."""

    address_failures: int = ADDRESS_FAILURES
    address_window: float = ADDRESS_WINDOW
    account_failures: int = ACCOUNT_FAILURES
    account_window: float = ACCOUNT_WINDOW
    forget_after: float = FORGET_AFTER


@dataclass(frozen=True)
class AttemptCount:
    """Failed (or still unsettled) attempts of an address, a user at an address, or a
    user, since `window_start`; `held_until` holds further ones back."""

    failures: int
    window_start: float
    held_until: float | None = None


class HeldBy(StrEnum):
    """What a refused attempt was held back by (for the log; the caller is told nothing)."""

    ADDRESS = "address"
    ACCOUNT = "account"
    USER_AT_ADDRESS = "user at address"


def _in_window(count: AttemptCount, now: float, window: float) -> AttemptCount:
    if now - count.window_start > window:
        return AttemptCount(0, now, None)
    return count


def reserve_attempt(
    address: AttemptCount,
    account: AttemptCount | None,
    pair: AttemptCount | None,
    now: float,
    limits: SignInLimits,
) -> HeldBy | tuple[AttemptCount, AttemptCount | None, AttemptCount | None]:
    """Whether an attempt may go on to check its password, and if so the counts with it
    counted as a failure already (settled when it succeeds): the address's first, so that
    one address cannot hold a user back from everywhere."""
    address = _in_window(address, now, limits.address_window)
    if address.failures >= limits.address_failures:
        return HeldBy.ADDRESS
    if pair is not None and pair.held_until is not None and pair.held_until > now:
        return HeldBy.USER_AT_ADDRESS
    if account is not None:
        account = _in_window(account, now, limits.account_window)
        if account.failures >= limits.account_failures:
            return HeldBy.ACCOUNT
    address = AttemptCount(address.failures + 1, address.window_start)
    if account is not None:
        account = AttemptCount(account.failures + 1, account.window_start)
    if pair is not None:
        failures = pair.failures + 1
        hold = lock_seconds(failures)
        pair = AttemptCount(failures, pair.window_start, now + hold if hold else None)
    return address, account, pair
