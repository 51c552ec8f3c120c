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
import os
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from waypost.errors import StoreError
from waypost.model.logs import logger
from waypost.model.queues import WORKER_TTL as QUEUES_WORKER_TTL, serves_entry
from waypost.runtime.interpreter import DEFINITIONS_QUEUE
from waypost.runtime.registry import Registry
from waypost.store.base import ClaimedTask, LeaseRenewal, Store, TaskRef, WorkerRecord
from waypost.store.landing import came_late
from waypost.store.reach import warn_unless_away

from . import liveness
from .attempts import Attempt, Report, failure
from .faults import Crash
from .signals import Shared
from .worker import Worker

log = logger("waypost.scheduler")

_BATCH = 256
# Timers fire in transactions of at most _FIRE_BATCH, up to _FIRING of them at once: a
# burst of due timers then lands in pieces as each commits, rather than all at the end
# of one long transaction (on PostgreSQL a timer costs several round trips).
_FIRE_BATCH = 16
_FIRING = 4
# A timer that was due when a batch fired nothing is held by another transaction (on
# PostgreSQL a batch skips a timer whose run another holds): look again after this,
# rather than at once and again while the holder's transaction lasts.
_HELD_AGAIN = 0.01
_LAPSED_EVERY = 1.0
_BEAT_EVERY = 1.0
WORKER_TTL = QUEUES_WORKER_TTL
"""An engine whose heartbeat is older than this (and whose lock, on this host, cannot be
seen) is taken for dead by engines that kept beating meanwhile (see `liveness.py`)."""
"""A worker whose heartbeat is older than this is taken for gone."""

Loop = Callable[[], Coroutine[Any, Any, None]]


class WorkflowTaskSink(Protocol):
    """Where the dispatcher hands the workflow tasks it claims or its timers wake."""

    async def process(self, tenant: str, run_id: str, fence: int, queue: str) -> None:
        """Process a run whose workflow task this engine holds under `fence`."""
        ...

    async def suspend_poisoned(self, task: ClaimedTask) -> None:
        """Suspend the run of a workflow task that lost its engine `task.lapses` times."""
        ...


