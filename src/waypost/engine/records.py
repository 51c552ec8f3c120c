"""What the engine hands back to callers: run snapshots and handles."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from waypost.model.status import RunStatus

if TYPE_CHECKING:
    from waypost.model.events import Event
    from waypost.store.base import DefinitionRecord

    from .core import AsyncEngine
    from .sync import Engine


def _dt(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


@dataclass(frozen=True)
class RunInfo:
    """A run as it stands: its status, result or error, and what it waits for."""

    tenant: str
    run_id: str
    workflow: str
    version: str
    status: RunStatus
    input: Any
    result: Any
    error: dict[str, Any] | None
    waiting_for: list[dict[str, Any]]
    last_seq: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.status.finished


@dataclass(frozen=True)
class RunHandle:
    """A started run, for the synchronous `Engine`."""

    engine: Engine
    run_id: str
    tenant: str = "default"

    def get(self) -> RunInfo:
        return self.engine.get(self.run_id, tenant=self.tenant)

    def result(self, timeout: float | None = None) -> Any:
        return self.engine.result(self.run_id, timeout=timeout, tenant=self.tenant)

    def signal(self, name: str, payload: Any = None) -> None:
        self.engine.signal(self.run_id, name, payload, tenant=self.tenant)

    def cancel(self, reason: str) -> None:
        self.engine.cancel(self.run_id, reason, tenant=self.tenant)

    def history(self) -> list[Event]:
        return self.engine.history(self.run_id, tenant=self.tenant)


@dataclass(frozen=True)
class AsyncRunHandle:
    """A started run, for `AsyncEngine`."""

    engine: AsyncEngine
    run_id: str
    tenant: str = "default"

    async def get(self) -> RunInfo:
        return await self.engine.get(self.run_id, tenant=self.tenant)

    async def result(self, timeout: float | None = None) -> Any:
        return await self.engine.result(self.run_id, timeout=timeout, tenant=self.tenant)

    async def signal(self, name: str, payload: Any = None) -> None:
        await self.engine.signal(self.run_id, name, payload, tenant=self.tenant)

    async def cancel(self, reason: str) -> None:
        await self.engine.cancel(self.run_id, reason, tenant=self.tenant)

    async def history(self) -> list[Event]:
        return await self.engine.history(self.run_id, tenant=self.tenant)


@dataclass(frozen=True)
class DefinitionInfo:
    """A published version of a workflow defined as data."""

    name: str
    version: int
    digest: str
    tenant: str
    published_at: datetime
    published_by: str | None
    body: dict[str, Any]
    source: str
    created: bool = False  # this publish made the version (False: identical content existed)

    @classmethod
    def of(cls, record: DefinitionRecord, created: bool = False) -> DefinitionInfo:
        return cls(
            name=record.name,
            version=record.version,
            digest=record.digest,
            tenant=record.tenant,
            published_at=datetime.fromtimestamp(record.published_at, UTC),
            published_by=record.published_by,
            body=record.body,
            source=record.source,
            created=created,
        )


@dataclass(frozen=True)
class MigrationReport:
    """What `migrate` found (and did) for one run."""

    run_id: str
    tenant: str
    definition: str | None
    from_version: int | None
    to_version: int
    from_step: str | None
    to_step: str | None
    compatible: bool
    migrated: bool
    dry_run: bool
    reasons: list[str]
    """Why the run cannot be moved (empty when it can)."""
    notes: list[str]
    """What moving it does (approvals revoked or requested, waits started again)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "tenant": self.tenant,
            "definition": self.definition,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "from_step": self.from_step,
            "to_step": self.to_step,
            "compatible": self.compatible,
            "migrated": self.migrated,
            "dry_run": self.dry_run,
            "reasons": list(self.reasons),
            "notes": list(self.notes),
        }
