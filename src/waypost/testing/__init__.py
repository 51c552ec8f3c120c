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
from waypost.model.events import Event, feeds_code
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
        """Wait until no run is running: each waits for something or has finished."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await self._settled():
            if loop.time() > deadline:
                raise TimeoutError(f"runs still running after {timeout}s")
            await asyncio.sleep(0.01)

    async def _settled(self) -> bool:
        store = self.engine.store
        for run in await store.list_runs(tenant=None, limit=2**62):
            status = RunStatus(run.status)
            if status.finished:
                continue
            if status is RunStatus.RUNNING:
                return False
            if run.processed_seq < run.last_seq:
                # Something happened (a timer fired, a signal came) that the code
                # has not seen yet; its own commands and audit facts do not count.
                new = await store.load_history(run.tenant, run.run_id, run.processed_seq)
                if any(feeds_code(e) for e in new):
                    return False
        return True

    async def fast_forward(
        self,
        run: AsyncRunHandle,
        *,
        limit: timedelta = timedelta(days=3650),
        timeout: float = 60.0,
    ) -> Any:
        """Run `run` to its end, moving the clock to the next timer whenever all runs wait.

        Returns the run's result (or raises what `result()` raises). Raises
        `TimeoutError` if the run waits for something no timer will end (a
        signal nobody sends) or would need more than `limit` of skipped time.
        """
        start = self.clock()
        while True:
            await self.settle(timeout)
            info = await run.get()
            if RunStatus(info.status).finished:
                return await run.result(timeout=timeout)
            due = await self.engine.store.next_timer_at()
            if due is None:
                raise TimeoutError(
                    f"run {run.run_id} is {info.status} on {info.waiting_for} and no timer is set"
                )
            if due - start > limit.total_seconds():
                raise TimeoutError(f"run {run.run_id} needs more than {limit} of skipped time")
            self.clock.advance(max(0.0, due - self.clock()))
            await asyncio.sleep(0)
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
