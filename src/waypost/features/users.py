"""Console users and sessions: who may sign in to the console, and as whom.

A user belongs to one tenant and has roles, as an API key does, and a password of
which only an argon2id hash is kept (`argon2-cffi`, the `server` extra). A sign-in,
by a user's password or by an API key, opens a session: 256 random bits from
`secrets`, of which only the SHA-256 is stored. Every request of the console
resolves its session here, reading the user's or key's row again, so that signing
out, disabling the user, changing its password or revoking the key ends it at once,
and the roles are always the current ones.

Every refused sign-in is the one `SignInRefused`, and costs about what a good one
does (an unknown user's password is checked against a stand-in hash, with the same
limits as any other), so that nobody learns which users exist. Each attempt is
logged (tenant, user, address, outcome), never the password or key.

Guessing is bounded before any password is checked (decision 0029):

- **Counted first.** An attempt is counted in the database as a failure before its
  password is hashed (`Store.reserve_sign_in`), and un-counted if it succeeds; an
  attempt held back is refused without a hash. So concurrent guesses cannot all pass a
  check made before any was counted, and every server process counts the same.
- **By address first.** Failures from one address (an IPv6 address's /64) past
  `ADDRESS_FAILURES` in `ADDRESS_WINDOW` seconds refuse that address; failures in a row
  of a user at one address hold that user back *at that address* (after 5, one
  minute, doubling up to an hour); a user is held back from every address only after
  `ACCOUNT_FAILURES` in `ACCOUNT_WINDOW`, more than one address can reach under its
  own holds.
- **Hashing bounded.** Passwords are hashed on a pool of `HASHERS` threads of the
  engine's own, never the default pool notifications are sent on; at most
  `HASHES_WAITING` more wait for it, and a sign-in beyond that is refused at once
  (`SignInBusy`, 503 with Retry-After) without being counted or hashed.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any, TypeVar

from waypost.engine.ports import Machinery
from waypost.errors import (
    ConfigurationError,
    SessionEnded,
    SignInBusy,
    SignInRefused,
    TenantNotFound,
    Unauthenticated,
    UserExists,
    UserNotFound,
)
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role, preview
from waypost.model.logs import logger
from waypost.model.requests import handles
from waypost.model.users import (
    ACCOUNT_FAILURES,
    ACCOUNT_WINDOW,
    ADDRESS_FAILURES,
    ADDRESS_WINDOW,
    SESSION_SECONDS,
    NewSession,
    SessionView,
    SignInKind,
    SignInLimits,
    UserInfo,
)
from waypost.store.accounts import SessionRecord, SignInAttempt, UserRecord

from .access import Access, split_key, tenant_disabled
from .room import Room
from .stored import answer_of, known_roles, moment

log = logger("waypost.console.access")
T = TypeVar("T")

HASHERS = 2  # passwords hashed at once by one engine (argon2id: ~64 MiB and tens of ms each)
HASHES_WAITING = 8  # sign-ins that may wait for a hasher; more are refused at once


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


def _check_password(stored: str | None, password: str) -> bool:
    """(On a hashing thread.) An unknown user's password is checked against the stand-in
    hash, so that it costs what a known one's does."""
    return password_matches(stored if stored is not None else _stand_in_hash(), password)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def throttled_address(address: str) -> str:
    """What sign-in throttling counts an address as: itself, or an IPv6 address's /64
    (one host's share of a network, which it may use every address of)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else ip)


def user_info(record: UserRecord) -> UserInfo:
    return answer_of(UserInfo, record)


class Accounts(Room):
    """The user and session operations of one engine."""

    def __init__(self, machinery: Machinery, access: Access) -> None:
        super().__init__(machinery)
        self.access = access
        self._hashing: ThreadPoolExecutor | None = None  # made when first needed
        self._hashes_in_flight = 0  # hashing or waiting for a hasher (this event loop's)

    def close(self) -> None:
        """Let the hashing threads go (a hash running finishes first)."""
        if self._hashing is not None:
            self._hashing.shutdown(wait=False, cancel_futures=True)
            self._hashing = None

    # == users =====================================================================
    @handles(ops.CreateUser)
    async def create_user(self, req: ops.CreateUser, principal: Principal) -> UserInfo:
        now = self.now()
        record = UserRecord(
            tenant=principal.tenant,
            name=req.user,
            roles=tuple(Role(r).value for r in req.roles),
            password_hash=await self._hash(hash_password, req.password),
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

    @handles(ops.ListUsers)
    async def list_users(self, req: ops.ListUsers, principal: Principal) -> list[UserInfo]:
        return [user_info(r) for r in await self.store.list_users(principal.tenant)]

    @handles(ops.DisableUser)
    async def disable_user(self, req: ops.DisableUser, principal: Principal) -> None:
        if not await self.store.disable_user(
            principal.tenant, req.user, principal.subject, self.now()
        ):
            raise UserNotFound(f"no user {preview(req.user)} in this tenant")
        log.info("user %s of %s disabled by %s", req.user, principal.tenant, principal.subject)

    @handles(ops.SetPassword)
    async def set_password(self, req: ops.SetPassword, principal: Principal) -> None:
        password_hash = await self._hash(hash_password, req.password)
        if not await self.store.set_password(principal.tenant, req.user, password_hash, self.now()):
            raise UserNotFound(f"no user {preview(req.user)} in this tenant")
        log.info("password of %s in %s set by %s", req.user, principal.tenant, principal.subject)

    # == sessions ==================================================================
    @handles(ops.SignIn)
    async def sign_in(self, req: ops.SignIn, principal: Principal) -> NewSession:
        address = req.address or "-"
        what = "an API key" if req.key is not None else f"user {preview(req.user)}"
        try:
            if req.key is not None:
                return await self._sign_in_by_key(req.key, address)
            tenant, user, password = req.tenant or "", req.user or "", req.password or ""
            return await self._sign_in_by_password(tenant, user, password, address)
        except SignInRefused:
            log.warning(
                "sign-in refused: %s of tenant %s from %s", what, preview(req.tenant), address
            )
            raise
        except SignInBusy:
            log.warning("sign-in of %s from %s not tried: too many at once", what, address)
            raise

    async def _reserve(self, attempt: SignInAttempt, now: float) -> None:
        """Count the attempt before its secret is checked, or refuse it held back."""
        limits = SignInLimits(
            address_failures=ADDRESS_FAILURES,
            address_window=ADDRESS_WINDOW,
            account_failures=ACCOUNT_FAILURES,
            account_window=ACCOUNT_WINDOW,
        )
        held = await self.store.reserve_sign_in(attempt, limits, now)
        if held is not None:
            log.warning("sign-in from %s held back (%s)", attempt.address, held.value)
            raise SignInRefused()

    async def _sign_in_by_key(self, key: str, address: str) -> NewSession:
        now = self.now()
        attempt = SignInAttempt(throttled_address(address))
        await self._reserve(attempt, now)
        try:
            found = await self.access.authenticate(key)
        except Unauthenticated:
            raise SignInRefused() from None
        await self.store.settle_sign_in(attempt, now)
        parts = split_key(key)
        assert parts is not None  # authenticate refused any other shape
        return await self._open(found, SignInKind.KEY, parts[0], now)

    async def _sign_in_by_password(
        self, tenant: str, user: str, password: str, address: str
    ) -> NewSession:
        attempt = SignInAttempt(throttled_address(address), tenant, user)
        self._take_hasher()  # before anything is counted: over the limit, nothing is
        try:
            now = self.now()
            await self._reserve(attempt, now)
            record = await self.store.get_user(tenant, user)
            stored = record.password_hash if record is not None else None
            matches = await self._on_hasher(_check_password, stored, password)
        finally:
            self._hashes_in_flight -= 1
        if record is None or not matches:
            raise SignInRefused()
        if record.disabled_at is not None or not known_roles(record.roles):
            raise SignInRefused()
        await self.store.settle_sign_in(attempt, now)
        if await self._tenant_disabled(tenant):  # told only to who knows the password
            raise tenant_disabled(tenant)
        principal = Principal(tenant, record.name, frozenset(known_roles(record.roles)))
        return await self._open(principal, SignInKind.PASSWORD, record.name, now)

    async def _tenant_disabled(self, tenant: str) -> bool:
        record, _ = await self.store.tenant_state(tenant)
        return record is not None and record.disabled_at is not None

    # == hashing on threads of its own ================================================
    def _take_hasher(self) -> None:
        if self._hashes_in_flight >= HASHERS + HASHES_WAITING:
            raise SignInBusy()
        self._hashes_in_flight += 1

    async def _on_hasher(self, fn: Callable[..., T], *args: Any) -> T:
        if self._hashing is None:
            self._hashing = ThreadPoolExecutor(HASHERS, thread_name_prefix="waypost-password")
        return await asyncio.get_running_loop().run_in_executor(self._hashing, fn, *args)

    async def _hash(self, fn: Callable[..., T], *args: Any) -> T:
        """An admin's hash (a new password): on the same threads, waiting its turn."""
        return await self._on_hasher(fn, *args)

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
        return NewSession(principal, kind, moment(expires), token)

    @handles(ops.ResolveSession)
    async def resolve_session(self, req: ops.ResolveSession, principal: Principal) -> SessionView:
        if not req.token:
            raise SessionEnded()
        record = await self.store.get_session(token_hash(req.token))
        now = self.now()
        if record is None or record.expires_at <= now:
            raise SessionEnded()
        roles: tuple[Role, ...] = ()
        if record.kind == SignInKind.PASSWORD and record.user is not None:
            if record.user.disabled_at is None:
                roles = known_roles(record.user.roles)
        elif record.kind == SignInKind.KEY and record.key is not None:
            key = record.key
            if key.revoked_at is None and (key.expires_at is None or key.expires_at > now):
                roles = known_roles(key.roles)
        if not roles:
            raise SessionEnded()
        if record.tenant_disabled:
            raise tenant_disabled(record.tenant)
        kind = SignInKind(record.kind)
        auth = f"console-{kind.value}"
        credential = f"{'user' if kind is SignInKind.PASSWORD else 'key'}:{record.credential}"
        return SessionView(
            Principal(
                record.tenant, record.subject, frozenset(roles), auth=auth, credential=credential
            ),
            SignInKind(record.kind),
            moment(record.expires_at),
        )

    @handles(ops.SignOut)
    async def sign_out(self, req: ops.SignOut, principal: Principal) -> None:
        if req.token:
            await self.store.end_session(token_hash(req.token), self.now())
