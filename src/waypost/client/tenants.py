"""Tenants of `AsyncEngine`: create, list, disable, enable and delete them, their
quotas, and their API keys (a mixin of thin methods over the one door)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from waypost.model import operations as ops
from waypost.model.identity import Role
from waypost.model.records import KeyInfo, NewKey, TenantDeletion, TenantInfo

from .door import LocalDoor


class TenantCalls:
    """Tenants, their quotas and API keys, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def create_tenant(
        self, tenant: str, *, quotas: Mapping[str, int] | None = None
    ) -> TenantInfo:
        """Create a tenant, so that API keys can be made for it; `TenantExists` if it is.

        `quotas` (quota name -> whole number) are stored with it. Only the platform
        operator (this API, the command line) may create tenants.
        """
        return await self._local(ops.CreateTenant(tenant=tenant, quotas=quotas), tenant)

    async def list_tenants(self) -> list[TenantInfo]:
        """Every tenant, by name."""
        return await self._local(ops.ListTenants(), "default")

    async def disable_tenant(self, tenant: str, *, reason: str = "") -> TenantInfo:
        """Disable `tenant` (`TenantNotFound` if there is none): at once every API key and
        console session of it is refused (403 `tenant_disabled`), and none of its runs'
        work is claimed (workflow tasks, activity attempts, timers, schedules,
        notifications) until it is enabled; what is running finishes. Platform only."""
        return await self._local(ops.DisableTenant(tenant=tenant, reason=reason), tenant)

    async def enable_tenant(self, tenant: str) -> TenantInfo:
        """Enable a disabled `tenant` again: its keys and sessions work, its runs go on
        where they stood (timers that came due meanwhile fire now). Platform only."""
        return await self._local(ops.EnableTenant(tenant=tenant), tenant)

    async def delete_tenant(self, tenant: str, *, batch: int = 1000) -> TenantDeletion:
        """Delete up to `batch` rows of a disabled `tenant` (its runs, histories, tasks,
        timers, approvals, definitions, schedules, keys, users, ...), in one transaction;
        call again until the answer is `done` (its own row goes last). Another tenant's
        rows are never touched. `TenantNotDisabled` unless it was disabled first.
        Platform only."""
        return await self._local(ops.DeleteTenant(tenant=tenant, batch=batch), tenant)

    async def create_key(
        self,
        principal: str,
        roles: Sequence[Role | str],
        *,
        expires_at: datetime | None = None,
        tenant: str = "default",
    ) -> NewKey:
        """Make an API key for `principal` in `tenant` (which must exist), with `roles`.

        The answer's `key` is the secret a client sends (`Authorization: Bearer ...`):
        it is shown this once and only its hash is stored. `expires_at` (with a time
        zone) must be in the future; without it the key lives until revoked.
        """
        request = ops.CreateKey(principal=principal, roles=roles, expires_at=expires_at)
        return await self._local(request, tenant)

    async def list_keys(self, *, tenant: str = "default") -> list[KeyInfo]:
        """The API keys of `tenant`, revoked and expired ones too (never their secrets)."""
        return await self._local(ops.ListKeys(), tenant)

    async def revoke_key(self, key_id: str, *, tenant: str = "default") -> None:
        """Revoke an API key of `tenant`: it stops working at once (`KeyNotFound` if none)."""
        await self._local(ops.RevokeKey(key_id=key_id), tenant)

    async def get_tenant(self, *, tenant: str = "default") -> TenantInfo:
        """`tenant`'s effective quotas (`.quotas`: the `quotas` option with the tenant's
        overrides), its overrides (`.overrides`) and what it holds now (`.usage`:
        running_runs, activities_in_flight, pending_timers, definitions)."""
        return await self._local(ops.GetTenant(), tenant)

    async def set_quotas(self, tenant: str, quotas: Mapping[str, Any]) -> TenantInfo:
        """Override some of `tenant`'s quotas (the tenant must exist); answers as `get_tenant`.

        `quotas` maps quota names to a number, None (or "unlimited") for no limit, or
        "default" to take this engine's `quotas` option again. Admissions read the
        change at once, on every engine; what engines keep in memory (payload size,
        history length, activity leases) within 5 seconds.
        """
        return await self._local(ops.SetQuotas(tenant=tenant, quotas=quotas), tenant)
