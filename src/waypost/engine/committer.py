"""The end of the engine's one-way flow: every write of a run goes to the store here.

A commit passes the engine's fault points (`commit:before`, `commit:after`) and is
counted by the `CommitWatch` as it lands; a commit the store cannot take for a reason
other than a `WaypostError` is refused (`StoreRejected`): rolled back, so nothing was
written, and it would fail again as it is.
"""

from __future__ import annotations

import time

from waypost.errors import StoreRejected, WaypostError
from waypost.store.base import CommitResult, CreateRunResult, NewRun, RunCommit, Store

from .faults import Crash, FaultPlan
from .observing import CommitWatch


class Committer:
    """Writes runs' changes to the store."""

    def __init__(self, store: Store, faults: FaultPlan, watch: CommitWatch) -> None:
        self.store = store
        self.faults = faults
        self.watch = watch

    async def commit(self, commit: RunCommit) -> CommitResult:
        """Commit one change of one run."""
        faults = self.faults
        faults.hit("commit:before")
        began = time.perf_counter()
        try:
            res = await self.store.commit_run(commit)
        except (WaypostError, Crash):
            raise
        except Exception as exc:  # rolled back, so nothing written; it would fail again
            raise StoreRejected(f"the store could not take the commit: {exc!r}") from exc
        self.watch.landed(commit, res, time.perf_counter() - began)
        faults.hit("commit:after")
        return res

    async def create(self, new: NewRun) -> CreateRunResult:
        """Create a run (or find it again)."""
        faults = self.faults
        faults.hit("commit:before")
        res = await self.store.create_run(new)
        faults.hit("commit:after")
        return res

    async def signal_with_start(
        self, new: NewRun, commit: RunCommit
    ) -> tuple[CreateRunResult, CommitResult | None]:
        """Create the run with its signal, or commit the signal to the run that has the id."""
        faults = self.faults
        faults.hit("commit:before")
        result = await self.store.signal_with_start(new, commit)
        faults.hit("commit:after")
        return result
