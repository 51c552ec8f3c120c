"""The compute lane: work a tenant can make expensive, run off the event loop, fairly.

Replaying a long history, activating a definition run (its expressions are the
tenant's), answering a query or an update's validation, and the console's replay
view all run workflow code over a history a tenant shaped. On the loop that answers
requests and moves every other tenant's runs, one such call would stall them all.
They run here instead (decision 0032):

- On a few threads of their own (`threads`, default 2), never on the event loop. The
  loop awaits the answer and goes on serving meanwhile.
- **A share per tenant.** Waiting jobs are taken by the least CPU their tenant has
  used lately (CPU seconds measured per job on its thread, decaying with a half-life
  of `HALF_LIFE` seconds), and a tenant runs on at most `threads // 2` threads (at
  least one) at once: one tenant's heavy runs and queries wait behind each other,
  not in front of everyone's.
- **A CPU-time limit per call** (`cpu_limit` seconds of the thread's own CPU time, not
  of the time spent waiting): the workflow loop stops between two callbacks once it is
  passed, and the call raises `ComputeLimitExceeded`. What is stopped is dropped: a
  query is refused, a run's activation suspends the run for an operator.
- **A bound on what a tenant may have waiting** (`max_waiting` per tenant) for the work
  a caller asks for (queries, validations, replay views): past it the call is refused
  at once (`QuotaExceeded`, 429) rather than queued without end. The engine's own
  activations are never refused: they wait their turn.

Threads rather than processes: a run's code and its live instance are objects of this
process (workflows registered in it, a cache of instances), which another process
could not hold without importing and replaying them again. A thread holding the GIL
yields it every switch interval, so the loop keeps answering; the share and the
limits bound how much of the process one tenant takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from waypost.errors import ComputeLimitExceeded, QuotaExceeded
from waypost.model.events import Event
from waypost.model.identity import preview
from waypost.model.logs import logger
from waypost.runtime.instance import WorkflowInstance

__all__ = [
    "HALF_LIFE",
    "INLINE_EVENTS",
    "ComputeLane",
    "ComputeLimitExceeded",
    "Recent",
    "check_cpu",
    "feed_events",
]

log = logger("waypost.compute")
T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

INLINE_EVENTS = 1_000
"""A registered workflow's code fed at most this many events at once runs on the loop:
the developer's own code over a short history costs less than a thread hand-off."""

HALF_LIFE = 10.0
"""Seconds after which a tenant's recent CPU use counts half in the choice of the next job."""

_local = threading.local()


def cpu_deadline() -> float | None:
    """The thread CPU time (`time.thread_time()`) past which the current job must stop;
    None outside the lane (and for work without a limit)."""
    deadline: float | None = getattr(_local, "deadline", None)
    return deadline


@dataclass(eq=False)
class _Job:
    tenant: str
    fn: Callable[[], Any]
    what: str
    limit: float | None
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    asked: bool  # a caller's request (counted against max_waiting), not the engine's own
    order: int = 0
    started: bool = False
    cancelled: bool = False
    started_at: float = 0.0  # monotonic


@dataclass
class _Tenant:
    waiting: deque[_Job] = field(default_factory=deque)
    running: int = 0
    asked: int = 0  # the caller's jobs waiting or running
    used: float = 0.0  # decayed CPU seconds
    used_at: float = 0.0  # monotonic time `used` was decayed to


