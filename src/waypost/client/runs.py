"""Run queries of `AsyncEngine`: a run, those its runs page reads (search, counts, a page
of a history, a run's data at an event) and the check of its hash chain (a mixin of thin
methods over the one door)."""

from __future__ import annotations

from typing import Any

from waypost.model import operations as ops
from waypost.model.events import ChainProblem
from waypost.model.operations_runs import DEFAULT_HISTORY_PAGE
from waypost.model.records import HistoryPage, RunInfo

from .door import LocalDoor


class RunQueryCalls:
    """Searching and counting runs, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def get(self, run_id: str, *, tenant: str = "default") -> RunInfo:
        """The run as it stands: status, result or error, what it waits for."""
        return await self._local(ops.GetRun(run_id=run_id), tenant)

    async def search_runs(
        self, text: str, *, limit: int = 50, tenant: str = "default"
    ) -> list[RunInfo]:
        """`tenant`'s runs that `text` finds, newest first: the run of that id, runs whose
        id starts with it, runs waiting with it as a correlation value (or `key=value`)."""
        return await self._local(ops.SearchRuns(text=text, limit=limit), tenant)

    async def count_runs(self, *, tenant: str = "default") -> dict[str, int]:
        """How many runs `tenant` has in each status (statuses with none left out)."""
        return await self._local(ops.CountRuns(), tenant)

    async def history_page(
        self,
        run_id: str,
        *,
        after_seq: int = 0,
        limit: int = DEFAULT_HISTORY_PAGE,
        tenant: str = "default",
    ) -> HistoryPage:
        """Part of a run's history, oldest first: the events after `after_seq`, at most
        `limit` (up to 1,000) and about 4 MB of data; `next_after` asks for the next page
        (None after the last). `history()` reads a history whole; this, a page at a time."""
        return await self._local(
            ops.PageHistory(run_id=run_id, after_seq=after_seq, limit=limit), tenant
        )

    async def data_at(
        self, run_id: str, seq: int, *, tenant: str = "default"
    ) -> dict[str, Any] | None:
        """A definition run's data, step position and whether it waits, after its event
        `seq` (its history replayed up to there; nothing is written). None for a run of
        workflow code."""
        return await self._local(ops.RunDataAt(run_id=run_id, seq=seq), tenant)

    async def verify(self, run_id: str, *, tenant: str = "default") -> list[ChainProblem]:
        """Problems in the run's hash chain (empty when the history is intact)."""
        return await self._local(ops.Verify(run_id=run_id), tenant)
