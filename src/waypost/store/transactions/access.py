"""Tenants and their API keys.

A key is stored as its public id and the SHA-256 of its secret, never the
secret. Every read and change is scoped by the tenant, except the lookup that
authenticates a key: that is how its tenant is learnt, and it finds only keys
whose tenant still exists. Duplicates are decided by the primary keys
(`INSERT ... ON CONFLICT DO NOTHING`), so concurrent creations of one tenant
leave one row and every other creator is told it exists.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from waypost.model.events import canonical_json
from waypost.model.quotas import Quotas

from ..rows import ApiKeyRecord, KeyCreation, NewApiKey, TenantRecord
from ..tx import Row, Tx
from .identities import refuse_taken
from .quotas import admit_one_more, tenant_record
from .records import from_row


def create_tenant(tx: Tx, tenant: str, quotas: Mapping[str, Any], by: str, now: float) -> bool:
    params = {"tenant": tenant, "now": now, "by": by, "quotas": canonical_json(dict(quotas))}
    return tx.run("insert_tenant", params) == 1


def list_tenants(tx: Tx) -> list[TenantRecord]:
    return [tenant_record(row) for row in tx.all("list_tenants", {})]


def create_api_key(
    tx: Tx, key: NewApiKey, quotas: Quotas | None = None, *, distinct: bool = False
) -> KeyCreation:
    if tx.one("tenant_exists", {"tenant": key.tenant}) is None:
        return KeyCreation.NO_TENANT
    if distinct:
        refuse_taken(tx, key.tenant, key.principal, "an API key")
    inserted = tx.run(
        "insert_api_key",
        {
            "key_id": key.key_id,
            "tenant": key.tenant,
            "principal": key.principal,
            "roles": canonical_json(list(key.roles)),
            "secret_hash": key.secret_hash,
            "now": key.now,
            "by": key.created_by,
            "expires_at": key.expires_at,
        },
    )
    if inserted != 1:
        return KeyCreation.DUPLICATE_ID
    admit_one_more(tx, key.tenant, quotas, "max_api_keys", key.now)
    return KeyCreation.CREATED


def list_api_keys(tx: Tx, tenant: str) -> list[ApiKeyRecord]:
    return [api_key_from_row(row) for row in tx.all("list_api_keys", {"tenant": tenant})]


def revoke_api_key(tx: Tx, tenant: str, key_id: str, by: str, now: float) -> bool:
    key = {"tenant": tenant, "key_id": key_id}
    if tx.run("revoke_api_key", {**key, "by": by, "now": now}) == 1:
        return True
    return tx.one("get_api_key", key) is not None  # revoked before: it stays as it was


def api_key_to_authenticate(tx: Tx, key_id: str) -> tuple[ApiKeyRecord | None, float]:
    row = tx.one("api_key_to_authenticate", {"key_id": key_id})
    clock = tx.one("clock", {})
    assert clock is not None
    if row is None:
        return None, float(clock["now"])
    key = dataclasses.replace(api_key_from_row(row), tenant_disabled_at=row["tenant_disabled_at"])
    return key, float(clock["now"])


def touch_api_key(tx: Tx, tenant: str, key_id: str, now: float, every: float) -> None:
    tx.run("touch_api_key", {"tenant": tenant, "key_id": key_id, "now": now, "stale": now - every})


def api_key_from_row(row: Row) -> ApiKeyRecord:
    return from_row(
        ApiKeyRecord,
        row,
        "key_id tenant principal secret_hash created_at created_by expires_at revoked_at"
        " revoked_by last_used_at",
        roles=roles_from_text(row["roles"]),
    )


def roles_from_text(text: str) -> tuple[str, ...]:
    """The stored roles; a damaged value grants nothing."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return ()
    if not isinstance(value, list):
        return ()
    return tuple(r for r in value if isinstance(r, str))
