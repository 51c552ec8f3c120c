"""A batch of a walk over a tenant's runs, one request at a time (`ReEncrypt`,
`SealLegacy`): the run a request names, or up to `limit` runs whose ids sort after
`after`, each given to a store call of its own transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from waypost.errors import RunNotFound
from waypost.model.identity import preview
from waypost.store.base import Store

T = TypeVar("T")


@dataclass(frozen=True)
class RunBatch:
    tenant: str
    named: str | None
    limit: int
    run_ids: list[str]

    @classmethod
    async def of(
        cls, store: Store, tenant: str, run_id: str | None, after: str | None, limit: int
    ) -> RunBatch:
        """The run `run_id` names, or up to `limit` of the tenant's runs after `after`."""
        if run_id is not None:
            return cls(tenant, run_id, limit, [run_id])
        return cls(tenant, None, limit, await store.run_ids_after(tenant, after or "", limit))

    async def each(self, act: Callable[[str], Awaitable[T | None]]) -> AsyncIterator[tuple[str, T]]:
        """Each run with what `act` did to it. A run `act` does not find (None) was purged
        since it was listed and is passed over; the run the request named raises
        `RunNotFound`."""
        for run_id in self.run_ids:
            done = await act(run_id)
            if done is None:
                if self.named is not None:
                    raise RunNotFound(f"no run {preview(run_id)} in tenant {preview(self.tenant)}")
                continue
            yield run_id, done

    @property
    def next_after(self) -> str | None:
        """The run id the next request continues after; None when no run is left."""
        more = self.named is None and len(self.run_ids) == self.limit
        return self.run_ids[-1] if more else None
