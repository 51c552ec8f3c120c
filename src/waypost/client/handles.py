"""`AsyncRunHandle`: a started run of `AsyncEngine`, to read, wait for, signal and cancel;
`UpdateHandle`: an accepted update, to wait for its result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from waypost.model.events import Event
from waypost.model.records import RunInfo


class RunCalls(Protocol):
    """What a handle calls of its engine (`AsyncEngine`)."""

    async def get(self, run_id: str, *, tenant: str = ...) -> RunInfo: ...
    async def result(
        self, run_id: str, *, timeout: float | None = ..., tenant: str = ...
    ) -> Any: ...
    async def signal(
        self, run_id: str, name: str, payload: Any = ..., *, tenant: str = ...
    ) -> None: ...
    async def cancel(self, run_id: str, reason: str, *, tenant: str = ...) -> None: ...
    async def history(self, run_id: str, *, tenant: str = ...) -> list[Event]: ...


@dataclass(frozen=True)
class AsyncRunHandle:
    """A started run, for `AsyncEngine`."""

    engine: RunCalls
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
class UpdateHandle:
    """An update a run accepted (validated and recorded in its history), from
    `start_update`: `result()` waits for what its handler returns."""

    run_id: str
    update_id: str
    name: str
    tenant: str | None = "default"  # None: a remote client's (its API key decides)
    engine: Any = field(default=None, repr=False, compare=False)

    def result(self, timeout: float = 60.0) -> Any:
        """What the update's handler returned (awaitable from `AsyncEngine` and
        `AsyncClient`): `UpdateFailed` if it raised, `UpdateTimeout` if it has not
        completed within `timeout` seconds (ask again: it goes on)."""
        where = {} if self.tenant is None else {"tenant": self.tenant}
        return self.engine.update(
            self.run_id, self.name, update_id=self.update_id, timeout=timeout, **where
        )
