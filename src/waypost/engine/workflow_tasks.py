"""Workflow tasks: turn a run's events into decisions and hand them to the committer.

A workflow task is processed under a per-run lock: take the live instance
from the cache if it has seen the run's whole history, else replay; feed it
the new events; commit its commands, the snapshot and the side rows (tasks,
timers) in one transaction conditioned on the last sequence number and the
workflow task's fence. A failed condition means something arrived meanwhile:
drop the instance and do it again from the store; never merge blindly.

The dispatcher (`scheduler.py`), a start or an activity's outcome (`outcomes.py`)
hands a task here; what is decided goes to the `Committer`, activities it starts
here to the `Worker`, and what the dispatcher should look at to `Wakeups`.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from waypost.errors import BrokenHistory, StoreCorrupted, StoreError, StoreRejected
from waypost.model.codec import Codec
from waypost.model.events import Event, EventType, NewEvent
from waypost.model.logs import log_context, logger
from waypost.model.quotas import Quotas
from waypost.model.status import RunStatus
from waypost.runtime.instance import WorkflowInstance
from waypost.runtime.registry import Registry, WorkflowDefn
from waypost.store.base import (
    NO_LIMITS,
    ClaimedTask,
    CommitResult,
    Conflict,
    Limits,
    RunCommit,
    RunRecord,
    Store,
    WorkflowTaskOp,
)
from waypost.store.effects import (
    ContinueAsNew,
    EscalateApprovals,
    OpenApprovals,
    ScheduleActivities,
    SettleActivity,
    StartChildren,
    StartTimers,
)
from waypost.store.landing import came_late
from waypost.store.reach import warn_unless_away

from . import tracing
from .attempts import Attempt, log_workflow_task
from .cache import Live, LiveRuns, Loaded, RunKey, RunLocks
from .committer import Committer
from .compute import ComputeLane, feed_events
from .decisions import decision_commit, decision_limits
from .endings import RunEnds
from .faults import Crash
from .observing import CommitWatch
from .ports import WorkflowSource
from .quotas import QUOTA_RETRY, QuotaBook, bytes_held, deferral, over_quota
from .signals import Shared
from .suspensions import (
    Refusals,
    broken_history,
    poisoned_workflow_task,
    suspend_latest,
    suspend_run,
)
from .worker import Worker

log = logger("waypost")
_E = EventType
# Runs whose code an operator holds: only `resume` lets it run again.
_HELD = (RunStatus.PAUSED, RunStatus.SUSPENDED)


class _Next(enum.Enum):
    STOP = "stop"  # the task is done with (or left for the long way)
    AGAIN = "again"  # look at the run again


class StoreTrouble:
    """Warns that writing to the store fails: one line per 30 s, not one per run or attempt
    (at debug level while the store is away: it said so itself)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._next_warning = 0.0

    def __call__(self, exc: StoreError) -> None:
        now = time.monotonic()
        if now >= self._next_warning:
            self._next_warning = now + 30.0
            warn_unless_away(
                log,
                self.store,
                "writing to the store fails (%s); each step is retried, backing off to "
                "every second, until it is recorded",
                exc,
            )


