"""A tenant's lifecycle, for the platform operator: disable, enable, delete.

Disabling is one write: the keys and sessions of the tenant are refused from the next
request on, by every process (`Access.authenticate` and `Accounts.resolve_session` read
the tenant's row with the key or session), and the claims of tasks, timers, schedules
and notifications pass its work by. Nothing of its runs is changed: enabling it again
lets them go on where they stood. Deleting needs the tenant disabled and removes its
rows a batch (a transaction) at a time, every table of it (`store/tenants.py`).
"""

from __future__ import annotations

from waypost.engine.ports import Machinery
from waypost.errors import TenantNotDisabled, TenantNotFound
from waypost.model import operations as ops
from waypost.model.identity import Principal, preview
from waypost.model.logs import logger
from waypost.model.records import TenantDeletion, TenantInfo
from waypost.model.requests import handles
from waypost.store.base import TenantRecord

from .room import Room
from .stored import answer_of

log = logger("waypost.access")


def tenant_info(record: TenantRecord) -> TenantInfo:
    """A tenant as `list_tenants` shows it: its stored overrides as `quotas`."""
    return answer_of(TenantInfo, record)


def _not_found(tenant: str) -> TenantNotFound:
    return TenantNotFound(f"tenant {preview(tenant)} does not exist")


class Tenants(Room):
    """The handlers of `DisableTenant`, `EnableTenant` and `DeleteTenant`."""

    def __init__(self, machinery: Machinery) -> None:
        super().__init__(machinery)

    @handles(ops.DisableTenant)
    async def disable(self, req: ops.DisableTenant, principal: Principal) -> TenantInfo:
        now = self.machinery.settings.clock()
        record = await self.store.disable_tenant(req.tenant, principal.subject, now)
        if record is None:
            raise _not_found(req.tenant)
        log.warning(
            "tenant %s disabled by %s%s",
            req.tenant,
            principal.subject,
            f": {req.reason}" if req.reason else "",
        )
        return tenant_info(record)

    @handles(ops.EnableTenant)
    async def enable(self, req: ops.EnableTenant, principal: Principal) -> TenantInfo:
        record = await self.store.enable_tenant(req.tenant)
        if record is None:
            raise _not_found(req.tenant)
        log.warning("tenant %s enabled by %s", req.tenant, principal.subject)
        return tenant_info(record)

    @handles(ops.DeleteTenant)
    async def delete(self, req: ops.DeleteTenant, principal: Principal) -> TenantDeletion:
        purge = await self.store.delete_tenant_rows(req.tenant, req.batch)
        if not purge.found:
            raise _not_found(req.tenant)
        if not purge.disabled:
            raise TenantNotDisabled(
                f"tenant {preview(req.tenant)} is not disabled: disable it first (waypost "
                "tenants disable), so that nothing of it runs while it is deleted"
            )
        rows = sum(purge.deleted.values())
        log.warning(
            "tenant %s: %d rows deleted by %s%s",
            req.tenant,
            rows,
            principal.subject,
            " (the tenant is gone)" if purge.done else "",
        )
        return TenantDeletion(tenant=req.tenant, deleted=purge.deleted, done=purge.done)
