"""The engine's composition: the parts that move runs, wired so calls run one way.

    Scheduler (claims, timers, leases) ─┐      Worker (attempts) ─┐
                                        ▼                         ▼
    Starts ──────────────────────► WorkflowTasks ◄──────────── Outcomes
                                        ▼
                                    Committer ──► Store

Dispatch hands work on; workflow tasks and outcomes commit through the
`Committer`; nothing below calls back up. What must flow back is a signal on a
small shared object: `Wakeups` (look for work), `HeldTasks` (leases to renew),
`Serving` (the queues served), `Background` (tasks to cancel on close).

`Runner` is what features see as `Machinery` (`ports.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from waypost.model.codec import Codec
from waypost.model.logs import logger
from waypost.runtime.instance import WorkflowInstance
from waypost.runtime.registry import Registry, WorkflowDefn
from waypost.store.base import CommitResult, RunCommit, Store

from .attempts import Attempt, Outcome
from .committer import Committer
from .compute import ComputeLane
from .observing import CommitWatch
from .outcomes import Outcomes
from .ports import WorkflowSource
from .quotas import QuotaBook
from .scheduler import Scheduler
from .settings import Settings
from .signals import Shared
from .starts import Starts
from .worker import Worker
from .workflow_tasks import WorkflowTasks

log = logger("waypost")


class Runner:
    """Processes runs, runs their activities and timers, and commits what they decide."""

    def __init__(self, store: Store, registry: Registry, codec: Codec, settings: Settings) -> None:
        self.store = store
        self.registry = registry
        self.codec = codec
        self.settings = settings
        self.quotas = QuotaBook(store, settings.quotas, settings.clock)
        self.watch = CommitWatch(settings.observer)
        self.compute = ComputeLane(
            threads=settings.compute_threads,
            cpu_limit=settings.compute_cpu_limit,
            max_waiting=settings.max_compute_waiting,
        )
        shared = Shared(settings)
        self.background, self.serving = shared.background, shared.serving
        self.wakeups, self.held = shared.wakeups, shared.held
        self.committer = Committer(store, settings.faults, self.watch)
        self.worker = Worker(shared, store, registry, codec, self._report)
        self.tasks = WorkflowTasks(shared, self.committer, self.worker, self.quotas, self.compute)
        self._cache, self._ends = self.tasks.cache, self.tasks.ends
        self.outcomes = Outcomes(self.tasks)
        self.starts = Starts(shared, self.committer, self.tasks)
        self.start_run = self.starts.start_run
        self.scheduler = Scheduler(shared, store, self.worker, self.tasks, self.outcomes.report)
        store.use_idle_probe(self._nearly_idle)

    async def _report(self, attempt: Attempt, outcome: Outcome) -> None:
        # The worker is built before the outcomes it reports to (they start its attempts).
        await self.outcomes.report(attempt, outcome)

    def _nearly_idle(self) -> bool:
        return self.worker.started <= 1 and len(self.held) <= 1

    @property
    def accepting(self) -> bool:
        """Whether this engine serves: takes new work into this process."""
        return self.serving.accepting

    def add_source(self, source: WorkflowSource) -> None:
        """Let `source` supply the code of runs no registered workflow runs."""
        self.tasks.sources.append(source)

    def on_approvals(self, hook: Callable[[], None]) -> None:
        """Call `hook()` after a commit that asked for (or escalated) approvals."""
        self.tasks.on_approvals(hook)

    # == lifecycle ============================================================
    async def start_serving(self) -> None:
        if self.serving.accepting:
            return
        self.serving.accept(True)
        self.scheduler.start()

    async def stop_serving(self, grace: float | None = None) -> None:
        """Stop taking work; let running attempts finish for up to `grace` seconds."""
        if not self.serving.accepting:
            return
        self.serving.accept(False)
        await self.scheduler.stop_polling()
        grace = self.settings.shutdown_grace if grace is None else grace
        pending = self.background.pending()
        if pending:
            _, still = await asyncio.wait(pending, timeout=grace)
            if still:
                log.warning(
                    "%d task(s) still running after the %.1fs shutdown grace; "
                    "their leases will lapse",
                    len(still),
                    grace,
                )
        await self.scheduler.stop()

    async def close(self) -> None:
        """Stop serving gracefully, cancel what is left, drop every live run."""
        if self.serving.accepting:
            await self.stop_serving()
        for task in self.background.all():
            task.cancel()
        if self.background:
            await asyncio.gather(*self.background.all(), return_exceptions=True)
        self._cache.clear()
        self.worker.shutdown()
        self.compute.close()

    async def abandon(self) -> None:
        """Stop at once, as a crashed process would: nothing released or written."""
        self.serving.accept(False)
        tasks = [*self.scheduler.abandon(), *self.background.all()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._cache.clear()
        self.worker.shutdown()
        self.compute.close()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self.background.spawn(coro)

    def serves_workflow(self, queue: str) -> bool:
        return self.serving.workflow(queue)

    def wake_scheduler(self) -> None:
        self.wakeups.wake()

    def stats(self) -> dict[str, Any]:
        return {
            "cached_runs": len(self._cache),
            "running_activities": len(self.worker.inflight),
            "compute": self.compute.stats(),
            "store": getattr(self.store, "stats", {}),
        }

    # == commits and starts ===================================================
    async def commit(self, commit: RunCommit) -> CommitResult:
        return await self.committer.commit(commit)

    async def commit_and_wake(self, commit: RunCommit) -> CommitResult:
        """Commit events from outside the workflow code and have the run process them.

        The run's workflow task is leased to this engine at once if it serves the
        workflow (and processed here); otherwise it becomes claimable.
        """
        res = await self.commit(self.waking(commit))
        self.woken(commit.tenant, commit.run_id, res)
        return res

    def waking(self, commit: RunCommit) -> RunCommit:
        return self.tasks.waking(commit)

    def woken(self, tenant: str, run_id: str, res: CommitResult) -> None:
        self.tasks.woken(tenant, run_id, res)

    # == runs that end, and who waits for them ================================
    def forget(self, tenant: str, run_id: str) -> None:
        self._cache.evict((tenant, run_id))

    def run_ended(self, tenant: str, run_id: str) -> None:
        self._ends.ended(tenant, run_id)

    async def wait_for_end(self, tenant: str, run_id: str, seconds: float) -> None:
        await self._ends.wait(tenant, run_id, seconds)

    def new_instance(self, defn: WorkflowDefn, tenant: str, run_id: str) -> WorkflowInstance:
        return self.tasks.new_instance(defn, tenant, run_id)
