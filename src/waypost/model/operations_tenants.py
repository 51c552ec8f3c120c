"""Tenants' lifecycle as requests: disable, enable and delete a tenant.

Declared beside `operations.py` in the same form (and re-exported from it). Like
creating tenants, these are the platform operator's alone: the command line and the
embedded API, never an API key, whatever its roles.

- **Disable.** At once, every API key and console session of the tenant is refused
  (403 `tenant_disabled`), and nothing of its runs is claimed: no workflow task, no
  activity attempt, no timer, no schedule fire, no notification (what is in flight
  finishes). Its rows stay as they are.
- **Enable.** The keys and sessions work again, and its runs are claimed again where
  they stood (timers that came due meanwhile fire then).
- **Delete.** Removes every row of a disabled tenant, a batch (one transaction) per
  request: `TenantDeletion` says what it removed and whether anything is left. A
  tenant that is not disabled is refused (`TenantNotDisabled`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from waypost.errors import PermissionDenied
from waypost.model.identity import Principal, Role
from waypost.model.requests import Check, Cli, NotOffered, Request, checked

DELETE_BATCH = 1000  # rows a delete request removes by default


def platform_only(principal: Principal, what: str) -> None:
    """Tenants are the platform operator's: the CLI and the embedded API, never a key."""
    if not principal.local:
        raise PermissionDenied(
            f"only the platform operator (the command line or the embedded API) may {what}"
        )


@dataclass(frozen=True)
class DisableTenant(Request[Any]):
    """Disable a tenant (`TenantInfo`); platform only. Disabling a disabled tenant keeps
    when and by whom it was first disabled."""

    roles = frozenset({Role.ADMIN})
    name = "disable tenant"
    call = "disable_tenant"
    http = NotOffered(
        "a platform operator's command, with access to the database: the CLI or the embedded API"
    )
    cli = Cli("tenants disable")
    tenant: str = checked(Check.ID, what="tenant")
    reason: str = checked(Check.OPTIONAL_REASON, what="reason", default="")

    def checked(self, principal: Principal) -> Request[Any]:
        platform_only(principal, "disable tenants")
        return super().checked(principal)


@dataclass(frozen=True)
class EnableTenant(Request[Any]):
    """Enable a disabled tenant again (`TenantInfo`); platform only."""

    roles = frozenset({Role.ADMIN})
    name = "enable tenant"
    call = "enable_tenant"
    http = NotOffered(
        "a platform operator's command, with access to the database: the CLI or the embedded API"
    )
    cli = Cli("tenants enable")
    tenant: str = checked(Check.ID, what="tenant")

    def checked(self, principal: Principal) -> Request[Any]:
        platform_only(principal, "enable tenants")
        return super().checked(principal)


@dataclass(frozen=True)
class DeleteTenant(Request[Any]):
    """Delete up to `batch` rows of a disabled tenant (`TenantDeletion`); platform only.
    Send it again until the answer is `done`: the tenant's own row goes last."""

    roles = frozenset({Role.ADMIN})
    name = "delete tenant"
    call = "delete_tenant"
    http = NotOffered(
        "a platform operator's command, with access to the database: the CLI or the embedded API"
    )
    cli = Cli("tenants delete")
    tenant: str = checked(Check.ID, what="tenant")
    batch: int = checked(Check.LIMIT, what="batch", default=DELETE_BATCH)

    def checked(self, principal: Principal) -> Request[Any]:
        platform_only(principal, "delete tenants")
        return super().checked(principal)


TENANT_OPERATIONS: tuple[type[Request[Any]], ...] = (DisableTenant, EnableTenant, DeleteTenant)
