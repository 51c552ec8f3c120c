"""The machinery that moves runs: turns events into decisions and commits them.

A workflow task is processed under a per-run lock: take the live instance
from the cache if it has seen the run's whole history, else replay; feed it
the new events; commit its commands, the snapshot and the side rows (tasks,
timers) in one transaction conditioned on the last sequence number and the
workflow task's fence. A failed condition means something arrived meanwhile:
drop the instance and do it again from the store; never merge blindly.

The happy path costs one commit per step: when an attempt this engine ran
finishes and the run's instance is cached, its result and the workflow's
next decisions go into the same commit, and the next activity is inserted
already leased to this engine, so it starts without a poll.

`Runner` is what features see as `Machinery` (`ports.py`); the worker and the
scheduler see it through their own small host protocols.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from waypost.errors import (
    BrokenHistory,
    StoreCorrupted,
    StoreError,
    StoreRejected,
    WaypostError,
)
from waypost.model.codec import Codec
from waypost.model.events import Event, EventType, NewEvent
from waypost.model.logs import log_context, logger
from waypost.model.quotas import Quotas
from waypost.model.status import RunStatus
from waypost.runtime.cancellation import CANCEL_GRACE_STEP
from waypost.runtime.instance import WorkflowInstance
from waypost.runtime.registry import Registry, WorkflowDefn
from waypost.store.base import (
    ActivityTaskOp,
    ActivityUpdate,
    ClaimedTask,
    CommitResult,
    Conflict,
    CreateRunResult,
    NewRun,
    RunCommit,
    RunRecord,
    Store,
    WorkflowTaskOp,
)

from . import tracing
from .attempts import Attempt, Outcome, log_attempt_outcome, log_workflow_task
from .cache import Live, LiveRuns, RunKey, RunLocks
from .compute import ComputeLane, feed_events
from .decisions import decision_commit
from .endings import RunEnds
from .faults import Crash
from .observing import CommitWatch
from .ports import WorkflowSource
from .quotas import QUOTA_RETRY, QuotaBook, bytes_held, deferral, over_quota
from .scheduler import Scheduler
from .settings import Settings
from .starts import Starts
from .suspensions import (
    Refusals,
    broken_history,
    hold_poisoned_step,
    poisoned_workflow_task,
    suspend_latest,
    suspend_run,
)
from .worker import Worker

log = logger("waypost")
_E = EventType
# Runs whose code an operator holds: only `resume` lets it run again.
_HELD = (RunStatus.PAUSED, RunStatus.SUSPENDED)


class Runner(Starts):
    """Processes runs, runs their activities and timers, and commits what they decide."""

    def __init__(self, store: Store, registry: Registry, codec: Codec, settings: Settings) -> None:
        self.store = store
        self.registry = registry
        self.codec = codec
        self.settings = settings
        self.quotas = QuotaBook(store, settings.quotas, settings.clock)
        self.sources: list[WorkflowSource] = []
        self.worker = Worker(self)
        self.scheduler = Scheduler(self)
        self.accepting = False  # serving: take new work into this process
        self._cache = LiveRuns(settings.cache_size)
        self.watch = CommitWatch(settings.observer)
        self._locks = RunLocks()
        self._ends = RunEnds()
        self.compute = ComputeLane(
            threads=settings.compute_threads,
            cpu_limit=settings.compute_cpu_limit,
            max_waiting=settings.max_compute_waiting,
        )
        self._spawned: set[asyncio.Task[Any]] = set()
        self._on_commit_hooks: list[Callable[[], None]] = []
        self._next_store_warning = 0.0
        if hasattr(store, "inline_probe"):
            store.inline_probe = self._nearly_idle

    def _nearly_idle(self) -> bool:
        return self.worker.started <= 1 and len(self.scheduler.processing) <= 1

    def add_source(self, source: WorkflowSource) -> None:
        """Let `source` supply the code of runs no registered workflow runs."""
        self.sources.append(source)

    # == lifecycle ============================================================
    async def start_serving(self) -> None:
        if self.accepting:
            return
        self.accepting = True
        self.scheduler.start()

    async def stop_serving(self, grace: float | None = None) -> None:
        """Stop taking work; let running attempts finish for up to `grace` seconds."""
        if not self.accepting:
            return
        self.accepting = False
        await self.scheduler.stop_polling()
        grace = self.settings.shutdown_grace if grace is None else grace
        pending = [t for t in self._spawned if not t.done()]
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
        if self.accepting:
            await self.stop_serving()
        for task in list(self._spawned):
            task.cancel()
        if self._spawned:
            await asyncio.gather(*self._spawned, return_exceptions=True)
        self._cache.clear()
        self.worker.shutdown()
        self.compute.close()

    async def abandon(self) -> None:
        """Stop at once, as a crashed process would: nothing released or written."""
        self.accepting = False
        tasks = [*self.scheduler.abandon(), *self._spawned]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._cache.clear()
        self.worker.shutdown()
        self.compute.close()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._spawned.add(task)
        task.add_done_callback(self._reap)
        return task

    def _reap(self, task: asyncio.Task[Any]) -> None:
        self._spawned.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, Crash):
            log.debug("task ended by a simulated crash: %s", exc)
        elif isinstance(exc, StoreError):
            # The database failed (a restart, a lost connection): the task's lease
            # lapses and the work is taken up again; no traceback needed.
            log.warning("work put off by a database error: %s", exc)
        elif exc is not None:
            log.error("background task failed", exc_info=exc)

    def serves_workflow(self, queue: str) -> bool:
        return self.accepting and queue in self.scheduler.workflow_queues

    def wake_scheduler(self) -> None:
        self.scheduler.wake()

    def slot_freed(self) -> None:
        if self.scheduler.activities_waiting:
            self.scheduler.wake()

    def stats(self) -> dict[str, Any]:
        return {
            "cached_runs": len(self._cache),
            "running_activities": len(self.worker.inflight),
            "compute": self.compute.stats(),
            "store": getattr(self.store, "stats", {}),
        }

    # == commits ==============================================================
    async def commit(self, commit: RunCommit) -> CommitResult:
        faults = self.settings.faults
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

    async def _create(self, new: NewRun) -> CreateRunResult:
        faults = self.settings.faults
        faults.hit("commit:before")
        res = await self.store.create_run(new)
        faults.hit("commit:after")
        return res

    async def commit_and_wake(self, commit: RunCommit) -> CommitResult:
        """Commit events from outside the workflow code and have the run process them.

        The run's workflow task is leased to this engine at once if it serves the
        workflow (and processed here); otherwise it becomes claimable.
        """
        res = await self.commit(self.waking(commit))
        self.woken(commit.tenant, commit.run_id, res)
        return res

    def waking(self, commit: RunCommit) -> RunCommit:
        settings = self.settings
        commit.workflow_op = WorkflowTaskOp.CLAIM if self.accepting else WorkflowTaskOp.WAKE
        commit.owner = settings.owner
        commit.lease = settings.lease
        commit.claim_queues = self.scheduler.workflow_queues
        return commit

    def woken(self, tenant: str, run_id: str, res: CommitResult) -> None:
        if res.workflow_fence is not None:
            self.spawn(self.process(tenant, run_id, res.workflow_fence, res.workflow_queue))
        elif res.ok:
            self.scheduler.wake()

    # == runs that end, and who waits for them ================================
    def forget(self, tenant: str, run_id: str) -> None:
        self._cache.evict((tenant, run_id))

    def run_ended(self, tenant: str, run_id: str) -> None:
        self._ends.ended(tenant, run_id)

    async def wait_for_end(self, tenant: str, run_id: str, seconds: float) -> None:
        await self._ends.wait(tenant, run_id, seconds)

    def new_instance(self, defn: WorkflowDefn, tenant: str, run_id: str) -> WorkflowInstance:
        self.watch.note(tenant, run_id, defn.name)
        return WorkflowInstance(
            workflow=defn,
            activities=self.registry.activities(),
            codec=self.codec,
            tenant=tenant,
            run_id=run_id,
            clock=self.settings.clock,
            workflows=self.registry.workflow,
        )

    # == workflow tasks =======================================================
    async def process(
        self,
        tenant: str,
        run_id: str,
        fence: int,
        queue: str,
        preloaded: tuple[RunRecord, list[Event]] | None = None,
    ) -> None:
        """Process a run whose workflow task this engine holds under `fence`.

        A store error (a full disk, a database restart) is retried, backing off to every
        5 s, while this engine serves: the run moves on as soon as the store answers,
        not when the task's lease lapses. A failure that would come again as it is (a
        write the database refuses, a fault in the engine) suspends the run (`Refusals`).
        """
        key = (tenant, run_id)
        delays = itertools.chain((0.1, 0.5, 1.0, 2.0, 4.0), itertools.repeat(5.0))
        span = tracing.workflow_task(tenant, run_id, fence)
        refusals = Refusals("processing the run", tenant, run_id)
        with log_context(run_id=run_id, tenant=tenant, step=None, attempt=None), span:
            while True:
                await self._locks.acquire(key)
                try:
                    await self._process_locked(key, fence, preloaded, span)
                    return
                except Exception as exc:
                    if isinstance(exc, Crash | StoreCorrupted) or not self.accepting:
                        raise
                    preloaded = None
                    self._cache.evict(key)  # the next try replays from the store
                    if isinstance(exc, StoreError) and not isinstance(exc, StoreRejected):
                        self._store_trouble(exc)  # the store is away: wait for it
                    elif (failed := refusals.failed(exc)) is not None:
                        # Should the suspension fail too, the lease lapses (poison runs).
                        suspend = functools.partial(self._suspend, fence=fence, err=failed)
                        await suspend_latest(self, tenant, run_id, suspend)
                        return
                finally:
                    self._locks.release(key)
                await asyncio.sleep(next(delays))

    def _store_trouble(self, exc: StoreError) -> None:
        now = time.monotonic()
        if now >= self._next_store_warning:  # one line per 30 s, not one per run or attempt
            self._next_store_warning = now + 30.0
            log.warning(
                "writing to the store fails (%s); each step is retried, backing off to "
                "every 5 s, until it is recorded",
                exc,
            )

    async def _process_locked(
        self,
        key: RunKey,
        fence: int,
        preloaded: tuple[RunRecord, list[Event]] | None = None,
        span: tracing.TaskSpan | None = None,
    ) -> None:
        tenant, run_id = key
        own = None
        if span is None:  # an outcome's commit claimed the task: a span of its own
            span = own = tracing.workflow_task(tenant, run_id, fence)
        self.scheduler.processing[key] = fence
        log_workflow_task("claimed", tenant, run_id, fence)
        try:
            quotas = await self.quotas.get(tenant)
            for _ in range(8):
                live = self._cache.get(key)
                extra: list[NewEvent] = []
                if live is not None and live.fence in (fence, fence - 1) and not live.inst.closed:
                    # Nobody else held the task since this instance was built.
                    live.fence = fence
                    run, new = await self.store.load_run(tenant, run_id, live.inst.last_seq)
                    if run is None or RunStatus(run.status).finished:
                        self._cache.evict(key)
                        return
                    if self._cache.peek(key) is not live:
                        # Dropped (and closed) while the store answered, as an operator's
                        # command does: the code it held is gone; replay instead.
                        continue
                    if run.status in _HELD:
                        if await self._park(run, fence):
                            return
                        continue
                    chain = self.settings.chain
                    if any(ev.type == _E.RUN_MIGRATED for ev in new) or broken_history(
                        chain, run, new, after=live.inst
                    ):
                        # Replay loads the version the run moves to, or finds what is broken.
                        self._cache.evict(key)
                        continue
                    try:
                        await self.compute.feed(
                            live.inst, functools.partial(feed_events, live.inst, new), "its events"
                        )
                    except Exception:
                        self._cache.evict(key)  # replay from the store decides what it was
                        continue
                else:
                    self._cache.evict(key)
                    if preloaded is not None:
                        run, history = preloaded
                        preloaded = None
                    else:
                        run, history = await self.store.load_run(tenant, run_id)
                    if run is None or RunStatus(run.status).finished:
                        return
                    if run.status in _HELD:
                        if await self._park(run, fence):
                            return
                        continue
                    replayed = await self._replay(run, history, fence)
                    if replayed is None:
                        return
                    live = Live(replayed, fence)
                inst = live.inst
                span.begin(inst.started)
                commit, reserved = self._decide(
                    key, live, extra, inst.last_seq, inst.last_hash, inst.last_seq, quotas=quotas
                )
                res = await self._commit_decisions(key, commit, reserved)
                if res.ok:
                    self._committed(key, live, commit, res, reserved)
                    status = commit.snapshot.status if commit.snapshot is not None else ""
                    span.finished(status)
                    log_workflow_task("finished", tenant, run_id, fence, status)
                    return
                self.worker.unreserve(reserved)
                self._cache.evict(key)
                if res.conflict is Conflict.TIMERS:
                    await self._defer(run, live, extra, quotas)
                    return
                held = res.conflict is Conflict.HISTORY_BYTES  # suspended instead (max_run_bytes)
                if held and (res := await self.commit(bytes_held(commit, extra, inst, quotas))).ok:
                    return
                if res.conflict is not Conflict.SEQ:
                    return
            log.warning(
                "run %s/%s: gave up after repeated conflicts; it will be retried", tenant, run_id
            )
        finally:
            if own is not None:
                own.end()
            if self.scheduler.processing.get(key) == fence:
                del self.scheduler.processing[key]

    async def _park(self, run: RunRecord, fence: int) -> bool:
        """A paused or suspended run's workflow task set idle, its code not run: what
        arrives meanwhile waits in the history until an operator resumes it. False if
        something was appended meanwhile (the caller looks at the run again)."""
        now = self.settings.clock()
        res = await self.commit(
            RunCommit(
                tenant=run.tenant,
                run_id=run.run_id,
                events=[],
                now=now,
                expect_seq=run.last_seq,
                expect_hash=run.last_hash,
                workflow_fence=fence,
                workflow_op=WorkflowTaskOp.IDLE,
            )
        )
        return res.conflict is not Conflict.SEQ

    async def _replay(
        self, run: RunRecord, history: list[Event], fence: int | None
    ) -> WorkflowInstance | None:
        """The run's code rebuilt from its history; None if it cannot be (then suspended
        under `fence`; without one, left for the long way to find out why).

        A history that fails its integrity check is never replayed.
        """

        async def stop(err: Exception) -> None:  # an operator must look
            if fence is not None:
                await self._suspend(run, fence, err)

        broken = broken_history(self.settings.chain, run, history)
        if broken is not None:
            await stop(BrokenHistory(f"the run's history fails its integrity check at {broken}"))
            return None
        defn = self.registry.find_workflow(run.workflow, run.version)
        if defn is None:
            for source in self.sources:
                try:
                    defn = await source.workflow_for(run, history)
                except Exception as err:
                    if isinstance(err, StoreError) and not isinstance(err, StoreCorrupted):
                        raise
                    await stop(err)  # code that no longer loads
                    return None
                if defn is not None:
                    break
        if defn is None:
            return None
        inst = self.new_instance(defn, run.tenant, run.run_id)
        replay = functools.partial(inst.replay, history, run.processed_seq)
        try:
            await self.compute.feed(inst, replay, "its replay", events=len(history))
        except Exception as err:
            # Non-determinism, or a failure the workflow code cannot see (a broken codec).
            inst.close()
            await stop(err)
            return None
        return inst

    async def _warm(self, key: RunKey) -> Live | None:
        """The run's instance rebuilt under its idle workflow task's fence and cached (a
        step's outcome and the decision on it then go in one commit); None where the long
        way decides (the task is held, has work waiting or is not this engine's queue's)."""
        if not (queues := self.scheduler.workflow_queues) or not self._cache.size:
            return None  # it runs no workflow code, or keeps none in memory
        run, history, fence = await self.store.load_idle_run(*key, sorted(queues))
        if run is None or fence is None or run.status in _HELD:
            return None
        if (inst := await self._replay(run, history, None)) is None:
            return None
        self._cache.put(key, live := Live(inst, fence))
        return live

    async def suspend_poisoned(self, task: ClaimedTask) -> None:
        key = (task.tenant, task.run_id)
        await self._locks.acquire(key)
        try:
            self._cache.evict(key)
            err = poisoned_workflow_task(task)
            await suspend_latest(self, *key, lambda run: self._suspend(run, task.fence, err))
        finally:
            self._locks.release(key)

    async def _suspend(self, run: RunRecord, fence: int, err: Exception) -> bool:
        """Suspend the run, holding its workflow task under `fence`; False if something
        was appended meanwhile."""
        self.watch.note(run.tenant, run.run_id, run.workflow)
        return await suspend_run(self, run, fence, err, self.settings.clock())

    def _decide(
        self,
        key: RunKey,
        live: Live,
        fed: Sequence[NewEvent],
        expect_seq: int,
        expect_hash: str,
        processed_seq: int,
        activity: ActivityUpdate | None = None,
        quotas: Quotas | None = None,
    ) -> tuple[RunCommit, int]:
        """The commit for what the instance decided; also how many local slots it took.

        Under the tenant's `quotas`: a decision that would take the history past
        `max_events_per_run`, or continue as new with an input over `max_payload_bytes`,
        suspends the run instead (`over_quota`); the store checks the tenant's pending
        timers and activities in flight, and the run's bytes (then `bytes_held`).
        """
        reserved = 0
        served = self.scheduler.activity_queues
        accepting = self.accepting

        def take_locally(name: str) -> bool:
            nonlocal reserved
            local = accepting and name in served and self.worker.reserve()
            reserved += local
            return local

        settings = self.settings
        commit = decision_commit(
            live.inst,
            tenant=key[0],
            run_id=key[1],
            fence=live.fence,
            fed=fed,
            expect_seq=expect_seq,
            expect_hash=expect_hash,
            processed_seq=processed_seq,
            now=settings.clock(),
            owner=settings.owner,
            lease=settings.lease,
            take_locally=take_locally,
            activity=activity,
            start_quotas=settings.quotas,
        )
        if commit.continue_as is not None and not accepting:
            commit.owner = None  # a stopping engine leaves the next generation to others
        if quotas is not None:
            held = over_quota(commit, len(fed), quotas, live.inst.processed_seq)
            if held is not None:
                self.worker.unreserve(reserved)
                return held, 0
            if not any(t.step == CANCEL_GRACE_STEP for t in commit.new_timers):
                commit.max_pending_timers = quotas.max_pending_timers  # never holds a cancel
            commit.max_concurrent_activities = quotas.max_concurrent_activities
            commit.max_run_bytes = quotas.max_run_bytes
        return commit, reserved

    async def _defer(
        self, run: RunRecord, live: Live, extra: Sequence[NewEvent], quotas: Quotas
    ) -> None:
        """The run's decision starts timers over the tenant's `max_pending_timers`: record
        why it waits and make it decide again in `QUOTA_RETRY` seconds (nothing dropped)."""
        now = self.settings.clock()
        inst = live.inst
        commit = deferral(run, live.fence, inst.last_seq, inst.last_hash, extra, now, quotas)
        if (await self.commit(commit)).ok:
            self.scheduler.wake_at(now + QUOTA_RETRY)

    def _committed(
        self, key: RunKey, live: Live, commit: RunCommit, res: CommitResult, reserved: int
    ) -> None:
        inst = live.inst
        inst.last_seq, inst.last_hash = res.last_seq, res.last_hash
        snap = commit.snapshot
        if snap is not None and snap.status == RunStatus.SUSPENDED and not snap.finished:
            self._cache.evict(key)  # what it decided was not recorded (history full)
            inst.close()
        elif inst.finished or (snap is not None and snap.finished):
            self._cache.evict(key)
            inst.close()
            self.run_ended(*key)
            if "parent" in inst.started:
                self.scheduler.wake()  # the commit woke the parent: take it up now
        else:
            self._cache.put(key, live)
        started = 0
        queued = frozenset(res.queued_steps)
        if queued:
            self.scheduler.activities_waiting = True  # a slot that frees takes them
        for na in commit.new_activities:
            if na.owner is None or na.step in queued:
                continue
            started += 1
            attempt = Attempt(
                tenant=key[0],
                run_id=key[1],
                step=na.step,
                activity=na.activity,
                fence=1,
                attempt=1,
                spec=na.spec,
                deadline=commit.now + na.timeout,
            )
            self.worker.start(attempt)
        if started < reserved:
            self.worker.unreserve(reserved - started)
        if started < len(commit.new_activities) or commit.start_children:
            self.scheduler.wake()  # work went to the queue: a free worker may take it
        for timer in commit.new_timers:
            self.scheduler.note_timer(timer.fire_at)
        if commit.continue_as is not None:
            self.woken(*key, res)  # the next generation: processed here if this engine took it
        if commit.new_approvals or commit.escalate_approvals:
            for hook in self._on_commit_hooks:
                hook()

    def on_approvals(self, hook: Callable[[], None]) -> None:
        """Call `hook()` after a commit that asked for (or escalated) approvals."""
        self._on_commit_hooks.append(hook)

    # == activity outcomes ====================================================
    async def _commit_decisions(
        self, key: RunKey, commit: RunCommit, reserved: int
    ) -> CommitResult:
        """Commit what an instance decided; if the commit fails, the instance is stale."""
        try:
            return await self.commit(commit)
        except BaseException:
            self.worker.unreserve(reserved)
            self._cache.evict(key)
            raise

    async def report(self, a: Attempt, outcome: Outcome) -> None:
        """Record an attempt's outcome; if final, let the workflow decide in the same commit.

        A store error (a full disk, a database restart) is retried, backing off to
        every 5 s, for as long as this engine serves: the attempt stays in flight, so
        its lease is renewed as soon as the store answers again, and the outcome is
        recorded then. A stopping engine tries a few times; then, or if the store is
        damaged, the outcome is lost, the lease lapses and the step runs again. A
        write the database refuses as it is suspends the run (`Refusals`).
        """
        with log_context(run_id=a.run_id, step=a.step, attempt=a.attempt, tenant=a.tenant):
            await self._report(a, outcome)

    async def _report(self, a: Attempt, outcome: Outcome) -> None:
        key = (a.tenant, a.run_id)
        delays = itertools.chain((0.1, 0.5, 1.0, 2.0, 4.0), itertools.repeat(5.0))
        failures = 0
        refusals = Refusals(f"recording step {a.step}", *key)
        while True:
            await self._locks.acquire(key)
            try:
                await self._report_locked(key, a, outcome)
                log_attempt_outcome(a, outcome)
                self.watch.attempt(a.activity, outcome)
                return
            except StoreError as exc:
                failures += 1
                if isinstance(exc, StoreRejected) and self.accepting:
                    # Nothing written; tried a few times, then the run is suspended
                    # with the reason, the step held to run again.
                    self._cache.evict(key)
                    if (failed := refusals.failed(exc)) is not None:
                        now = self.settings.clock()
                        await hold_poisoned_step(self, a, outcome, now, self._late, failed)
                        return
                elif isinstance(exc, StoreCorrupted) or (not self.accepting and failures > 5):
                    log.error(
                        "could not record the outcome of %s step %s attempt %d (%s); "
                        "the step will run again once its lease lapses",
                        *(a.run_id, a.step, a.attempt, exc),
                    )
                    return
                else:
                    self._store_trouble(exc)
                delay = next(delays)
            finally:
                self._locks.release(key)
            await asyncio.sleep(delay)

    async def _report_locked(self, key: RunKey, a: Attempt, outcome: Outcome) -> None:
        settings = self.settings
        now = settings.clock()
        if outcome.lapses and (not outcome.retrying or outcome.lapses >= settings.max_lapses):
            # A lost engine never fails a step for good: the run waits for an operator.
            self._cache.evict(key)
            await hold_poisoned_step(self, a, outcome, now, self._late)
            return
        if not outcome.ok and outcome.retrying:
            res = await self.commit(
                RunCommit(
                    tenant=a.tenant,
                    run_id=a.run_id,
                    events=[outcome.event(a).at(now)],
                    now=now,
                    activity=ActivityUpdate(
                        a.step,
                        a.fence,
                        ActivityTaskOp.RETRY,
                        outcome.retry_at,
                        outcome.heartbeat_details,
                        lapsed=outcome.lapses > 0,
                    ),
                )
            )
            if res.conflict is Conflict.ACTIVITY_FENCE:
                await self._late(a, outcome)
            elif res.ok:
                self._advance_cached(key, res)
                if outcome.retry_at is not None:
                    self.scheduler.wake_at(outcome.retry_at)
            return

        fed = outcome.event(a).at(now)
        done = ActivityUpdate(a.step, a.fence, ActivityTaskOp.DONE)
        live = self._cache.get(key)
        if live is None and self.accepting:
            live = await self._warm(key)  # outcome and decision in one commit
        quotas = await self.quotas.get(a.tenant) if live is not None else None
        if live is not None and not live.inst.closed:
            inst = live.inst
            expect_seq, expect_hash = inst.last_seq, inst.last_hash
            outcome_event = Event(expect_seq + 1, fed.type, fed.data, now, "")
            try:
                await self.compute.feed(inst, functools.partial(inst.apply_new, outcome_event))
            except Exception:
                self._cache.evict(key)  # the slow path replays it and suspends if it must
            else:
                with tracing.workflow_task(a.tenant, a.run_id, live.fence) as span:
                    span.begin(inst.started)
                    commit, reserved = self._decide(
                        key, live, [fed], expect_seq, expect_hash, expect_seq + 1, done, quotas
                    )
                    res = await self._commit_decisions(key, commit, reserved)
                    if res.ok:
                        self._committed(key, live, commit, res, reserved)
                        span.finished(commit.snapshot.status if commit.snapshot else "")
                        return
                self.worker.unreserve(reserved)
                self._cache.evict(key)
                if res.conflict is Conflict.ACTIVITY_FENCE:
                    await self._late(a, outcome)
                    return
        res = await self.commit(
            RunCommit(
                tenant=a.tenant,
                run_id=a.run_id,
                events=[fed],
                now=now,
                activity=done,
                workflow_op=WorkflowTaskOp.CLAIM if self.accepting else WorkflowTaskOp.WAKE,
                owner=settings.owner,
                lease=settings.lease,
                claim_queues=self.scheduler.workflow_queues,
            )
        )
        if res.conflict is Conflict.ACTIVITY_FENCE:
            await self._late(a, outcome)
            return
        if res.workflow_fence is not None:
            await self._process_locked(key, res.workflow_fence)
        elif res.ok:
            self.scheduler.wake()

    def _advance_cached(self, key: RunKey, res: CommitResult) -> None:
        """Let a cached instance see events appended by this engine that need no decision."""
        live = self._cache.peek(key)
        if live is None or res.prev_seq != live.inst.last_seq:
            return
        for ev in res.events:
            live.inst.apply_new(ev)

    async def _late(self, a: Attempt, outcome: Outcome) -> None:
        """An outcome from an attempt that no longer holds its task: audit it, change nothing."""
        if outcome.synthetic:
            return  # a timeout another scheduler (or the attempt itself) already settled
        now = self.settings.clock()
        events = [outcome.late_event(a, now)]
        res = await self.commit(RunCommit(a.tenant, a.run_id, events=events, now=now))
        if res.ok:
            self._advance_cached((a.tenant, a.run_id), res)