class WorkflowTasks:
    """Processes runs' workflow tasks and commits what their code decides."""

    def __init__(
        self,
        shared: Shared,
        committer: Committer,
        worker: Worker,
        quotas: QuotaBook,
        compute: ComputeLane,
    ) -> None:
        self.settings = settings = shared.settings
        self.background, self.serving = shared.background, shared.serving
        self.wakeups, self.held = shared.wakeups, shared.held
        self.committer, self.worker, self.quotas, self.compute = committer, worker, quotas, compute
        self.store: Store = committer.store
        self.watch: CommitWatch = committer.watch
        self.registry: Registry = worker.registry
        self.codec: Codec = worker.codec
        self.cache = LiveRuns(settings.cache_size)
        self.locks = RunLocks()
        self.ends = RunEnds()  # who waits for runs to end
        self.sources: list[WorkflowSource] = []
        self.store_trouble = StoreTrouble(self.store)
        self._on_approvals: list[Callable[[], None]] = []
        self._limits: tuple[Quotas, Limits] | None = None  # the last quotas' (`decide`)

    async def commit(self, commit: RunCommit) -> CommitResult:
        return await self.committer.commit(commit)

    def on_approvals(self, hook: Callable[[], None]) -> None:
        """Call `hook()` after a commit that asked for (or escalated) approvals."""
        self._on_approvals.append(hook)

    # == waking runs ==========================================================
    def waking(self, commit: RunCommit) -> RunCommit:
        settings = self.settings
        return replace(
            commit,
            workflow_op=WorkflowTaskOp.CLAIM if self.serving.accepting else WorkflowTaskOp.WAKE,
            owner=settings.owner,
            lease=settings.lease,
            claim_queues=self.serving.workflow_queues,
        )

    def woken(self, tenant: str, run_id: str, res: CommitResult) -> None:
        if res.workflow_fence is not None:
            self.start_processing(tenant, run_id, res.workflow_fence, res.workflow_queue)
        elif res.ok:
            self.wakeups.wake()

    def start_processing(
        self, tenant: str, run_id: str, fence: int, queue: str, preloaded: Loaded | None = None
    ) -> asyncio.Task[None]:
        """Process, in the background, a run whose workflow task this engine holds."""
        return self.background.spawn(self.process(tenant, run_id, fence, queue, preloaded))

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
        self, tenant: str, run_id: str, fence: int, queue: str, preloaded: Loaded | None = None
    ) -> None:
        """Process a run whose workflow task this engine holds under `fence`.

        A store error (a full disk, a database restart) is retried, backing off to every
        second, while this engine serves: the run moves on as soon as the store answers,
        not when the task's lease lapses. A failure that would come again as it is (a
        write the database refuses, a fault in the engine) suspends the run (`Refusals`).
        """
        key = (tenant, run_id)
        delays = itertools.chain((0.1, 0.25, 0.5), itertools.repeat(1.0))
        span = tracing.workflow_task(tenant, run_id, fence)
        refusals = Refusals("processing the run", tenant, run_id)
        with log_context(run_id=run_id, tenant=tenant, step=None, attempt=None), span:
            while True:
                await self.locks.acquire(key)
                try:
                    await self.process_locked(key, fence, preloaded, span)
                    return
                except Exception as exc:
                    if isinstance(exc, Crash | StoreCorrupted) or not self.serving.accepting:
                        raise
                    preloaded = None
                    self.cache.evict(key)  # the next try replays from the store
                    if isinstance(exc, StoreError) and not isinstance(exc, StoreRejected):
                        self.store_trouble(exc)  # the store is away: wait for it
                    elif (failed := refusals.failed(exc)) is not None:
                        # Should the suspension fail too, the lease lapses (poison runs).
                        suspend = functools.partial(self._suspend, fence=fence, err=failed)
                        await suspend_latest(self.committer, tenant, run_id, suspend)
                        return
                finally:
                    self.locks.release(key)
                await asyncio.sleep(next(delays))

    async def process_locked(
        self,
        key: RunKey,
        fence: int,
        preloaded: Loaded | None = None,
        span: tracing.TaskSpan | None = None,
    ) -> None:
        """Process the run's workflow task under `fence`, its lock held."""
        tenant, run_id = key
        own = None
        if span is None:  # an outcome's commit claimed the task: a span of its own
            span = own = tracing.workflow_task(tenant, run_id, fence)
        self.held.hold(key, fence)
        log_workflow_task("claimed", tenant, run_id, fence)
        try:
            quotas = await self.quotas.get(tenant)
            for _ in range(8):
                live = self.cache.get(key)
                if live is not None and live.fence in (fence, fence - 1) and not live.inst.closed:
                    # Nobody else held the task since this instance was built.
                    found = await self._catch_up(key, live, fence)
                else:
                    self.cache.evict(key)
                    found = await self._rebuild(key, fence, preloaded)
                    preloaded = None
                if found is _Next.STOP:
                    return
                if found is _Next.AGAIN:
                    continue
                run, live = found
                if await self._decide_and_commit(key, run, live, quotas, span):
                    return
            log.warning(
                "run %s/%s: gave up after repeated conflicts; it will be retried", tenant, run_id
            )
        finally:
            if own is not None:
                own.end()
            self.held.release(key, fence)

    async def _catch_up(
        self, key: RunKey, live: Live, fence: int
    ) -> tuple[RunRecord, Live] | _Next:
        """Feed the cached instance what was appended since it last looked."""
        tenant, run_id = key
        live.fence = fence
        run, new = await self.store.load_run(tenant, run_id, live.inst.last_seq)
        if run is None or RunStatus(run.status).finished:
            self.cache.evict(key)
            return _Next.STOP
        if self.cache.peek(key) is not live:
            # Dropped (and closed) while the store answered, as an operator's
            # command does: the code it held is gone; replay instead.
            return _Next.AGAIN
        if run.status in _HELD:
            return _Next.STOP if await self._park(run, fence) else _Next.AGAIN
        chain = self.settings.chain
        if any(ev.type == _E.RUN_MIGRATED for ev in new) or broken_history(
            chain, run, new, after=live.inst
        ):
            # Replay loads the version the run moves to, or finds what is broken.
            self.cache.evict(key)
            return _Next.AGAIN
        try:
            await self.compute.feed(
                live.inst, functools.partial(feed_events, live.inst, new), "its events"
            )
        except Exception:
            self.cache.evict(key)  # replay from the store decides what it was
            return _Next.AGAIN
        return run, live

    async def _rebuild(
        self, key: RunKey, fence: int, preloaded: Loaded | None
    ) -> tuple[RunRecord, Live] | _Next:
        """The run's instance replayed from its history (`preloaded`, or the store's)."""
        tenant, run_id = key
        run: RunRecord | None
        if preloaded is not None:
            run, history = preloaded
        else:
            run, history = await self.store.load_run(tenant, run_id)
        if run is None or RunStatus(run.status).finished:
            return _Next.STOP
        if run.status in _HELD:
            return _Next.STOP if await self._park(run, fence) else _Next.AGAIN
        replayed = await self._replay(run, history, fence)
        if replayed is None:
            return _Next.STOP
        return run, Live(replayed, fence)

    async def _decide_and_commit(
        self, key: RunKey, run: RunRecord, live: Live, quotas: Quotas, span: tracing.TaskSpan
    ) -> bool:
        """Commit what the instance decides; False if the run must be looked at again."""
        tenant, run_id = key
        extra: list[NewEvent] = []
        inst = live.inst
        span.begin(inst.started)
        commit, reserved = self.decide(
            key, live, extra, inst.last_seq, inst.last_hash, inst.last_seq, quotas=quotas
        )
        res = await self.commit_decisions(key, commit, reserved)
        if res.ok:
            self.committed(key, live, commit, res, reserved)
            status = commit.snapshot.status if commit.snapshot is not None else ""
            span.finished(status)
            log_workflow_task("finished", tenant, run_id, live.fence, status)
            return True
        self.worker.unreserve(reserved)
        self.cache.evict(key)
        if res.conflict is Conflict.TIMERS:
            await self._defer(run, live, extra, quotas)
            return True
        held = res.conflict is Conflict.HISTORY_BYTES  # suspended instead (max_run_bytes)
        if held and (res := await self.commit(bytes_held(commit, extra, inst, quotas))).ok:
            return True
        return res.conflict is not Conflict.SEQ

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

    async def warm(self, key: RunKey) -> Live | None:
        """The run's instance rebuilt under its idle workflow task's fence and cached (a
        step's outcome and the decision on it then go in one commit); None where the long
        way decides (the task is held, has work waiting or is not this engine's queue's)."""
        if not (queues := self.serving.workflow_queues) or not self.cache.size:
            return None  # it runs no workflow code, or keeps none in memory
        run, history, fence = await self.store.load_idle_run(*key, sorted(queues))
        if run is None or fence is None or run.status in _HELD:
            return None
        if (inst := await self._replay(run, history, None)) is None:
            return None
        self.cache.put(key, live := Live(inst, fence))
        return live

    async def suspend_poisoned(self, task: ClaimedTask) -> None:
        key = (task.tenant, task.run_id)
        await self.locks.acquire(key)
        try:
            self.cache.evict(key)
            err = poisoned_workflow_task(task)
            await suspend_latest(
                self.committer, *key, lambda run: self._suspend(run, task.fence, err)
            )
        finally:
            self.locks.release(key)

    async def _suspend(self, run: RunRecord, fence: int, err: Exception) -> bool:
        """Suspend the run, holding its workflow task under `fence`; False if something
        was appended meanwhile."""
        self.watch.note(run.tenant, run.run_id, run.workflow)
        return await suspend_run(self.committer, run, fence, err, self.settings.clock())

    # == decisions ============================================================
    def decide(
        self,
        key: RunKey,
        live: Live,
        fed: Sequence[NewEvent],
        expect_seq: int,
        expect_hash: str,
        processed_seq: int,
        activity: SettleActivity | None = None,
        quotas: Quotas | None = None,
    ) -> tuple[RunCommit, int]:
        """The commit for what the instance decided; also how many local slots it took.

        Under the tenant's `quotas`: a decision that would take the history past
        `max_events_per_run`, or continue as new with an input over `max_payload_bytes`,
        suspends the run instead (`over_quota`); the store checks the tenant's pending
        timers and activities in flight, and the run's bytes (then `bytes_held`).
        """
        reserved = 0
        served = self.serving.activity_queues
        accepting = self.serving.accepting

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
            # A stopping engine takes no attempt and leaves a next generation to others.
            owner=settings.owner if accepting else None,
            lease=settings.lease,
            take_locally=take_locally,
            activity=activity,
            start_quotas=settings.quotas,
            limits=self._decision_limits(quotas),
        )
        if quotas is not None:
            held = over_quota(commit, len(fed), quotas, live.inst.processed_seq)
            if held is not None:
                self.worker.unreserve(reserved)
                return held, 0
        return commit, reserved

    def _decision_limits(self, quotas: Quotas | None) -> Limits:
        """The limits a decision is held to under `quotas`, made once for each quotas
        object (the quota book keeps a tenant's for a while)."""
        if quotas is None:
            return NO_LIMITS
        known = self._limits
        if known is None or known[0] is not quotas:
            known = self._limits = (quotas, decision_limits(quotas))
        return known[1]

    async def _defer(
        self, run: RunRecord, live: Live, extra: Sequence[NewEvent], quotas: Quotas
    ) -> None:
        """The run's decision starts timers over the tenant's `max_pending_timers`: record
        why it waits and make it decide again in `QUOTA_RETRY` seconds (nothing dropped)."""
        now = self.settings.clock()
        inst = live.inst
        commit = deferral(run, live.fence, inst.last_seq, inst.last_hash, extra, now, quotas)
        if (await self.commit(commit)).ok:
            self.wakeups.wake_at(now + QUOTA_RETRY)

    async def commit_decisions(self, key: RunKey, commit: RunCommit, reserved: int) -> CommitResult:
        """Commit what an instance decided; if the commit fails, the instance is stale."""
        try:
            return await self.committer.commit(commit)
        except BaseException:
            self.worker.unreserve(reserved)
            self.cache.evict(key)
            raise

    def committed(
        self, key: RunKey, live: Live, commit: RunCommit, res: CommitResult, reserved: int
    ) -> None:
        """After a decision's commit: keep or drop the instance, start what it started."""
        inst = live.inst
        inst.last_seq, inst.last_hash = res.last_seq, res.last_hash
        snap = commit.snapshot
        if snap is not None and snap.status == RunStatus.SUSPENDED and not snap.finished:
            self.cache.evict(key)  # what it decided was not recorded (history full)
            inst.close()
        elif inst.finished or (snap is not None and snap.finished):
            self.cache.evict(key)
            inst.close()
            self.ends.ended(*key)
            if "parent" in inst.started:
                self.wakeups.wake()  # the commit woke the parent: take it up now
        else:
            self.cache.put(key, live)
        effect = commit.effect
        self._start_attempts(key, commit, res, reserved)
        if (timers := effect(StartTimers)) is not None:
            for timer in timers.timers:
                self.wakeups.note_timer(timer.fire_at)
        if effect(ContinueAsNew) is not None:
            self.woken(*key, res)  # the next generation: processed here if this engine took it
        if effect(OpenApprovals) is not None or effect(EscalateApprovals) is not None:
            for hook in self._on_approvals:
                hook()

    def _start_attempts(
        self, key: RunKey, commit: RunCommit, res: CommitResult, reserved: int
    ) -> None:
        """Run here the new activities the commit leased to this engine."""
        started = 0
        queued = frozenset(res.queued_steps)
        if queued:
            self.wakeups.activities_queued()  # a slot that frees takes them
        schedule = commit.effect(ScheduleActivities)
        new = schedule.tasks if schedule is not None else ()
        late = bool(new) and came_late(commit.asked)  # timed again as they start
        for na in new:
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
                deadline=(res.now or commit.now) + na.timeout,
                retime=late,
            )
            self.worker.start(attempt)
        if started < reserved:
            self.worker.unreserve(reserved - started)
        if started < len(new) or commit.effect(StartChildren) is not None:
            self.wakeups.wake()  # work went to the queue: a free worker may take it
