"""A tenant's lifecycle: disabled, enabled again, deleted a batch at a time (see
`store/tenants.py`)."""

from __future__ import annotations

from ..rows import TenantRecord
from ..tenants import TENANT_TABLES, TenantPurge
from ..tx import Tx
from .quotas import tenant_record


def disable_tenant(tx: Tx, tenant: str, by: str, now: float) -> TenantRecord | None:
    tx.run("disable_tenant", {"tenant": tenant, "by": by, "now": now})
    row = tx.one("lock_tenant_row", {"tenant": tenant})
    return tenant_record(row) if row is not None else None


def enable_tenant(tx: Tx, tenant: str) -> TenantRecord | None:
    tx.run("enable_tenant", {"tenant": tenant})
    row = tx.one("lock_tenant_row", {"tenant": tenant})
    return tenant_record(row) if row is not None else None


def delete_tenant_rows(tx: Tx, tenant: str, batch: int) -> TenantPurge:
    row = tx.one("lock_tenant_row", {"tenant": tenant})
    if row is None:
        return TenantPurge(found=False, disabled=False, deleted={}, done=False)
    if row["disabled_at"] is None:
        return TenantPurge(found=True, disabled=False, deleted={}, done=False)
    deleted: dict[str, int] = {}
    left = batch
    for table in TENANT_TABLES:
        if left <= 0:
            break
        count = tx.run(f"delete_tenant_{table}", {"tenant": tenant, "limit": left})
        if count:
            deleted[table] = count
            left -= count
    done = left > 0 and tx.run("delete_tenant_row", {"tenant": tenant}) == 1
    if done:
        deleted["tenants"] = 1
    return TenantPurge(found=True, disabled=True, deleted=deleted, done=done)
