"""Tenants and API keys: who may call the engine from outside, and as whom.

A key reads `wpk_<key_id>_<secret>`: `key_id` is 16 hex digits, public, and is
how the key is found; `secret` is 64 hex digits, 256 bits from `secrets`. Only
the SHA-256 of the secret is stored, compared with `hmac.compare_digest`, so the
key exists in plain text once: in the `NewKey` answered when it is made.

`authenticate` is the one place a key becomes a `Principal` (the HTTP server and
the console call it). A text not of the key's exact shape is refused before
anything is looked up. Unknown, revoked and expired keys, keys whose tenant no
longer exists and keys of the wrong secret are all refused with one and the same
`Unauthenticated`: a caller cannot tell which, and the key is never logged or
quoted. A right key of a disabled tenant is `TenantDisabled` (403). Expiry is judged
by the later of the engine's and the database's clocks, so an engine whose clock lags
cannot extend a key's life. When a key was last
used is recorded at most once a minute per key, so that authenticating is a read,
not a write, for almost every request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Awaitable, Callable

from waypost.engine.ports import Machinery
from waypost.errors import (
    InvalidRequest,
    KeyNotFound,
    StoreContention,
    TenantDisabled,
    TenantExists,
    TenantNotFound,
    Unauthenticated,
)
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role, preview
from waypost.model.logs import logger
from waypost.model.records import KeyInfo, NewKey, TenantInfo
from waypost.model.requests import handles
from waypost.store.base import ApiKeyRecord, KeyCreation, NewApiKey

from .queues import Queues
from .room import Room
from .stored import answer_of, known_roles, moment
from .tenants import Tenants, tenant_info

log = logger("waypost.access")

KEY_PREFIX = "wpk_"
KEY_ID_HEX = 16  # 64 bits: unique enough to find a key, and drawn again on a collision
SECRET_HEX = 64  # 256 bits
KEY_LENGTH = len(KEY_PREFIX) + KEY_ID_HEX + 1 + SECRET_HEX
_KEY_SHAPE = re.compile(rf"wpk_([0-9a-f]{{{KEY_ID_HEX}}})_([0-9a-f]{{{SECRET_HEX}}})", re.ASCII)
TOUCH_EVERY = 60.0  # seconds between two records of a key's last use
_ID_ROUNDS = 8
# Compared against when no key has the id, so that an unknown id costs what a known one does.
_NO_HASH = hashlib.sha256(b"no such key").hexdigest()


def split_key(key: object) -> tuple[str, str] | None:
    """The key's id and secret if `key` has a key's exact shape, else None."""
    if not isinstance(key, str) or len(key) != KEY_LENGTH:
        return None
    shape = _KEY_SHAPE.fullmatch(key)
    return (shape.group(1), shape.group(2)) if shape is not None else None


def secret_hash(secret: str) -> str:
    """What is stored of a key's secret: the SHA-256 of its 32 bytes, in hex."""
    return hashlib.sha256(bytes.fromhex(secret)).hexdigest()


def key_info(record: ApiKeyRecord) -> KeyInfo:
    return answer_of(KeyInfo, record)


def tenant_disabled(tenant: str) -> TenantDisabled:
    return TenantDisabled(
        f"tenant {preview(tenant)} is disabled: its API keys and console sessions are "
        "refused until the platform operator enables it again"
    )


