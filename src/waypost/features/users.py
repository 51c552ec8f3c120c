"""Console users and sessions: who may sign in to the console, and as whom.

A user belongs to one tenant and has roles, as an API key does, and a password of
which only an argon2id hash is kept (`argon2-cffi`, the `server` extra). A sign-in,
by a user's password or by an API key, opens a session: 256 random bits from
`secrets`, of which only the SHA-256 is stored. Every request of the console
resolves its session here, reading the user's or key's row again, so that signing
out, disabling the user, changing its password or revoking the key ends it at once,
and the roles are always the current ones.

Every refused sign-in is the one `SignInRefused`, and costs about what a good one
does (an unknown user's password is checked against a stand-in hash), so that
nobody learns which users exist. Failed sign-ins in a row hold a user back for a
while (`model/users.py`: after 5, one minute, doubling up to an hour); failures from
one address are counted in this process too and, past `ADDRESS_FAILURES` in
`ADDRESS_WINDOW` seconds, refused before any password is checked. Each attempt is
logged (tenant, user, address, outcome), never the password or key.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections import OrderedDict
from datetime import UTC, datetime
from functools import cache
from typing import Any

from waypost.engine.ports import Machinery
from waypost.errors import (
    ConfigurationError,
    SessionEnded,
    SignInRefused,
    TenantNotFound,
    Unauthenticated,
    UserExists,
    UserNotFound,
)
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role, preview
from waypost.model.logs import logger
from waypost.model.users import (
    SESSION_SECONDS,
    NewSession,
    SessionView,
    SignInKind,
    UserInfo,
    lock_seconds,
)
from waypost.store.accounts import SessionRecord, UserRecord
from waypost.store.base import Store

from .access import Access, split_key

log = logger("waypost.console.access")

ADDRESS_FAILURES = 30  # failed sign-ins from one address ...
ADDRESS_WINDOW = 900.0  # ... within this many seconds, and it is refused until the window ends
_ADDRESSES_KEPT = 10_000


@cache
def _hasher() -> Any:
    try:
        from argon2 import PasswordHasher
    except ImportError as exc:  # pragma: no cover - the server extra installs it
        raise ConfigurationError(
            "console users need argon2-cffi: pip install 'waypost[server]'"
        ) from exc
    return PasswordHasher()  # argon2id, RFC 9106's low-memory parameters


@cache
def _stand_in_hash() -> str:
    """Checked against when no user has the name, so that an unknown user costs what a
    known one does."""
    return str(_hasher().hash(secrets.token_urlsafe(16)))


def hash_password(password: str) -> str:
    return str(_hasher().hash(password))


def password_matches(password_hash: str, password: str) -> bool:
    from argon2.exceptions import InvalidHashError, VerificationError

    try:
        return bool(_hasher().verify(password_hash, password))
    except (VerificationError, InvalidHashError):
        return False


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _when(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _roles(names: tuple[str, ...]) -> tuple[Role, ...]:
    return tuple(r for r in Role if r.value in names)


def user_info(record: UserRecord) -> UserInfo:
    return UserInfo(
        tenant=record.tenant,
        name=record.name,
        roles=_roles(record.roles),
        created_at=datetime.fromtimestamp(record.created_at, UTC),
        created_by=record.created_by,
        disabled_at=_when(record.disabled_at),
        disabled_by=record.disabled_by,
        password_changed_at=_when(record.password_changed_at),
    )


class Accounts:
    """The user and session operations of one engine."""

    def __init__(self, machinery: Machinery, access: Access) -> None:
        self.machinery = machinery
        self.access = access
        self._address_failures: OrderedDict[str, tuple[int, float]] = OrderedDict()

    @property
    def store(self) -> Store:
        return self.machinery.store

    def _now(self) -> float:
        return self.machinery.settings.clock()

    def handlers(self) -> dict[type[ops.Request[Any]], Any]:
        """The door's handler of each user and session operation."""
        return {
            ops.CreateUser: self.create_user,
            ops.ListUsers: self.list_users,
            ops.DisableUser: self.disable_user,
            ops.SetPassword: self.set_password,
            ops.SignIn: self.sign_in,
            ops.ResolveSession: self.resolve_session,
            ops.SignOut: self.sign_out,
        }

    # == users =====================================================================
    async def create_user(self, req: ops.CreateUser, principal: Principal) -> UserInfo:
        now = self._now()
        record = UserRecord(
            tenant=principal.tenant,
            name=req.user,
            roles=tuple(Role(r).value for r in req.roles),
            password_hash=await asyncio.to_thread(hash_password, req.password),
            created_at=now,
            created_by=principal.subject,
            disabled_at=None,
            disabled_by=None,
            password_changed_at=now,
            failed_sign_ins=0,
            locked_until=None,
        )
        # A tenant admin makes users only for names that are nobody's yet (or its own): a
        # user named as an approver would decide as that approver (decision 0028).
        distinct = not principal.local and not principal.is_subject(req.user)
        quotas = self.machinery.settings.quotas
        if not await self.store.create_user(record, quotas, distinct=distinct):
            if not any(t.tenant == principal.tenant for t in await self.store.list_tenants()):
                raise TenantNotFound(
                    f"tenant {preview(principal.tenant)} does not exist: create it first "
                    "(waypost tenants create, or create_tenant)"
                )
            raise UserExists(f"a user {preview(req.user)} exists in this tenant already")
        log.info("user %s of %s made by %s", req.user, principal.tenant, principal.subject)
        return user_info(record)

    async def list_users(self, req: ops.ListUsers, principal: Principal) -> list[UserInfo]:
        return [user_info(r) for r in await self.store.list_users(principal.tenant)]

    async def disable_user(self, req: ops.DisableUser, principal: Principal) -> None:
        if not await self.store.disable_user(
            principal.tenant, req.user, principal.subject, self._now()
        ):
            raise UserNotFound(f"no user {preview(req.user)} in this tenant")
        log.info("user %s of %s disabled by %s", req.user, principal.tenant, principal.subject)

    async def set_password(self, req: ops.SetPassword, principal: Principal) -> None:
        password_hash = await asyncio.to_thread(hash_password, req.password)
        if not await self.store.set_password(
            principal.tenant, req.user, password_hash, self._now()
        ):
            raise UserNotFound(f"no user {preview(req.user)} in this tenant")
        log.info("password of %s in %s set by %s", req.user, principal.tenant, principal.subject)

    # == sessions ==================================================================
    async def sign_in(self, req: ops.SignIn, principal: Principal) -> NewSession:
        now = self._now()
        address = req.address or "-"
        if self._address_held(address, now):
            log.warning("sign-in from %s refused: too many failures from there", address)
            raise SignInRefused()
        try:
            if req.key is not None:
                return await self._sign_in_by_key(req.key, now)
            tenant, user, password = req.tenant or "", req.user or "", req.password or ""
            return await self._sign_in_by_password(tenant, user, password, now)
        except SignInRefused:
            self._address_failed(address, now)
            what = "an API key" if req.key is not None else f"user {preview(req.user)}"
            log.warning(
                "sign-in refused: %s of tenant %s from %s", what, preview(req.tenant), address
            )
            raise

    async def _sign_in_by_key(self, key: str, now: float) -> NewSession:
        try:
            found = await self.access.authenticate(key)
        except Unauthenticated:
            raise SignInRefused() from None
        parts = split_key(key)
        assert parts is not None  # authenticate refused any other shape
        return await self._open(found, SignInKind.KEY, parts[0], now)

    async def _sign_in_by_password(
        self, tenant: str, user: str, password: str, now: float
    ) -> NewSession:
        record = await self.store.get_user(tenant, user)
        stored = record.password_hash if record is not None else _stand_in_hash()
        matches = await asyncio.to_thread(password_matches, stored, password)
        if record is None:
            raise SignInRefused()
        if record.locked_until is not None and record.locked_until > now:
            log.warning("sign-in of %s in %s refused: held back after failures", user, tenant)
            raise SignInRefused()
        if not matches:
            failures = record.failed_sign_ins + 1
            hold = lock_seconds(failures)
            await self.store.record_sign_in(tenant, user, False, now + hold if hold else None)
            raise SignInRefused()
        if record.disabled_at is not None or not _roles(record.roles):
            raise SignInRefused()
        if record.failed_sign_ins or record.locked_until is not None:
            await self.store.record_sign_in(tenant, user, True, None)
        principal = Principal(tenant, record.name, frozenset(_roles(record.roles)))
        return await self._open(principal, SignInKind.PASSWORD, record.name, now)

    async def _open(
        self, principal: Principal, kind: SignInKind, credential: str, now: float
    ) -> NewSession:
        token = secrets.token_urlsafe(32)
        expires = now + SESSION_SECONDS
        await self.store.create_session(
            SessionRecord(
                token_hash=token_hash(token),
                tenant=principal.tenant,
                subject=principal.subject,
                kind=kind.value,
                credential=credential,
                created_at=now,
                expires_at=expires,
                user=None,
                key=None,
            )
        )
        log.info("%s of %s signed in (%s)", principal.subject, principal.tenant, kind.value)
        return NewSession(principal, kind, datetime.fromtimestamp(expires, UTC), token)

    async def resolve_session(self, req: ops.ResolveSession, principal: Principal) -> SessionView:
        if not req.token:
            raise SessionEnded()
        record = await self.store.get_session(token_hash(req.token))
        now = self._now()
        if record is None or record.expires_at <= now:
            raise SessionEnded()
        roles: tuple[Role, ...] = ()
        if record.kind == SignInKind.PASSWORD and record.user is not None:
            if record.user.disabled_at is None:
                roles = _roles(record.user.roles)
        elif record.kind == SignInKind.KEY and record.key is not None:
            key = record.key
            if key.revoked_at is None and (key.expires_at is None or key.expires_at > now):
                roles = _roles(key.roles)
        if not roles:
            raise SessionEnded()
        kind = SignInKind(record.kind)
        auth = f"console-{kind.value}"
        credential = f"{'user' if kind is SignInKind.PASSWORD else 'key'}:{record.credential}"
        return SessionView(
            Principal(
                record.tenant, record.subject, frozenset(roles), auth=auth, credential=credential
            ),
            SignInKind(record.kind),
            datetime.fromtimestamp(record.expires_at, UTC),
        )

    async def sign_out(self, req: ops.SignOut, principal: Principal) -> None:
        if req.token:
            await self.store.end_session(token_hash(req.token), self._now())

    # == failures by address =======================================================
    def _address_held(self, address: str, now: float) -> bool:
        count, since = self._address_failures.get(address, (0, now))
        if now - since > ADDRESS_WINDOW:
            self._address_failures.pop(address, None)
            return False
        return count >= ADDRESS_FAILURES

    def _address_failed(self, address: str, now: float) -> None:
        count, since = self._address_failures.pop(address, (0, now))
        if now - since > ADDRESS_WINDOW:
            count, since = 0, now
        self._address_failures[address] = (count + 1, since)
        while len(self._address_failures) > _ADDRESSES_KEPT:
            self._address_failures.popitem(last=False)
