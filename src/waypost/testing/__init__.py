"""Testing tools for waypost workflows and for waypost itself.

- `TestEnv`: an engine on a fresh SQLite file (or the database you name) with a
  controllable clock: ``await env.advance(hours=3)`` fires the timers that came
  due, in milliseconds.
- `FaultInjector` and `FaultyStore`: seeded faults (crashes around writes,
  lost or duplicated deliveries, lost activity responses, stalled workers,
  timers fired twice, database outages); `faulty_engine` wires both.
- `check_invariants(store)`: what must hold over a store after any failure;
  `Ledger`: a downstream system that deduplicates by idempotency key.
- `python -m waypost.testing.simulate`: named fault scenarios, run for many
  seeds, with a summary table.
- `event_types`, `events_of`: small helpers to assert on a run's history.
- `replay_history`, `replay_file`: replay a stored history against code, no store
  (would this code suspend that run?).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

from waypost.client.engine import AsyncEngine, AsyncRunHandle
from waypost.engine.faults import Crash, FaultPlan, NoFaults
from waypost.errors import InvalidState
from waypost.model.events import ActivityFailed, Event, EventType, feeds_code
from waypost.model.status import RunStatus
from waypost.store import open_store

from .clock import TestClock
from .faults import FaultInjector, FaultRates, FaultyStore
from .invariants import Ledger, Violation, check_invariants, check_run
from .replay import ReplayResult, replay_file, replay_history


def event_types(history: Iterable[Event]) -> list[str]:
    """The types of a history's events, in order: easy to compare with a list."""
    return [e.type for e in history]


def events_of(history: Iterable[Event], type_: str, **data: Any) -> list[Event]:
    """The events of `type_` whose data has every given key/value."""
    return [
        e for e in history if e.type == type_ and all(e.data.get(k) == v for k, v in data.items())
    ]


def faulty_engine(url: str, injector: FaultInjector, **options: Any) -> AsyncEngine:
    """An engine whose store and fault points follow `injector`.

    Its injected faults lose responses and stall attempts past their leases on purpose,
    so lapses are not counted toward suspending a run as poison (`max_lapses`) unless
    the caller sets a bound: a loaded machine would otherwise turn a seeded fault
    schedule into a "crash loop"."""
    options.setdefault("max_lapses", 1_000_000)
    store = FaultyStore(open_store(url), injector)
    return AsyncEngine(store=store, faults=injector, **options)


def _retrying(ev: Event) -> bool:
    """A failed attempt that is tried again: the code sees only the step's outcome."""
    return ev.type == EventType.ACTIVITY_FAILED and bool(ActivityFailed.parse(ev).retrying)


