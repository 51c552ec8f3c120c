"""Tenant-defined workflows as requests: publish, read, migrate runs to a new version."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from waypost.errors import InvalidRequest
from waypost.model.identity import (
    Principal,
    Role,
)
from waypost.model.requests import (
    MIGRATION_ONLY,
    READERS,
    REMOTE_LATER,
    Check,
    Cli,
    Http,
    Request,
    RunRequest,
    checked,
)

T = TypeVar("T")


def check_migration_reason(dry_run: bool, reason: str | None) -> None:
    """A migration that moves runs needs a reason: it is recorded in their histories."""
    if not dry_run and not str(reason or "").strip():
        raise InvalidRequest(
            "migrate needs a reason (it is recorded in the run's history)", field="reason"
        )


# == definitions =======================================================================
@dataclass(frozen=True)
class Publish(Request[Any]):
    """Validate a definition and freeze it as a version (`DefinitionInfo`)."""

    roles = frozenset({Role.OPERATOR})
    name = "publish"
    call = "publish"
    remote = REMOTE_LATER
    http = Http("POST", "/v1/definitions", status=201, tag="definitions")
    cli = Cli("definitions publish")
    definition: str | bytes | dict[str, Any]
    by: str | None = checked(Check.ON_BEHALF, what="by", default=None)
    limits: Any = checked(Check.LOCAL_ONLY, what="limits", default=None)

    def checked(self, principal: Principal) -> Request[Any]:
        if not isinstance(self.definition, str | bytes | dict):
            raise InvalidRequest(
                "a definition is YAML or JSON text, or a dict, not "
                f"{type(self.definition).__name__}",
                field="definition",
            )
        return super().checked(principal)


@dataclass(frozen=True)
class ListDefinitions(Request[Any]):
    """Published versions (`list[DefinitionInfo]`): of every definition, or `definition`'s."""

    roles = READERS
    name = "definitions"
    call = "definitions"
    remote = REMOTE_LATER
    http = Http("GET", "/v1/definitions", tag="definitions")
    cli = Cli("definitions list")
    definition: str | None = checked(Check.OPTIONAL_ID, what="definition", default=None)


@dataclass(frozen=True)
class GetDefinition(Request[Any]):
    """One published version, the newest by default (`DefinitionInfo`)."""

    roles = READERS
    name = "definition"
    call = "definition"
    remote = REMOTE_LATER
    http = Http("GET", "/v1/definitions/{name:id}/{version}", tag="definitions")
    cli = Cli("definitions show")
    definition: str = checked(Check.ID, what="definition name")
    version: int | None = checked(Check.VERSION, default=None)


@dataclass(frozen=True)
class Migration(Request[Any]):
    """A move of waiting definition runs to version `to_version` (an operator's, from the
    CLI or the embedded API), its steps renamed by `mapping`; unless `dry_run`, it needs a
    reason, recorded in each run's history."""

    roles = frozenset({Role.OPERATOR})
    http = MIGRATION_ONLY
    cli = Cli("runs migrate")
    to_version: int | str = checked(Check.VERSION, what="to_version")
    mapping: Mapping[str, str] = checked(Check.MAPPING, default=None)
    reason: str = checked(Check.OPTIONAL_REASON, what="migrate's reason", default="")
    dry_run: bool = False
    by: str | None = checked(Check.ACTOR, what="by", default=None)

    def checked(self, principal: Principal) -> Request[Any]:
        check_migration_reason(self.dry_run, self.reason)
        return super().checked(principal)


@dataclass(frozen=True)
class DefinitionVersion(Request[T]):
    """A request about the runs of one version of a definition (`definition`,
    `from_version`), named by its first fields."""

    definition: str = checked(Check.ID, what="definition name")
    from_version: int | str = checked(Check.VERSION, what="from_version")


@dataclass(frozen=True)
class Migrate(Migration, RunRequest[Any]):
    """Check, and unless `dry_run` move, a waiting definition run (`MigrationReport`)."""

    name = "migrate"
    call = "migrate"


@dataclass(frozen=True)
class MigrateAll(Migration, DefinitionVersion[Any]):
    """`Migrate` every unfinished run of one version (`list[MigrationReport]`)."""

    name = "migrate all"
    call = "migrate_all"
