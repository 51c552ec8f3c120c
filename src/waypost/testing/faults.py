"""Seeded fault injection: a fault plan for the engine and a store that misbehaves.

`FaultInjector` decides, from one seeded random generator, which faults
happen and when: crashes just before or just after a write reaches the
database, lost and duplicated task deliveries, lost activity responses, a
worker stalled past its lease, timers fired twice, and database outages.
Pass it to the engine as `faults=` and wrap the engine's store in
`FaultyStore` (``AsyncEngine(store=FaultyStore(open_store(url), injector),
faults=injector)``; `waypost.testing.faulty_engine` does both).

The same seed makes the same decisions in the same order. Real I/O still
interleaves as it will, so a seed fixes the scenario and its faults, not every
thread switch; a failing seed reproduces what went wrong in practice, and the
invariant checker says what broke.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from waypost.engine.faults import Crash, NoFaults
from waypost.errors import StoreError
from waypost.store.base import ClaimedTask, Store

# Store verbs that write; a crash is injected just before or just after one.
WRITES = frozenset(
    {
        "create_run",
        "commit_run",
        "claim_tasks",
        "renew_leases",
        "release_tasks",
        "retime_activity",
        "fire_due_timers",
        "beat_worker",
        "remove_worker",
        "decide_approval",
        "record_refusal",
        "change_approvers",
        "issue_credentials",
        "add_outbox",
        "claim_outbox",
        "finish_outbox",
        "add_group_members",
        "remove_group_members",
        "publish_definition",
        "create_tenant",
        "create_api_key",
        "revoke_api_key",
        "touch_api_key",
        "signal_with_start",
        "create_webhook_source",
        "delete_webhook_source",
        "deliver_correlated",
    }
)
# Verbs that only read (an outage fails them too).
READS = frozenset(
    {
        "expired_activities",
        "next_timer_at",
        "get_run",
        "load_history",
        "list_runs",
        "run_tasks",
        "load_run",
        "live_workers",
        "get_approval",
        "list_approvals",
        "get_credential",
        "approval_votes",
        "approval_refusals",
        "group_members",
        "list_groups",
        "get_definition",
        "list_definitions",
        "list_tenants",
        "list_api_keys",
        "api_key_to_authenticate",
        "list_webhook_sources",
        "webhook_source",
    }
)


@dataclasses.dataclass(frozen=True)
class FaultRates:
    """How likely each fault is at each chance it has (0 = never)."""

    crash_before_write: float = 0.0
    crash_after_write: float = 0.0
    drop_delivery: float = 0.0
    duplicate_delivery: float = 0.0
    lose_response: float = 0.0
    stall: float = 0.0
    stall_seconds: float = 0.0
    fire_timers_twice: float = 0.0
    outage: float = 0.0
    outage_seconds: float = 0.0

    def any(self) -> bool:
        return any(
            getattr(self, f.name) > 0 for f in dataclasses.fields(self) if "seconds" not in f.name
        )


class FaultInjector(NoFaults):
    """A seeded fault plan. `injected` counts what it did, by fault name.

    `crashed` is set once it has crashed its engine: from then on every store
    call and fault point raises `Crash`, so nothing more of that engine
    reaches the database (as if its process had died).
    """

    def __init__(
        self,
        seed: int,
        rates: FaultRates | None = None,
        *,
        max_crashes: int = 1,
        crash_at: tuple[str, int] | None = None,
    ) -> None:
        self.seed = seed
        self.rates = rates or FaultRates()
        self.max_crashes = max_crashes
        # ("before" | "after", n): crash at the n-th write, whatever the rates say.
        self.crash_at = crash_at
        self.writes = 0
        self.injected: collections.Counter[str] = collections.Counter()
        self.crashed = threading.Event()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._outage_until = 0.0
        self.on_crash: Callable[[], None] | None = None

    # -- decisions ----------------------------------------------------------
    def roll(self, fault: str, p: float) -> bool:
        """Whether `fault` (probability p) happens now; counts it if so."""
        if p <= 0:
            return False
        with self._lock:
            happens = self._random.random() < p
            if happens:
                self.injected[fault] += 1
            return happens

    def crash(self, where: str) -> Crash:
        """Mark the engine dead; the returned `Crash` is for the caller to raise."""
        with self._lock:
            first = not self.crashed.is_set()
            self.crashed.set()
        if first and self.on_crash is not None:
            self.on_crash()
        return Crash(f"simulated crash {where} (seed {self.seed})")

    def maybe_crash(self, where: str, p: float) -> None:
        if self.crashed.is_set():
            raise Crash(f"the engine has crashed (seed {self.seed})")
        if self.crash_at is not None and where.startswith(self.crash_at[0]):
            with self._lock:
                self.writes += 1
                due = self.writes == self.crash_at[1]
                if due:
                    self.injected[f"crash {where}"] += 1
            if due:
                raise self.crash(where)
        crashes = sum(n for name, n in self.injected.items() if name.startswith("crash "))
        if crashes < self.max_crashes and self.roll(f"crash {where}", p):
            raise self.crash(where)

    def begin_outage(self, seconds: float) -> None:
        """Fail every store call of this engine for the next `seconds`."""
        with self._lock:
            self.injected["database outage"] += 1
            self._outage_until = max(self._outage_until, time.monotonic() + seconds)

    def check_outage(self, verb: str) -> None:
        if time.monotonic() < self._outage_until:
            raise StoreError(f"simulated database outage ({verb})")
        if self.rates.outage > 0 and self.roll("database outage", self.rates.outage):
            self.injected["database outage"] -= 1  # counted by begin_outage
            self.begin_outage(self.rates.outage_seconds)
            raise StoreError(f"simulated database outage begins ({verb})")

    # -- the engine's fault points -------------------------------------------
    def hit(self, point: str) -> None:
        if self.crashed.is_set():
            raise Crash(f"the engine has crashed (seed {self.seed})")

    def chance(self, fault: str) -> bool:
        if self.crashed.is_set():
            raise Crash(f"the engine has crashed (seed {self.seed})")
        if fault == "activity:lose-response":
            return self.roll("activity response lost", self.rates.lose_response)
        return False

    def pause(self, fault: str) -> float:
        stalls = fault == "activity:stall"
        if stalls and self.roll("worker stalled past its lease", self.rates.stall):
            return self.rates.stall_seconds
        return 0.0


class FaultyStore:
    """A store that fails the way a database and a network do, as `injector` decides.

    Every verb of the wrapped store is reachable; writes may crash the engine
    just before or just after they reach the database, any call may meet an
    outage (`StoreError`), claimed tasks may be dropped (leased but never
    delivered, so their lease lapses) or delivered twice, and due timers may be
    fired by two concurrent calls.
    """

    def __init__(self, inner: Store, injector: FaultInjector) -> None:
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "injector", injector)
        object.__setattr__(self, "url", inner.url)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.inner, name, value)  # what is set on the store is the inner one's

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name in WRITES or name in READS:
            return self._wrap(name, attr)
        return attr

    def _wrap(self, verb: str, call: Callable[..., Any]) -> Callable[..., Any]:
        inj: FaultInjector = self.injector
        rates = inj.rates

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            if verb in WRITES:
                inj.maybe_crash(f"before {verb}", rates.crash_before_write)
            elif inj.crashed.is_set():
                raise Crash(f"the engine has crashed (seed {inj.seed})")
            inj.check_outage(verb)
            if verb == "fire_due_timers" and inj.roll(
                "timers fired twice at once", rates.fire_timers_twice
            ):
                first, second = await asyncio.gather(call(*args, **kwargs), call(*args, **kwargs))
                result: Any = list(first) + list(second)
            else:
                result = await call(*args, **kwargs)
            if verb in WRITES:
                inj.maybe_crash(f"after {verb}", rates.crash_after_write)
            if verb == "claim_tasks" and result:
                result = self._deliver(cast(list[ClaimedTask], result))
            return result

        return wrapped

    def _deliver(self, claimed: list[ClaimedTask]) -> list[ClaimedTask]:
        inj: FaultInjector = self.injector
        out: list[ClaimedTask] = []
        for task in claimed:
            if inj.roll("task delivery dropped", inj.rates.drop_delivery):
                continue  # leased to this engine, never started: the lease lapses
            out.append(task)
            if inj.roll("task delivered twice", inj.rates.duplicate_delivery):
                out.append(task)
        return out

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()