class ComputeLane:
    """A few threads that run tenants' expensive work by fair share, each call timed."""

    def __init__(
        self, *, threads: int = 2, cpu_limit: float | None = 10.0, max_waiting: int = 8
    ) -> None:
        self.threads = threads
        self.cpu_limit = cpu_limit
        self.max_waiting = max_waiting
        self.per_tenant = max(1, threads // 2)
        self._tenants: dict[str, _Tenant] = {}
        self._cond = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._order = itertools.count()
        self._closed = False
        self._running: set[_Job] = set()
        self.busy_seconds = 0.0  # CPU seconds run in the lane, in all (for measurements)

    # == asking ===============================================================
    async def feed(
        self,
        inst: WorkflowInstance,
        fn: Callable[[], T],
        what: str = "its new event",
        *,
        events: int = 1,
        asked: bool = False,
    ) -> T:
        """`fn()`, which runs `inst`'s code, where its cost belongs: on the loop for a
        registered workflow fed a few events, on the lane (timed, in the run's tenant's
        share) for a definition run, a long replay, or a caller's request (`asked`)."""
        if not asked and not inst.workflow.tenant_defined and events <= INLINE_EVENTS:
            return fn()
        doing = f"running the code of run {preview(inst.run_id)} ({what})"
        check = functools.partial(check_cpu, doing)
        activation = functools.partial(inst.activate, fn, check)
        return await self.run(inst.tenant, activation, what=doing, asked=asked)

    async def run(
        self,
        tenant: str,
        fn: Callable[[], T],
        *,
        what: str,
        limit: float | bool | None = True,
        asked: bool = False,
    ) -> T:
        """`fn()` run on a lane thread in `tenant`'s share; its value, or what it raised.

        `limit`: seconds of CPU the call may take (True: the lane's `cpu_limit`; None or
        False: none). `asked`: a caller's request, refused with `QuotaExceeded` when the
        tenant has `max_waiting` of those waiting or running already.
        """
        loop = asyncio.get_running_loop()
        seconds = self.cpu_limit if limit is True else (limit or None)
        job = _Job(tenant, fn, what, seconds, loop, loop.create_future(), asked)
        with self._cond:
            if self._closed:
                raise RuntimeError("the engine is closed")
            state = self._tenants.setdefault(tenant, _Tenant())
            if asked and state.asked >= self.max_waiting:
                raise QuotaExceeded(
                    "max_compute_waiting",
                    f"tenant {preview(tenant)} has {state.asked} queries, validations or "
                    f"replays waiting or running, the most this engine takes at once; "
                    "try again shortly",
                    retry_after=1.0,
                )
            job.order = next(self._order)
            state.waiting.append(job)
            if asked:
                state.asked += 1
            self._start_threads()
            self._cond.notify()
        try:
            value: T = await asyncio.shield(job.future)
            return value
        except asyncio.CancelledError:
            with self._cond:
                job.cancelled = True  # not started: dropped; running: stopped at its check
                if not job.started and job in state.waiting:
                    state.waiting.remove(job)
                    self._done(state, job)
            raise

    def stats(self) -> dict[str, Any]:
        """Jobs running and waiting by tenant, the CPU seconds run here in all, and the job
        running longest (`longest`: what, tenant, seconds of wall time; None if none runs):
        one that outlives its CPU limit by far is stuck where no check reaches it."""
        with self._cond:
            now = time.monotonic()
            oldest = min(self._running, key=lambda job: job.started_at, default=None)
            return {
                "running": {t: s.running for t, s in self._tenants.items() if s.running},
                "waiting": {t: len(s.waiting) for t, s in self._tenants.items() if s.waiting},
                "busy_seconds": round(self.busy_seconds, 3),
                "longest": None
                if oldest is None
                else {
                    "what": oldest.what,
                    "tenant": oldest.tenant,
                    "seconds": round(now - oldest.started_at, 3),
                },
            }

    def close(self) -> None:
        """Stop the threads once their jobs end; jobs still waiting are refused."""
        with self._cond:
            self._closed = True
            for state in self._tenants.values():
                while state.waiting:
                    job = state.waiting.popleft()
                    self._done(state, job)
                    self._deliver(job, None, RuntimeError("the engine closed"))
            self._cond.notify_all()
        # Not joined: a job cannot be interrupted, and the loop calling this must not wait
        # for one; its threads end when it does (its answer goes nowhere).
        self._workers.clear()

    # == the threads ==========================================================
    def _start_threads(self) -> None:
        while len(self._workers) < self.threads:
            worker = threading.Thread(
                target=self._serve, name=f"waypost-compute-{len(self._workers)}", daemon=True
            )
            self._workers.append(worker)
            worker.start()

    def _next(self) -> tuple[_Tenant, _Job] | None:
        """The oldest job of the tenant that used the least CPU lately and has a thread
        to spare (called holding the lock)."""
        now = time.monotonic()
        best: tuple[float, int, _Tenant] | None = None
        for state in self._tenants.values():
            if not state.waiting or state.running >= self.per_tenant:
                continue
            used = self._decayed(state, now)
            key = (used, state.waiting[0].order)
            if best is None or key < best[:2]:
                best = (used, state.waiting[0].order, state)
        if best is None:
            return None
        state = best[2]
        return state, state.waiting.popleft()

    @staticmethod
    def _decayed(state: _Tenant, now: float) -> float:
        if state.used and now > state.used_at:
            state.used *= math.pow(0.5, (now - state.used_at) / HALF_LIFE)
        state.used_at = now
        return state.used

    def _serve(self) -> None:
        while True:
            with self._cond:
                picked = self._next()
                while picked is None:
                    if self._closed:
                        return
                    self._cond.wait()
                    picked = self._next()
                state, job = picked
                state.running += 1
                job.started = True
                job.started_at = time.monotonic()
                self._running.add(job)
            value: Any = None
            error: BaseException | None = None
            begun = time.thread_time()
            _local.deadline = None if job.limit is None else begun + job.limit
            _local.job = job
            try:
                if job.cancelled:
                    raise asyncio.CancelledError()
                value = job.fn()
            except BaseException as exc:
                error = exc
            finally:
                _local.deadline = None
                _local.job = None
                spent = time.thread_time() - begun
            with self._cond:
                self._running.discard(job)
                state.running -= 1
                self._decayed(state, time.monotonic())
                state.used += spent
                self.busy_seconds += spent
                self._done(state, job)
                self._cond.notify_all()
            if isinstance(error, ComputeLimitExceeded):
                log.warning(
                    "%s of tenant %s stopped after %.1f s of CPU (the lane's limit)",
                    job.what,
                    preview(job.tenant),
                    spent,
                )
            self._deliver(job, value, error)

    @staticmethod
    def _done(state: _Tenant, job: _Job) -> None:
        if job.asked:
            state.asked -= 1

    @staticmethod
    def _deliver(job: _Job, value: Any, error: BaseException | None) -> None:
        def settle() -> None:
            if job.future.done():
                return
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(value)

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            job.loop.call_soon_threadsafe(settle)


def check_cpu(what: str) -> None:
    """Raise `ComputeLimitExceeded` if the lane's current job passed its CPU time (or its
    caller gave up on it); nothing outside the lane."""
    deadline = cpu_deadline()
    job: _Job | None = getattr(_local, "job", None)
    if job is not None and job.cancelled:
        raise ComputeLimitExceeded(f"{what} was stopped: its caller stopped waiting")
    if deadline is not None and time.thread_time() > deadline:
        limit = job.limit if job is not None else None
        raise ComputeLimitExceeded(f"{what} took more than {limit} s of CPU, the most a call may")


def feed_events(inst: WorkflowInstance, events: Sequence[Event]) -> None:
    """Feed `inst` events its code has not seen yet, in order."""
    for ev in events:
        inst.apply_new(ev)


class Recent(Generic[K, T]):
    """The answers computed last, by question, within a count and a total size: a flood of
    the same question (a query of an unchanged history) costs one computation."""

    def __init__(self, count: int = 256, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.count = count
        self.max_bytes = max_bytes
        self._kept: OrderedDict[K, tuple[T, int]] = OrderedDict()
        self._bytes = 0

    def get(self, key: K) -> T | None:
        found = self._kept.get(key)
        if found is None:
            return None
        self._kept.move_to_end(key)
        return found[0]

    def put(self, key: K, value: T, size: int) -> None:
        """Keep `value` (about `size` bytes) unless it alone is over an eighth of the bound."""
        if size > self.max_bytes // 8:
            return
        old = self._kept.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        self._kept[key] = (value, size)
        self._bytes += size
        while len(self._kept) > self.count or self._bytes > self.max_bytes:
            _, (_, dropped) = self._kept.popitem(last=False)
            self._bytes -= dropped