class Access(Room):
    """The tenant and key operations of one engine, and authenticating keys.

    `payload_limit(tenant)` says what a tenant's `max_payload_bytes` comes to when no
    quota sets it (its definitions' `Limits`).
    """

    def __init__(
        self,
        machinery: Machinery,
        payload_limit: Callable[[str], Awaitable[int]],
    ) -> None:
        super().__init__(machinery)
        self.payload_limit = payload_limit
        # The rooms of a tenant's lifecycle and of its named queues (their limits beside
        # its quotas).
        self.tenants = Tenants(machinery)
        self.queues = Queues(machinery)

    # == tenants ===================================================================
    @handles(ops.CreateTenant)
    async def create_tenant(self, req: ops.CreateTenant, principal: Principal) -> TenantInfo:
        now = self.now()
        quotas = dict(req.quotas or {})
        if not await self.store.create_tenant(req.tenant, quotas, principal.subject, now):
            raise TenantExists(f"tenant {preview(req.tenant)} exists already")
        log.info("tenant %s created by %s", req.tenant, principal.subject)
        return TenantInfo(
            tenant=req.tenant,
            created_at=moment(now),
            created_by=principal.subject,
            quotas=quotas,
        )

    @handles(ops.ListTenants)
    async def list_tenants(self, req: ops.ListTenants, principal: Principal) -> list[TenantInfo]:
        return [tenant_info(t) for t in await self.store.list_tenants()]

    # == quotas ====================================================================
    @handles(ops.GetTenant)
    async def get_tenant(self, req: ops.GetTenant, principal: Principal) -> TenantInfo:
        """The caller's tenant: its effective quotas, its overrides and what it holds now."""
        return await self._tenant_info(principal.tenant)

    @handles(ops.SetQuotas)
    async def set_quotas(self, req: ops.SetQuotas, principal: Principal) -> TenantInfo:
        """Change a tenant's quota overrides (checked at the door); platform only."""
        record = await self.store.set_quotas(req.tenant, dict(req.quotas or {}))
        if record is None:
            raise TenantNotFound(
                f"tenant {preview(req.tenant)} does not exist: create it first "
                "(waypost tenants create, or create_tenant)"
            )
        self.machinery.quotas.forget(req.tenant)
        log.info("quotas of tenant %s changed by %s: %s", req.tenant, principal.subject, req.quotas)
        return await self._tenant_info(req.tenant)

    async def _tenant_info(self, tenant: str) -> TenantInfo:
        record, usage = await self.store.tenant_state(tenant)
        overrides = record.quotas if record is not None else {}
        quotas = self.machinery.settings.quotas.effective(overrides).to_json()
        if quotas["max_payload_bytes"] is None:
            quotas["max_payload_bytes"] = await self.payload_limit(tenant)
        return TenantInfo(
            tenant=tenant,
            created_at=moment(record.created_at) if record is not None else None,
            created_by=record.created_by if record is not None else "",
            quotas=quotas,
            usage=usage,
            overrides=overrides,
            disabled_at=moment(record.disabled_at) if record is not None else None,
            disabled_by=record.disabled_by if record is not None else None,
        )

    # == keys ======================================================================
    @handles(ops.CreateKey)
    async def create_key(self, req: ops.CreateKey, principal: Principal) -> NewKey:
        now = self.now()
        expires = None if req.expires_at is None else req.expires_at.timestamp()
        if expires is not None and expires <= now:
            raise InvalidRequest("expires_at must be in the future", field="expires_at")
        roles = tuple(Role(r) for r in req.roles)
        # A tenant admin makes keys only for names that are nobody's yet (or its own): a
        # key for an approver's name would decide as that approver (decision 0028).
        distinct = not principal.local and not principal.is_subject(req.principal)
        for _ in range(_ID_ROUNDS):
            key_id, secret = secrets.token_hex(KEY_ID_HEX // 2), secrets.token_hex(SECRET_HEX // 2)
            outcome = await self.store.create_api_key(
                NewApiKey(
                    key_id=key_id,
                    tenant=principal.tenant,
                    principal=req.principal,
                    roles=tuple(r.value for r in roles),
                    secret_hash=secret_hash(secret),
                    created_by=principal.subject,
                    expires_at=expires,
                    now=now,
                ),
                self.machinery.settings.quotas,
                distinct=distinct,
            )
            if outcome is KeyCreation.NO_TENANT:
                raise TenantNotFound(
                    f"tenant {preview(principal.tenant)} does not exist: create it first "
                    "(waypost tenants create, or create_tenant)"
                )
            if outcome is KeyCreation.CREATED:
                log.info(
                    "API key %s for %s in %s made by %s",
                    key_id,
                    req.principal,
                    principal.tenant,
                    principal.subject,
                )
                return NewKey(
                    key_id=key_id,
                    key=f"{KEY_PREFIX}{key_id}_{secret}",
                    tenant=principal.tenant,
                    principal=req.principal,
                    roles=roles,
                    expires_at=moment(expires),
                )
        raise StoreContention(  # pragma: no cover - 64-bit ids do not collide 8 times
            "no unused key id was drawn; nothing was written: try again"
        )

    @handles(ops.ListKeys)
    async def list_keys(self, req: ops.ListKeys, principal: Principal) -> list[KeyInfo]:
        return [key_info(r) for r in await self.store.list_api_keys(principal.tenant)]

    @handles(ops.RevokeKey)
    async def revoke_key(self, req: ops.RevokeKey, principal: Principal) -> None:
        found = await self.store.revoke_api_key(
            principal.tenant, req.key_id, principal.subject, self.now()
        )
        if not found:
            raise KeyNotFound(
                f"no API key {preview(req.key_id)} in tenant {preview(principal.tenant)}"
            )
        log.info("API key %s in %s revoked by %s", req.key_id, principal.tenant, principal.subject)

    # == authenticating ============================================================
    async def authenticate(self, key: object) -> Principal:
        """The principal of a live key; `Unauthenticated` (always the same) otherwise."""
        parts = split_key(key)
        if parts is None:
            raise Unauthenticated()
        key_id, secret = parts
        record, database_now = await self.store.api_key_to_authenticate(key_id)
        matches = hmac.compare_digest(
            secret_hash(secret), record.secret_hash if record is not None else _NO_HASH
        )
        if record is None or not matches:
            raise Unauthenticated()
        now = self.now()
        roles = frozenset(known_roles(record.roles))
        if record.revoked_at is not None:
            log.info("API key %s of %s refused: revoked", key_id, record.tenant)
            raise Unauthenticated()
        if record.expires_at is not None and record.expires_at <= max(now, database_now):
            log.info("API key %s of %s refused: expired", key_id, record.tenant)
            raise Unauthenticated()
        if not roles:
            raise Unauthenticated()
        if record.tenant_disabled_at is not None:
            log.info("API key %s of %s refused: the tenant is disabled", key_id, record.tenant)
            raise tenant_disabled(record.tenant)
        if record.last_used_at is None or record.last_used_at < now - TOUCH_EVERY:
            await self.store.touch_api_key(record.tenant, key_id, now, TOUCH_EVERY)
        return Principal(
            record.tenant, record.principal, roles, local=False, credential=f"key:{key_id}"
        )