class Scheduler:
    """The poller, the timer loop and the lease loop of one engine."""

    def __init__(
        self, shared: Shared, store: Store, worker: Worker, tasks: WorkflowTaskSink, report: Report
    ) -> None:
        self.settings = settings = shared.settings
        self.background, self.serving = shared.background, shared.serving
        self.wakeups, self.held = shared.wakeups, shared.held
        self.store, self.worker, self.tasks, self.report = store, worker, tasks, report
        self.registry: Registry = worker.registry
        self.named_queues = False
        self.served_named: frozenset[str] = frozenset()
        # Claimed workflow tasks not yet done: bounded, so one engine does not lease a
        # whole backlog at once (starving its own new runs and other engines).
        self.workflows_claimed = 0
        # Claims go round the tenants with ready tasks, starting after the one served last.
        self.after_tenant = ""
        # Lapsed leases (a crashed engine's runs) are looked for at most once a second,
        # and at once after a nudge (a dead engine's leases were released).
        self._lapsed_at = 0.0
        self.worker_ttl = WORKER_TTL
        self._life = liveness.LifeLock(settings.owner)
        self._beating_since: float | None = None
        self._loops: dict[str, Loop] = {}
        self._topics: dict[str, Callable[[], None]] = {}
        self._on_nudge: list[Callable[[], None]] = []
        self._polling: list[asyncio.Task[Any]] = []
        self._leases: asyncio.Task[Any] | None = None
        self._renewed: dict[TaskRef, float] = {}
        self._expiring: set[TaskRef] = set()
        self._started_at = 0.0

    # -- lifecycle ----------------------------------------------------------
    def add_loop(self, name: str, loop: Loop) -> None:
        """Run `loop()` while this engine serves (a feature's background work)."""
        self._loops[name] = loop

    def on_nudge(self, wake: Callable[[], None]) -> None:
        """Call `wake()` when this engine is nudged (a feature's loop looks again too)."""
        self._on_nudge.append(wake)

    def on_topic(self, topic: str, wake: Callable[[], None]) -> None:
        """Call `wake()` when another process notifies `topic` (instead of waking the poller)."""
        self._topics[topic] = wake

    def refresh_queues(self) -> None:
        registry, serving = self.registry, self.serving
        code = self.settings.serve_code
        queues = registry.workflow_queues() if code else []
        if self.settings.serve_definitions:
            queues.append(DEFINITIONS_QUEUE)
        activities = registry.activity_names() if code else ()
        serving.serve(frozenset(queues), frozenset(activities))
        # A claim may leave attempts of a named queue behind for its limits: a slot
        # of this engine that frees then tries again rather than waiting for a poll.
        self.named_queues = bool(registry.named_queues())
        # Announced in the heartbeat: a limited queue's claims share it among its workers.
        self.served_named = frozenset(serves_entry(q) for q in registry.named_queues())

    def start(self) -> None:
        self.refresh_queues()
        self._started_at = self.settings.clock()
        self._life.hold()  # before the first heartbeat announces this engine
        loop = asyncio.get_running_loop()
        self._polling = [
            loop.create_task(self._poll_loop(), name="waypost-poller"),
            loop.create_task(self._timer_loop(), name="waypost-timers"),
            loop.create_task(self.store.listen(self._on_notify), name="waypost-listener"),
        ]
        self._leases = loop.create_task(self._lease_loop(), name="waypost-leases")
        for name, background in self._loops.items():
            self._polling.append(loop.create_task(background(), name=f"waypost-{name}"))

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
            await self.store.remove_worker(self.settings.owner)
        self._life.drop(remove=True)
        self.serving.serve(frozenset(), frozenset())
        self.served_named = frozenset()

    def abandon(self) -> list[asyncio.Task[Any]]:
        """Hand over the loops to be cancelled, without any goodbye to the store.

        The life lock goes as it would with the process, so engines on this host see
        this one dead at once.
        """
        self._life.drop(remove=False)
        tasks, self._polling = self._polling, []
        if self._leases is not None:
            tasks.append(self._leases)
            self._leases = None
        return tasks

    # -- wake-ups -------------------------------------------------------------
    def nudge(self) -> None:
        """Look for work and due timers now (the clock may have moved)."""
        self._lapsed_at = 0.0
        self.wakeups.work.set()
        self.wakeups.timers.set()
        for wake in self._on_nudge:
            wake()

    def _on_notify(self, topic: str) -> None:
        """Another process has work: a task became ready, a timer was set, a message waits."""
        wake = self._topics.get(topic)
        if wake is not None:
            wake()
            return
        if topic != "timers":
            self.wakeups.work.set()
        if topic != "tasks":
            self.wakeups.timers.set()

    # -- loops ----------------------------------------------------------------
    async def _poll_loop(self) -> None:
        settings = self.settings
        while True:
            self.wakeups.work.clear()
            free = self.worker.free()
            workflows_free = self.workflows_free()
            if free <= 0 and workflows_free <= 0:
                self.wakeups.activities_queued()
                await self._sleep(self.wakeups.work, settings.poll_interval)
                continue
            now, asked = settings.clock(), time.monotonic()
            lapsed = not 0.0 <= self._lapsed_at - now <= _LAPSED_EVERY  # also a clock set back
            if lapsed:
                self._lapsed_at = now + _LAPSED_EVERY
            try:
                settings.faults.hit("commit:before")
                claimed = await self.store.claim_tasks(
                    settings.owner,
                    sorted(self.serving.workflow_queues),
                    sorted(self.serving.activity_queues),
                    min(_BATCH, workflows_free),
                    min(_BATCH, free),
                    settings.lease,
                    now,
                    quotas=settings.quotas,
                    after_tenant=self.after_tenant,
                    lapsed=lapsed,
                    asked=asked,
                )
            except StoreError as exc:
                warn_unless_away(log, self.store, "claiming tasks failed (will retry): %s", exc)
                await self._sleep(self.wakeups.work, settings.poll_interval)
                continue
            except Crash:
                raise  # a fault plan's crash ends the loop, as a dead process would
            except Exception:  # a bug here must not stop this engine's claims for good
                log.exception("claiming tasks failed unexpectedly (will retry)")
                await self._sleep(self.wakeups.work, settings.poll_interval)
                continue
            activity_limit = min(_BATCH, free)
            took = sum(1 for t in claimed if t.kind == "activity")
            self.wakeups.activities_queued(
                activity_limit <= 0 or took >= activity_limit or self.named_queues
            )
            if claimed:
                self.after_tenant = claimed[-1].tenant
            late = came_late(asked)  # its attempts are timed again as they start
            for task in claimed:
                self._dispatch(task, late)
            if not claimed:
                await self._sleep(self.wakeups.work, settings.poll_interval)

    def workflows_free(self) -> int:
        return self.settings.max_workflows - self.workflows_claimed

    def _claimed_workflow_done(self, _: asyncio.Task[Any]) -> None:
        self.workflows_claimed -= 1
        if self.workflows_claimed == self.settings.max_workflows - 1:
            self.wakeups.work.set()  # the poller may have stopped at the cap
            self.wakeups.timers.set()

    def _track(self, task: asyncio.Task[Any]) -> None:
        self.workflows_claimed += 1
        task.add_done_callback(self._claimed_workflow_done)

    def _dispatch(self, task: ClaimedTask, late: bool = False) -> None:
        if task.kind == "workflow":
            if task.taken_over:
                self.settings.observer.lease_expired("workflow")
                self.settings.observer.lease_taken_over("workflow")
            if task.lapses >= self.settings.max_lapses:
                # Its engines keep dying on it: an operator must look (a poison run).
                self._track(self.background.spawn(self.tasks.suspend_poisoned(task)))
                return
            processing = self.tasks.process(task.tenant, task.run_id, task.fence, task.queue)
            self._track(self.background.spawn(processing))
            return
        self.worker.reserve()
        self.worker.start(Attempt.from_claim(task, retime=late))

    async def _timer_loop(self) -> None:
        settings = self.settings
        firing = 1  # fire transactions at once: doubles while they come back full
        while True:
            self.wakeups.timers.clear()
            now = settings.clock()
            fired = 0
            try:
                fired, full = await self._fire_due(now, firing)
                firing = min(_FIRING, firing * 2) if full else max(1, firing // 2)
                if fired:
                    settings.faults.hit("timers:fired")
                if await self.store.admit_enqueued(now):
                    self.wakeups.work.set()  # admitted runs' workflow tasks are ready to claim
                expired = await self.store.expired_activities(now, _BATCH)
                for task in expired:
                    self._expire(task, now)
                if full or len(expired) == _BATCH:
                    continue
                next_at = await self.store.next_timer_at()
            except StoreError as exc:
                warn_unless_away(log, self.store, "the timer loop failed (will retry): %s", exc)
                next_at = None
            except Crash:
                raise  # a fault plan's crash ends the loop, as a dead process would
            except Exception:  # a bug here must not stop every timer of this engine for good
                log.exception("the timer loop failed unexpectedly (will retry)")
                next_at = None
            wait = settings.poll_interval
            if next_at is not None:
                wait = min(wait, max(0.0, next_at - settings.clock()))
                if not fired and next_at <= now:
                    wait = min(settings.poll_interval, max(wait, _HELD_AGAIN))
            await self._sleep(self.wakeups.timers, wait)

    async def _fire_due(self, now: float, firing: int) -> tuple[int, bool]:
        """Fire the timers due at `now` in `firing` transactions at once, each of at most
        `_FIRE_BATCH` timers (on PostgreSQL each takes other timers, `SKIP LOCKED`), and
        start their runs as each transaction lands. Returns how many fired, and whether a
        transaction came back full (more may be due)."""
        settings = self.settings
        # At the cap, fired timers only wake their runs; the poller claims them
        # as capacity frees up.
        owner = settings.owner if self.workflows_free() > 0 else None
        queues = sorted(self.serving.workflow_queues)
        count, full = 0, False
        batches = [
            asyncio.ensure_future(
                self.store.fire_due_timers(now, _FIRE_BATCH, owner, queues, settings.lease)
            )
            for _ in range(firing)
        ]
        error: StoreError | None = None
        try:
            for batch in asyncio.as_completed(batches):
                try:
                    fired = await batch
                except StoreError as exc:
                    error = error or exc  # the others may have landed: start their runs
                    continue
                count += len(fired)
                full = full or len(fired) == _FIRE_BATCH
                for timer in fired:
                    settings.observer.timer_fired(now - timer.due)
                    if timer.workflow_fence is not None:
                        self._track(
                            self.background.spawn(
                                self.tasks.process(
                                    timer.tenant, timer.run_id, timer.workflow_fence, timer.queue
                                )
                            )
                        )
        finally:
            for batch in batches:
                batch.cancel()  # only when this loop itself is cancelled (a stop)
            await asyncio.gather(*batches, return_exceptions=True)
        if error is not None and not count:
            raise error
        if error is not None:
            log.warning("firing timers failed in part (will retry): %s", error)
        if owner is None and count:
            self.wakeups.work.set()
        return count, full

    def _expire(self, task: ClaimedTask, now: float) -> None:
        attempt = Attempt.from_claim(task)
        mine = self.worker.inflight.get(attempt.ref)
        lapses = 0
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
            lapses = task.lapses + 1
        if attempt.ref in self._expiring:
            return  # reported already; its commit has not landed yet
        error = {"type": "ActivityTimeout", "message": reason}
        failed = failure(attempt, error, now, retryable=True)
        # An attempt that lost its engine did not fail: its retry is due at once, not
        # after the policy's backoff.
        retry_at = now if lapses and failed.retrying else failed.retry_at
        outcome = dataclasses.replace(failed, synthetic=True, lapses=lapses, retry_at=retry_at)
        self._expiring.add(attempt.ref)
        report = self.background.spawn(self.report(attempt, outcome))
        report.add_done_callback(lambda _: self._expiring.discard(attempt.ref))

    async def _lease_loop(self) -> None:
        settings = self.settings
        next_beat = 0.0
        while True:
            now, asked = settings.clock(), time.monotonic()
            try:
                if now >= next_beat or next_beat - now > _BEAT_EVERY:  # also a clock set back
                    await self.store.beat_worker(
                        WorkerRecord(
                            worker_id=settings.owner,
                            host=socket.gethostname(),
                            pid=os.getpid(),
                            queues=sorted(self._served()),
                            started_at=self._started_at,
                            heartbeat_at=now,
                        )
                    )
                    next_beat = now + _BEAT_EVERY
                    if self._beating_since is None:
                        self._beating_since = now
                    await self._release_dead(now)
                renewals = self._due_renewals(now)
                if renewals:
                    states = await self.store.renew_leases(
                        settings.owner, renewals, settings.lease, now, asked
                    )
                    for state in states:
                        self._renewed[state.task] = now
                        if state.task.kind == "activity":
                            self.worker.apply_lease_state(
                                state.task, state.held, state.cancel_requested
                            )
            except StoreError as exc:
                self._beating_since = None
                warn_unless_away(log, self.store, "renewing leases failed (will retry): %s", exc)
            except Crash:
                raise  # a fault plan's crash ends the loop, as a dead process would
            except Exception:  # a bug here must not stop this engine's renewals for good
                self._beating_since = None
                log.exception("renewing leases failed unexpectedly (will retry)")
            await asyncio.sleep(self._renew_every())

    def _served(self) -> frozenset[str]:
        serving = self.serving
        return serving.workflow_queues | serving.activity_queues | self.served_named

    async def _release_dead(self, now: float) -> None:
        """Release the leases of engines known to be dead, so their work moves on now."""
        store, me = self.store, self.settings.owner
        here = socket.gethostname()
        # Judging by heartbeats needs this engine to have beaten for as long: after an
        # outage of the database, everybody's heartbeat is old.
        steady = self._beating_since is not None and now - self._beating_since >= WORKER_TTL
        for w in await store.live_workers(0.0):
            if w.worker_id == me:
                continue
            dead = liveness.gone(w.worker_id) if w.host == here else None
            why = "its process is gone"
            if dead is None and steady and now - w.heartbeat_at > WORKER_TTL:
                dead, why = True, f"no heartbeat for {now - w.heartbeat_at:.0f}s"
            if dead:
                released = await store.release_owner(w.worker_id, now)
                log.warning(
                    "engine %s is dead (%s): %d of its leases released", w.worker_id, why, released
                )
                if released:
                    self.nudge()

    def _renew_every(self) -> float:
        """Often enough for the lease and for the tightest heartbeat timeout in flight."""
        every = min(1.0, self.settings.lease / 3)
        for a in self.worker.inflight.values():
            hb = a.spec.get("heartbeat_timeout")
            if hb:
                every = min(every, float(hb) / 4)
        return every

    def _due_renewals(self, now: float) -> list[LeaseRenewal]:
        third = self.settings.lease / 3
        out: list[LeaseRenewal] = []
        live: set[TaskRef] = set()
        for renewal in self.worker.renewals():
            ref = renewal.task
            live.add(ref)
            last = self._renewed.setdefault(ref, now)
            if renewal.heartbeat_at is not None or now - last >= third:
                out.append(renewal)
        for (tenant, run_id), fence in self.held:
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
