"""The engine's background loops: claim work, fire timers, keep leases.

- The poller claims due tasks of the queues this engine serves (work left by
  other processes, retries that came due, runs of a crashed engine).
- The timer loop fires due timers (a conditional update, so a timer fires
  once however many schedulers run) and expires attempts whose lease,
  start-to-close deadline or heartbeat deadline has passed.
- The lease loop renews the leases of what this engine is running and
  records this worker's liveness.
In-process work never waits for these loops: the engine starts it directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from waypost.errors import StoreError
from waypost.store.base import ClaimedTask, LeaseRenewal, TaskRef, WorkerRecord

from .interpreter import DEFINITIONS_QUEUE
from .worker import Attempt, failure

if TYPE_CHECKING:
    from .core import AsyncEngine

log = logging.getLogger("waypost.scheduler")

_BATCH = 256
_BEAT_EVERY = 5.0


class Scheduler:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.workflow_queues: frozenset[str] = frozenset()
        self.activity_queues: frozenset[str] = frozenset()
        self.processing: dict[tuple[str, str], int] = {}
        # Claimed workflow tasks not yet done: bounded, so one engine does not lease a
        # whole backlog at once (starving its own new runs and other engines).
        self.workflows_claimed = 0
        # The last claim may have left activity tasks queued (it took all it could):
        # a slot that frees up then wakes the poller instead of waiting for a poll.
        self.activities_waiting = False
        self.worker_ttl = 3 * _BEAT_EVERY
        self._wake = asyncio.Event()
        self._timer_wake = asyncio.Event()
        self._polling: list[asyncio.Task[Any]] = []
        self._leases: asyncio.Task[Any] | None = None
        self._renewed: dict[TaskRef, float] = {}
        self._expiring: set[TaskRef] = set()
        self._started_at = 0.0

    # -- lifecycle ----------------------------------------------------------
    def refresh_queues(self) -> None:
        queues = self.engine.registry.workflow_queues()
        if self.engine.serve_definitions:
            queues.append(DEFINITIONS_QUEUE)
        self.workflow_queues = frozenset(queues)
        self.activity_queues = frozenset(self.engine.registry.activity_names())

    def start(self) -> None:
        engine = self.engine
        self.refresh_queues()
        self._started_at = engine.clock()
        loop = asyncio.get_running_loop()
        self._polling = [
            loop.create_task(self._poll_loop(), name="waypost-poller"),
            loop.create_task(self._timer_loop(), name="waypost-timers"),
        ]
        self._leases = loop.create_task(self._lease_loop(), name="waypost-leases")
        self._polling.append(
            loop.create_task(engine.store.listen(self._on_notify), name="waypost-listener")
        )
        self._polling.append(
            loop.create_task(
                engine._approvals.dispatch_forever(engine.poll_interval), name="waypost-outbox"
            )
        )

    async def stop_polling(self) -> None:
        tasks, self._polling = self._polling, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        await self.stop_polling()
        task, self._leases = self._leases, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(StoreError):
            await self.engine.store.remove_worker(self.engine.owner)
        self.workflow_queues = frozenset()
        self.activity_queues = frozenset()

    def abandon(self) -> list[asyncio.Task[Any]]:
        """Hand over the loops to be cancelled, without any goodbye to the store."""
        tasks, self._polling = self._polling, []
        if self._leases is not None:
            tasks.append(self._leases)
            self._leases = None
        return tasks

    # -- wake-ups -------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def nudge(self) -> None:
        """Look for work and due timers now (the clock may have moved)."""
        self._wake.set()
        self._timer_wake.set()

    def _on_notify(self, topic: str) -> None:
        """Another process has work: a task became ready, a timer was set, a message waits."""
        if topic == "outbox":
            self.engine._approvals.wake.set()
            return
        if topic != "timers":
            self._wake.set()
        if topic != "tasks":
            self._timer_wake.set()

    def wake_at(self, when: float) -> None:
        delay = max(0.0, when - self.engine.clock())
        asyncio.get_running_loop().call_later(delay, self._wake.set)

    def note_timer(self, fire_at: float) -> None:
        delay = max(0.0, fire_at - self.engine.clock())
        if delay < self.engine.poll_interval:
            asyncio.get_running_loop().call_later(delay, self._timer_wake.set)

    # -- loops ----------------------------------------------------------------
    async def _poll_loop(self) -> None:
        engine = self.engine
        while True:
            self._wake.clear()
            free = engine.worker.free()
            workflows_free = self.workflows_free()
            if free <= 0 and workflows_free <= 0:
                self.activities_waiting = True
                await self._sleep(self._wake, engine.poll_interval)
                continue
            try:
                engine.faults.hit("commit:before")
                claimed = await engine.store.claim_tasks(
                    engine.owner,
                    sorted(self.workflow_queues),
                    sorted(self.activity_queues),
                    min(_BATCH, workflows_free),
                    min(_BATCH, free),
                    engine.lease,
                    engine.clock(),
                )
            except StoreError as exc:
                log.warning("claiming tasks failed (will retry): %s", exc)
                await self._sleep(self._wake, engine.poll_interval)
                continue
            activity_limit = min(_BATCH, free)
            took = sum(1 for t in claimed if t.kind == "activity")
            self.activities_waiting = activity_limit <= 0 or took >= activity_limit
            for task in claimed:
                self._dispatch(task)
            if not claimed:
                await self._sleep(self._wake, engine.poll_interval)

    def workflows_free(self) -> int:
        return self.engine.max_workflows - self.workflows_claimed

    def _claimed_workflow_done(self, _: asyncio.Task[Any]) -> None:
        self.workflows_claimed -= 1
        if self.workflows_claimed == self.engine.max_workflows - 1:
            self._wake.set()  # the poller may have stopped at the cap
            self._timer_wake.set()

    def _track(self, task: asyncio.Task[Any]) -> None:
        self.workflows_claimed += 1
        task.add_done_callback(self._claimed_workflow_done)

    def _dispatch(self, task: ClaimedTask) -> None:
        engine = self.engine
        if task.kind == "workflow":
            self._track(
                engine.spawn(engine._process(task.tenant, task.run_id, task.fence, task.queue))
            )
            return
        engine.worker.reserve()
        engine.worker.start(Attempt.from_claim(task))

    async def _timer_loop(self) -> None:
        engine = self.engine
        while True:
            self._timer_wake.clear()
            now = engine.clock()
            try:
                # At the cap, fired timers only wake their runs; the poller claims them
                # as capacity frees up.
                owner = engine.owner if self.workflows_free() > 0 else None
                fired = await engine.store.fire_due_timers(
                    now, _BATCH, owner, sorted(self.workflow_queues), engine.lease
                )
                if fired:
                    engine.faults.hit("timers:fired")
                for timer in fired:
                    if timer.workflow_fence is not None:
                        self._track(
                            engine.spawn(
                                engine._process(
                                    timer.tenant, timer.run_id, timer.workflow_fence, timer.queue
                                )
                            )
                        )
                if owner is None and fired:
                    self._wake.set()
                expired = await engine.store.expired_activities(now, _BATCH)
                for task in expired:
                    self._expire(task, now)
                if len(fired) == _BATCH or len(expired) == _BATCH:
                    continue
                next_at = await engine.store.next_timer_at()
            except StoreError as exc:
                log.warning("the timer loop failed (will retry): %s", exc)
                next_at = None
            wait = engine.poll_interval
            if next_at is not None:
                wait = min(wait, max(0.0, next_at - engine.clock()))
            await self._sleep(self._timer_wake, wait)

    def _expire(self, task: ClaimedTask, now: float) -> None:
        engine = self.engine
        attempt = Attempt.from_claim(task)
        mine = engine.worker.inflight.get(attempt.ref)
        if task.deadline is not None and task.deadline <= now:
            if mine is not None:
                return  # the attempt's own timeout reports it
            seconds = (task.spec or {}).get("timeout")
            reason = f"attempt {task.attempt} exceeded its start-to-close timeout of {seconds}s"
        elif task.heartbeat_deadline is not None and task.heartbeat_deadline <= now:
            reason = f"attempt {task.attempt} sent no heartbeat within its heartbeat timeout"
        else:
            if mine is not None:
                return  # a renewal is due; this engine is alive
            reason = (
                f"attempt {task.attempt} lost its worker ({task.owner} stopped renewing the lease)"
            )
        if attempt.ref in self._expiring:
            return  # reported already; its commit has not landed yet
        outcome = dataclasses.replace(
            failure(attempt, {"type": "ActivityTimeout", "message": reason}, now, retryable=True),
            synthetic=True,
        )
        self._expiring.add(attempt.ref)
        report = engine.spawn(engine._report(attempt, outcome))
        report.add_done_callback(lambda _: self._expiring.discard(attempt.ref))

    async def _lease_loop(self) -> None:
        engine = self.engine
        next_beat = 0.0
        while True:
            now = engine.clock()
            try:
                if now >= next_beat:
                    await engine.store.beat_worker(
                        WorkerRecord(
                            worker_id=engine.owner,
                            host=socket.gethostname(),
                            pid=os.getpid(),
                            queues=sorted(self.workflow_queues | self.activity_queues),
                            started_at=self._started_at,
                            heartbeat_at=now,
                        )
                    )
                    next_beat = now + _BEAT_EVERY
                renewals = self._due_renewals(now)
                if renewals:
                    states = await engine.store.renew_leases(
                        engine.owner, renewals, engine.lease, now
                    )
                    for state in states:
                        self._renewed[state.task] = now
                        if state.task.kind == "activity":
                            engine.worker.apply_lease_state(
                                state.task, state.held, state.cancel_requested
                            )
            except StoreError as exc:
                log.warning("renewing leases failed (will retry): %s", exc)
            await asyncio.sleep(self._renew_every())

    def _renew_every(self) -> float:
        """Often enough for the lease and for the tightest heartbeat timeout in flight."""
        every = min(1.0, self.engine.lease / 3)
        for a in self.engine.worker.inflight.values():
            hb = a.spec.get("heartbeat_timeout")
            if hb:
                every = min(every, float(hb) / 4)
        return every

    def _due_renewals(self, now: float) -> list[LeaseRenewal]:
        engine = self.engine
        third = engine.lease / 3
        out: list[LeaseRenewal] = []
        live: set[TaskRef] = set()
        for renewal in engine.worker.renewals():
            ref = renewal.task
            live.add(ref)
            last = self._renewed.setdefault(ref, now)
            if renewal.heartbeat_at is not None or now - last >= third:
                out.append(renewal)
        for (tenant, run_id), fence in list(self.processing.items()):
            ref = TaskRef(tenant, run_id, "workflow", "", fence)
            live.add(ref)
            if now - self._renewed.setdefault(ref, now) >= third:
                out.append(LeaseRenewal(ref))
        for ref in list(self._renewed):
            if ref not in live:
                del self._renewed[ref]
        return out

    @staticmethod
    async def _sleep(event: asyncio.Event, seconds: float) -> None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
        # cancellation that arrives as the event is set, and a stop would hang.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, seconds)):
                await event.wait()
