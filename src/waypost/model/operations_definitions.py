"""Tenant-defined workflows as requests: publish, read, migrate runs to a new version."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
class Migrate(RunRequest[Any]):
    """Check, and unless `dry_run` move, a waiting definition run (`MigrationReport`)."""

    roles = frozenset({Role.OPERATOR})
    name = "migrate"
    call = "migrate"
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
class MigrateAll(Request[Any]):
    """`Migrate` every unfinished run of one version (`list[MigrationReport]`)."""

    roles = frozenset({Role.OPERATOR})
    name = "migrate all"
    call = "migrate_all"
    http = MIGRATION_ONLY
    cli = Cli("runs migrate")
    definition: str = checked(Check.ID, what="definition name")
    from_version: int | str = checked(Check.VERSION, what="from_version")
    to_version: int | str = checked(Check.VERSION, what="to_version")
    mapping: Mapping[str, str] = checked(Check.MAPPING, default=None)
    reason: str = checked(Check.OPTIONAL_REASON, what="migrate's reason", default="")
    dry_run: bool = False
    by: str | None = checked(Check.ACTOR, what="by", default=None)

    def checked(self, principal: Principal) -> Request[Any]:
        check_migration_reason(self.dry_run, self.reason)
        return super().checked(principal)
