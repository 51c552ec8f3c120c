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
from typing import Any, ClassVar, TypeVar

from waypost.errors import PermissionDenied
from waypost.model.identity import Principal, Role
from waypost.model.requests import PLATFORM_ONLY, Check, Cli, Request, checked

T = TypeVar("T")

DELETE_BATCH = 1000  # rows a delete request removes by default


def platform_only(principal: Principal, what: str) -> None:
    """Tenants are the platform operator's: the CLI and the embedded API, never a key."""
    if not principal.local:
        raise PermissionDenied(
            f"only the platform operator (the command line or the embedded API) may {what}"
        )


@dataclass(frozen=True)
class PlatformCommand(Request[T]):
    """A command of the platform operator's (`platform_only`): an admin's, and then only
    from the CLI or the embedded API, never over HTTP. `refused` is what the refusal of
    any other caller says it may not do."""

    roles = frozenset({Role.ADMIN})
    http = PLATFORM_ONLY
    refused: ClassVar[str] = ""

    def checked(self, principal: Principal) -> Request[T]:
        platform_only(principal, self.refused)
        return super().checked(principal)


@dataclass(frozen=True)
class TenantCommand(PlatformCommand[T]):
    """A platform operator's command on one tenant. With a `verb`, its surfaces are made
    from it: `<verb> tenant`, the engine's `<verb>_tenant`, `waypost tenants <verb>`, and
    a refusal that says the caller may not `<verb> tenants`."""

    tenant: str = checked(Check.ID, what="tenant")

    @classmethod
    def declare(cls, verb: str) -> None:
        cls.name = f"{verb} tenant"
        cls.call = f"{verb}_tenant"
        cls.cli = Cli(f"tenants {verb}")
        cls.refused = f"{verb} tenants"


@dataclass(frozen=True)
class DisableTenant(TenantCommand[Any], verb="disable"):
    """Disable a tenant (`TenantInfo`); platform only. Disabling a disabled tenant keeps
    when and by whom it was first disabled."""

    reason: str = checked(Check.OPTIONAL_REASON, what="reason", default="")


@dataclass(frozen=True)
class EnableTenant(TenantCommand[Any], verb="enable"):
    """Enable a disabled tenant again (`TenantInfo`); platform only."""


@dataclass(frozen=True)
class DeleteTenant(TenantCommand[Any], verb="delete"):
    """Delete up to `batch` rows of a disabled tenant (`TenantDeletion`); platform only.
    Send it again until the answer is `done`: the tenant's own row goes last."""

    batch: int = checked(Check.LIMIT, what="batch", default=DELETE_BATCH)


TENANT_OPERATIONS: tuple[type[Request[Any]], ...] = (DisableTenant, EnableTenant, DeleteTenant)
