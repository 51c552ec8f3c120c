"""Activity outcomes: record how an attempt ended; if final, decide on it in the same commit.

The happy path costs one commit per step: when an attempt this engine ran
finishes and the run's instance is cached, its result and the workflow's
next decisions go into the same commit, and the next activity is inserted
already leased to this engine, so it starts without a poll. Otherwise the
outcome is committed alone and the run's workflow task processed (`WorkflowTasks`).
"""

from __future__ import annotations

import asyncio
import functools
import itertools

from waypost.errors import StoreCorrupted, StoreError, StoreRejected
from waypost.model.events import Event, EventType, NewEvent
from waypost.model.logs import log_context, logger
from waypost.store.base import (
    ActivityTaskOp,
    CommitResult,
    Conflict,
    RunCommit,
    WorkflowTaskOp,
)
from waypost.store.effects import SettleActivity

from . import tracing
from .attempts import Attempt, Outcome, log_attempt_outcome
from .cache import RunKey
from .suspensions import Refusals, hold_poisoned_step
from .workflow_tasks import WorkflowTasks

log = logger("waypost")
_E = EventType


class Outcomes:
    """Records attempts' outcomes and lets the workflow decide on them."""

    def __init__(self, tasks: WorkflowTasks) -> None:
        self.tasks = tasks
        self.settings = tasks.settings
        self.committer = tasks.committer
        self.cache = tasks.cache
        self.locks = tasks.locks
        self.serving = tasks.serving
        self.wakeups = tasks.wakeups
        self.worker = tasks.worker
        # Reports (by their outcome's id) that came late while being recorded: not counted.
        self._went_late: set[int] = set()

    async def report(self, a: Attempt, outcome: Outcome) -> None:
        """Record an attempt's outcome; if final, let the workflow decide in the same commit.

        A store error (a full disk, a database restart) is retried, backing off to
        every second, for as long as this engine serves: the attempt stays in flight, so
        its lease is renewed as soon as the store answers again, and the outcome is
        recorded then. A stopping engine tries a few times; then, or if the store is
        damaged, the outcome is lost, the lease lapses and the step runs again. A
        write the database refuses as it is suspends the run (`Refusals`).
        """
        with log_context(run_id=a.run_id, step=a.step, attempt=a.attempt, tenant=a.tenant):
            try:
                await self._report(a, outcome)
            finally:
                self._went_late.discard(id(outcome))

    async def _report(self, a: Attempt, outcome: Outcome) -> None:
        key = (a.tenant, a.run_id)
        delays = itertools.chain((0.1, 0.25, 0.5), itertools.repeat(1.0))
        failures = 0
        refusals = Refusals(f"recording step {a.step}", *key)
        while True:
            await self.locks.acquire(key)
            try:
                self._went_late.discard(id(outcome))
                await self._report_locked(key, a, outcome)
                log_attempt_outcome(a, outcome)
                if id(outcome) not in self._went_late:  # counted once, when it was recorded
                    self.committer.watch.attempt(a.activity, outcome)
                return
            except StoreError as exc:
                failures += 1
                accepting = self.serving.accepting
                if isinstance(exc, StoreRejected) and accepting:
                    # Nothing written; tried a few times, then the run is suspended
                    # with the reason, the step held to run again.
                    self.cache.evict(key)
                    if (failed := refusals.failed(exc)) is not None:
                        now = self.settings.clock()
                        late = self._late
                        await hold_poisoned_step(self.committer, a, outcome, now, late, failed)
                        return
                elif isinstance(exc, StoreCorrupted) or (not accepting and failures > 5):
                    log.error(
                        "could not record the outcome of %s step %s attempt %d (%s); "
                        "the step will run again once its lease lapses",
                        *(a.run_id, a.step, a.attempt, exc),
                    )
                    return
                else:
                    self.tasks.store_trouble(exc)
                delay = next(delays)
            finally:
                self.locks.release(key)
            await asyncio.sleep(delay)

    async def _report_locked(self, key: RunKey, a: Attempt, outcome: Outcome) -> None:
        settings = self.settings
        now = settings.clock()
        if outcome.lapses and (not outcome.retrying or outcome.lapses >= settings.max_lapses):
            # A lost engine never fails a step for good: the run waits for an operator.
            self.cache.evict(key)
            await hold_poisoned_step(self.committer, a, outcome, now, self._late)
            return
        if not outcome.ok and outcome.retrying:
            await self._retry_later(key, a, outcome, now)
            return

        fed = outcome.event(a).at(now)
        type_ = fed.type
        done = SettleActivity(a.step, a.fence, ActivityTaskOp.DONE)
        if await self._decide_at_once(key, a, outcome, fed, done, type_, now):
            return
        res = await self.committer.commit(
            RunCommit(
                tenant=a.tenant,
                run_id=a.run_id,
                events=[fed],
                now=now,
                effects=(done,),
                workflow_op=WorkflowTaskOp.CLAIM if self.serving.accepting else WorkflowTaskOp.WAKE,
                owner=settings.owner,
                lease=settings.lease,
                claim_queues=self.serving.workflow_queues,
            )
        )
        if res.conflict is Conflict.ACTIVITY_FENCE:
            await self._late(a, outcome)
            return
        if res.workflow_fence is not None:
            await self.tasks.process_locked(key, res.workflow_fence)
        elif res.ok:
            self.wakeups.wake()

    async def _retry_later(self, key: RunKey, a: Attempt, outcome: Outcome, now: float) -> None:
        """Record a failed attempt that will be tried again (at `outcome.retry_at`)."""
        res = await self.committer.commit(
            RunCommit(
                tenant=a.tenant,
                run_id=a.run_id,
                events=[outcome.event(a).at(now)],
                now=now,
                effects=(
                    SettleActivity(
                        a.step,
                        a.fence,
                        ActivityTaskOp.RETRY,
                        outcome.retry_at,
                        outcome.heartbeat_details,
                        lapsed=outcome.lapses > 0,
                    ),
                ),
            )
        )
        if res.conflict is Conflict.ACTIVITY_FENCE:
            await self._late(a, outcome)
        elif res.ok:
            self._advance_cached(key, res)
            if outcome.retry_at is not None:
                self.wakeups.wake_at(outcome.retry_at)

    async def _decide_at_once(
        self,
        key: RunKey,
        a: Attempt,
        outcome: Outcome,
        fed: NewEvent,
        done: SettleActivity,
        type_: EventType,
        now: float,
    ) -> bool:
        """The outcome and the workflow's decision on it in one commit, where the run's
        instance is (or can be made) live here; False: record it the long way."""
        tasks = self.tasks
        live = self.cache.get(key)
        if live is None and self.serving.accepting:
            live = await tasks.warm(key)  # outcome and decision in one commit
        quotas = await tasks.quotas.get(a.tenant) if live is not None else None
        if live is None or live.inst.closed:
            return False
        inst = live.inst
        expect_seq, expect_hash = inst.last_seq, inst.last_hash
        outcome_event = Event(expect_seq + 1, type_, fed.data, now, "")
        try:
            await tasks.compute.feed(inst, functools.partial(inst.apply_new, outcome_event))
        except Exception:
            self.cache.evict(key)  # the slow path replays it and suspends if it must
            return False
        with tracing.workflow_task(a.tenant, a.run_id, live.fence) as span:
            span.begin(inst.started)
            commit, reserved = tasks.decide(
                key, live, [fed], expect_seq, expect_hash, expect_seq + 1, done, quotas
            )
            res = await tasks.commit_decisions(key, commit, reserved)
            if res.ok:
                tasks.committed(key, live, commit, res, reserved)
                span.finished(commit.snapshot.status if commit.snapshot else "")
                return True
        self.worker.unreserve(reserved)
        self.cache.evict(key)
        if res.conflict is Conflict.ACTIVITY_FENCE:
            await self._late(a, outcome)
            return True
        return False

    def _advance_cached(self, key: RunKey, res: CommitResult) -> None:
        """Let a cached instance see events appended by this engine that need no decision."""
        live = self.cache.peek(key)
        if live is None or res.prev_seq != live.inst.last_seq:
            return
        for ev in res.events:
            live.inst.apply_new(ev)

    async def _late(self, a: Attempt, outcome: Outcome) -> None:
        """An outcome from an attempt that no longer holds its task: audit it, change nothing."""
        self._went_late.add(id(outcome))
        if outcome.synthetic:
            return  # a timeout another scheduler (or the attempt itself) already settled
        now = self.settings.clock()
        events = [outcome.late_event(a, now)]
        res = await self.committer.commit(RunCommit(a.tenant, a.run_id, events=events, now=now))
        if res.ok:
            self._advance_cached((a.tenant, a.run_id), res)