class TestEnv:
    """An engine for tests: its own database, a clock you move, and its workflows served.

        async with TestEnv(order_workflow, charge) as env:
            run = await env.engine.start(order_workflow, {"id": 7})
            await env.advance(days=3)          # the reminder timer fires now
            assert await run.result(timeout=5) == "reminded"
            assert "TimerFired" in event_types(await run.history())

    `url` defaults to a SQLite file in a temporary directory removed on exit.
    Engine options (`lease`, `faults`, …) pass through.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, *registered: Any, url: str | None = None, **options: Any) -> None:
        self.registered = registered
        self.clock = TestClock()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if url is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="waypost-test-")
            url = f"sqlite:///{Path(self._tmp.name) / 'waypost.db'}"
        self.url = url
        options.setdefault("poll_interval", 0.05)
        self.engine = AsyncEngine(url, clock=self.clock, **options)
        self.engine.register(*registered)

    async def __aenter__(self) -> TestEnv:
        await self.engine.start_serving()
        self.clock.attach(self.engine)
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.engine.close()
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()

    async def advance(self, by: timedelta | float | None = None, **parts: float) -> None:
        """Move the clock forward (`advance(3600)`, `advance(hours=1)`); due timers fire."""
        delta = timedelta(**parts) if by is None else by
        self.clock.advance(delta)

    async def settle(self, timeout: float = 30.0) -> None:
        """Wait until no run is running: each waits for something (a timer, a signal,
        an attempt's retry, an operator if it is suspended) or has finished."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not (await self._waiting())[0]:
            if loop.time() > deadline:
                raise TimeoutError(f"runs still running after {timeout}s")
            await asyncio.sleep(0.01)

    async def _waiting(self) -> tuple[bool, float | None]:
        """Whether every run waits for something or has finished; and when the first of
        the attempts waiting out their retry backoff is due (None: there is none)."""
        store = self.engine.store
        retry_due: float | None = None
        for run in await store.list_runs(tenant=None, limit=2**62):
            status = RunStatus(run.status)
            if status.finished or status is RunStatus.SUSPENDED:
                continue  # a suspended run waits for an operator
            if run.processed_seq < run.last_seq:
                # Something happened (a timer fired, a signal came) that the code
                # has not seen yet; its own commands and audit facts do not count.
                new = await store.load_history(run.tenant, run.run_id, run.processed_seq)
                if any(feeds_code(e) and not _retrying(e) for e in new):
                    return False, None
            if status is RunStatus.RUNNING:
                due = await self._retry_due(run.tenant, run.run_id)
                if due is None:
                    return False, None
                retry_due = due if retry_due is None else min(retry_due, due)
        return True, retry_due

    async def _retry_due(self, tenant: str, run_id: str) -> float | None:
        """When the first retry of a running run is due, if all its open attempts wait
        out their retry backoff (nothing else to do until then); else None."""
        now = self.clock()
        attempts = [
            t for t in await self.engine.store.run_tasks(tenant, run_id) if t.kind == "activity"
        ]
        due = [
            t.visible_at
            for t in attempts
            if t.owner is None and t.visible_at is not None and t.visible_at > now
        ]
        return min(due) if due and len(due) == len(attempts) else None

    async def fast_forward(
        self,
        run: AsyncRunHandle,
        *,
        limit: timedelta = timedelta(days=3650),
        timeout: float = 60.0,
    ) -> Any:
        """Run `run` to its end, moving the clock to the next timer (or retry of a failed
        attempt) whenever all runs wait.

        Returns the run's result (or raises what `result()` raises). Raises
        `InvalidState` at once if the run is suspended (it waits for an operator), and
        `TimeoutError` if it waits for something no timer will end (a signal nobody
        sends) or would need more than `limit` of skipped time.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        start = self.clock()
        while True:
            await self.settle(max(0.0, deadline - loop.time()))
            info = await run.get()
            status = RunStatus(info.status)
            if status.finished:
                return await run.result(timeout=max(0.1, deadline - loop.time()))
            if status is RunStatus.SUSPENDED:
                error = info.error or {}
                raise InvalidState(
                    f"run {run.run_id} is suspended (it waits for an operator): "
                    f"{error.get('message', '')}"
                )
            timer = await self.engine.store.next_timer_at()
            retry = (await self._waiting())[1]
            due = min((t for t in (timer, retry) if t is not None), default=None)
            if due is None:
                if status is RunStatus.RUNNING and loop.time() < deadline:
                    continue  # between two steps (a new generation): settle again
                raise TimeoutError(
                    f"run {run.run_id} is {info.status} on {info.waiting_for} and no timer is set"
                )
            if due - start > limit.total_seconds():
                raise TimeoutError(f"run {run.run_id} needs more than {limit} of skipped time")
            self.clock.advance(max(0.0, due - self.clock()))
            await asyncio.sleep(0)
            if due == timer:
                await self._fired(due)

    async def _fired(self, due: float) -> None:
        """Wait until the timer due at `due` has fired (the next one is later)."""
        for _ in range(3000):
            nxt = await self.engine.store.next_timer_at()
            if nxt is None or nxt > due:
                return
            await asyncio.sleep(0.01)

    async def check(self) -> list[Violation]:
        """The invariant violations in this environment's database (none, if all is well)."""
        return await check_invariants(self.engine.store)


__all__ = [
    "Crash",
    "FaultInjector",
    "FaultPlan",
    "FaultRates",
    "FaultyStore",
    "Ledger",
    "NoFaults",
    "ReplayResult",
    "TestClock",
    "TestEnv",
    "Violation",
    "check_invariants",
    "check_run",
    "event_types",
    "events_of",
    "faulty_engine",
    "replay_file",
    "replay_history",
]
