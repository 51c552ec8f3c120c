"""The harness of the fault scenarios: their workflows, engines, runs and checks.

`Sim` holds one scenario's database, clock, engines (each with its own seeded
fault injector), the runs it started and the downstream ledger; the scenarios
in `simulate.py` and `simulate_migration.py` drive it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

import waypost as wp
from waypost.client.engine import AsyncEngine
from waypost.engine.faults import Crash
from waypost.errors import StoreError
from waypost.features.senders import Notification
from waypost.model.events import EventType
from waypost.model.logs import logger
from waypost.model.status import RunStatus
from waypost.store import open_store
from waypost.store.base import CommitResult, RunCommit, Store

from .clock import TestClock
from .faults import FaultInjector, FaultRates, FaultyStore
from .invariants import Ledger, Violation, all_runs, check_invariants

log = logger("waypost.simulate")
T = TypeVar("T")

LEASE = 0.5  # seconds: short, so takeovers happen within a scenario
POLL = 0.05
FAST_RETRY = wp.Retry(
    max_attempts=1000,
    initial_interval=timedelta(milliseconds=20),
    backoff=1.5,
    max_interval=timedelta(milliseconds=200),
)

# The downstream system of the scenario in progress (one scenario at a time per process).
_ledger = Ledger()


def new_ledger() -> None:
    """Start the next scenario with a downstream system that has seen nothing."""
    global _ledger
    _ledger = Ledger()


# == the workflow every scenario runs =========================================
@wp.activity(retry=FAST_RETRY, timeout=timedelta(seconds=10))
async def sim_reserve(ctx: wp.ActivityContext, order: int, item: int) -> str:
    _ledger.apply(ctx.idempotency_key, ("reserve", order, item))
    await asyncio.sleep(0.002)
    return f"r{order}-{item}"


@wp.activity(retry=FAST_RETRY, timeout=timedelta(seconds=10))
def sim_charge(ctx: wp.ActivityContext, order: int, amount: int) -> int:
    effect = _ledger.apply(ctx.idempotency_key, ("charge", order, amount))
    time.sleep(0.002)
    return int(effect[2])


@wp.activity(retry=FAST_RETRY, timeout=timedelta(seconds=10))
def sim_ship(ctx: wp.ActivityContext, order: int) -> str:
    _ledger.apply(ctx.idempotency_key, ("ship", order))
    return f"s{order}"


async def _reserve_and_charge(ctx: wp.WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
    n = int(order["n"])
    reserved = await asyncio.gather(ctx.run(sim_reserve, n, 1), ctx.run(sim_reserve, n, 2))
    await ctx.sleep(float(order["sleep"]))
    paid = await ctx.run(sim_charge, n, n * 10)
    return {"n": n, "reserved": list(reserved), "paid": paid}


@wp.workflow(name="sim_order")
async def sim_order(ctx: wp.WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
    return await _reserve_and_charge(ctx, order)


@wp.workflow(name="sim_order")
async def sim_order_patched(ctx: wp.WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
    """The next release of `sim_order`: it ships after charging, guarded by `patched`."""
    out = await _reserve_and_charge(ctx, order)
    if ctx.patched("ship-after-charge"):
        out["shipped"] = await ctx.run(sim_ship, out["n"])
    return out


@wp.workflow(name="sim_approval")
async def sim_approval(ctx: wp.WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
    """An order two of three approvers must approve."""
    decision = await ctx.approval(
        "two approvers", approvers=wp.Quorum(2, group="approvers"), expires_in=3600.0
    )
    return {"n": int(order["n"]), "outcome": decision.outcome, "by": sorted(decision.decided_by)}


APPROVERS = ["a1", "a2", "a3"]
OLD_CODE: list[Any] = [sim_order, sim_reserve, sim_charge, sim_approval]
NEW_CODE: list[Any] = [sim_order_patched, sim_reserve, sim_charge, sim_ship, sim_approval]


# == the workflow defined as data ==============================================
@wp.activity(name="sim.stock", retry=FAST_RETRY, timeout=timedelta(seconds=10))
def sim_stock(ctx: wp.ActivityContext, n: int) -> dict[str, str]:
    _ledger.apply(ctx.idempotency_key, ("stock", n))
    return {"id": f"st{n}"}


@wp.activity(name="sim.unstock", retry=FAST_RETRY, timeout=timedelta(seconds=10))
def sim_unstock(ctx: wp.ActivityContext, stock_id: str) -> None:
    _ledger.apply(ctx.idempotency_key, ("unstock", stock_id))


@wp.activity(name="sim.inspect", retry=FAST_RETRY, timeout=timedelta(seconds=10))
def sim_inspect(ctx: wp.ActivityContext, n: int) -> dict[str, str]:
    _ledger.apply(ctx.idempotency_key, ("inspect", n))
    return {"id": f"i{n}"}


@wp.activity(name="sim.dispatch", retry=FAST_RETRY, timeout=timedelta(seconds=10))
def sim_dispatch(ctx: wp.ActivityContext, n: int) -> dict[str, str]:
    _ledger.apply(ctx.idempotency_key, ("dispatch", n))
    return {"id": f"d{n}"}


SHIPMENT = "sim_shipment"
DEFINITION_CODE: list[Any] = [*OLD_CODE, sim_stock, sim_unstock, sim_inspect, sim_dispatch]


def shipped(n: int, version: int) -> dict[str, Any]:
    """The result of shipment run `n` that ends on `version`."""
    out = {"n": n, "stock": f"st{n}", "dispatched": f"d{n}"}
    return {**out, "inspected": f"i{n}"} if version == 2 else out


class Inbox:
    """A notification sender that keeps what it is given, as the approvers' mailboxes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.received: list[Notification] = []

    def send(self, notification: Notification) -> None:
        with self._lock:
            self.received.append(notification)

    def all(self) -> list[Notification]:
        with self._lock:
            return list(self.received)


def expected(order: dict[str, Any], result: Any) -> bool:
    """Whether `result` is what run `order` must return (with or without the patch)."""
    n = int(order["n"])
    if order.get("workflow") == SHIPMENT:
        return bool(result == shipped(n, 1) or result == shipped(n, 2))
    if order.get("workflow") == "sim_approval":
        by = result.get("by", []) if isinstance(result, dict) else []
        return bool(
            result == {"n": n, "outcome": "approved", "by": by}
            and len(set(by)) == 2
            and set(by) <= set(APPROVERS)
        )
    base = {"n": n, "reserved": [f"r{n}-1", f"r{n}-2"], "paid": n * 10}
    return bool(result == base or result == {**base, "shipped": f"s{n}"})


# == one scenario ==============================================================
@dataclasses.dataclass
class Outcome:
    """What one scenario with one seed did and found."""

    scenario: str
    seed: int
    store: str
    runs: int = 0
    completed: int = 0
    crashes: int = 0
    faults: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    violations: list[Violation] = dataclasses.field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations and self.error is None and self.completed == self.runs


class Sim:
    """The engines, clock, runs and downstream ledger of one scenario."""

    def __init__(self, name: str, seed: int, url: str, runs: int) -> None:
        self.name = name
        self.seed = seed
        self.url = url
        self.random = random.Random(f"{name}:{seed}")
        self.clock = TestClock()
        self.n_runs = runs
        self.orders: dict[str, dict[str, Any]] = {}
        self.engines: list[tuple[AsyncEngine, FaultInjector]] = []
        self.retired: list[FaultInjector] = []
        self.outcome = Outcome(name, seed, url.split(":", 1)[0])
        self._spawned = 0
        self.reader: Store = open_store(url)
        self.inbox = Inbox()
        # A client that starts runs but serves nothing: its runs reach the
        # engines through task claims (and their faults), not in-process.
        self.client = AsyncEngine(url, lease=LEASE, poll_interval=POLL, clock=self.clock)
        self.client.register(*NEW_CODE)
        self.via_client = 0.5
        self.rates: FaultRates | None = None  # the faults of engines started in place of others

    def note(self, fault: str) -> None:
        """Count a fault the driver itself injected (a clock jump, an outage)."""
        self.outcome.faults[fault] += 1

    # -- engines ------------------------------------------------------------
    async def engine(
        self,
        rates: FaultRates | None = None,
        code: list[Any] | None = None,
        crashes: int = 1,
        crash_at: tuple[str, int] | None = None,
        dies_migrating: str | None = None,
    ) -> AsyncEngine:
        """Start serving a new engine whose faults follow `rates` (and `crash_at`).

        With `dies_migrating` ("before" or "after") the engine dies at the commit
        of the first migration it makes.
        """
        self._spawned += 1
        injector = FaultInjector(
            self.seed * 1000 + self._spawned, rates, max_crashes=crashes, crash_at=crash_at
        )
        if dies_migrating is None:
            store = FaultyStore(open_store(self.url), injector)
        else:
            store = DiesMigrating(open_store(self.url), injector, dies_migrating)
        engine = AsyncEngine(
            store=store,
            lease=LEASE,
            poll_interval=POLL,
            clock=self.clock,
            faults=injector,
            worker_id=f"sim-{self.seed}-{self._spawned}",
            shutdown_grace=2.0,
            notifier=self.inbox,
            # The simulation drops claimed tasks and stalls workers past their lease on
            # purpose, many times over: those lapses are its faults, not a poison run's crash
            # loop (which tests/acceptance/test_poison.py checks), so no run is suspended
            # for them.
            max_lapses=1_000_000,
        )
        engine.register(*(code or OLD_CODE))
        self.clock.attach(engine)
        for attempt in range(50):
            try:
                await engine.start_serving()
                break
            except (StoreError, Crash):
                if injector.crashed.is_set() or attempt == 49:
                    await engine.abandon()
                    self.retired.append(injector)
                    return await self.engine(rates, code, crashes, None, dies_migrating)
                await asyncio.sleep(0.05)
        self.engines.append((engine, injector))
        return engine

    async def replace_crashed(self, rates: FaultRates | None = None) -> None:
        """Engines that crashed are gone for good; start one in place of each."""
        for pair in list(self.engines):
            engine, injector = pair
            # Scenarios may call this from several tasks at once: each pair goes once.
            if injector.crashed.is_set() and pair in self.engines:
                self.engines.remove(pair)
                self.clock.detach(engine)
                await engine.abandon()
                self.retired.append(injector)
                await self.engine(rates, self._code_of(engine), crashes=injector.max_crashes)

    @staticmethod
    def _code_of(engine: AsyncEngine) -> list[Any]:
        names = engine.registry.activity_names()
        if "sim.stock" in names:
            return DEFINITION_CODE
        return NEW_CODE if "sim_ship" in names else OLD_CODE

    def operator(self, *, client: bool = True) -> AsyncEngine:
        """An engine for the harness's own calls: a live one (not one bound to die), or
        the client, which serves nothing."""
        live = [
            e
            for e, inj in self.engines
            if not inj.crashed.is_set() and not isinstance(e.store, DiesMigrating)
        ]
        if client or not live:
            live.append(self.client)
        return self.random.choice(live)

    async def stop(self, engine: AsyncEngine) -> None:
        """Stop one engine gracefully (a deploy), or abandon it if it crashed meanwhile."""
        pair = next(p for p in self.engines if p[0] is engine)
        self.engines.remove(pair)
        self.clock.detach(engine)
        try:
            await engine.close()
        except (Crash, StoreError):
            await engine.abandon()
        self.retired.append(pair[1])

    # -- runs ---------------------------------------------------------------
    def new_order(
        self, sleep: float | None = None, workflow: str = "sim_order"
    ) -> tuple[str, dict[str, Any]]:
        n = len(self.orders) + 1
        order: dict[str, Any] = {
            "n": n,
            "sleep": sleep if sleep is not None else self.random.uniform(0.05, 0.4),
        }
        if workflow != "sim_order":
            order["workflow"] = workflow
        run_id = f"sim-{self.seed}-{n}-{uuid.uuid4().hex[:6]}"
        self.orders[run_id] = order
        return run_id, order

    async def start_runs(
        self, count: int, sleep: float | None = None, workflow: str = "sim_order"
    ) -> None:
        """Start `count` runs through the live engines, retrying as a client would."""
        for _ in range(count):
            run_id, order = self.new_order(sleep, workflow)
            await self.start_one(run_id, order)

    async def start_one(
        self, run_id: str, order: dict[str, Any], version: int | None = None
    ) -> None:
        for _ in range(400):
            live = [e for e, inj in self.engines if not inj.crashed.is_set()]
            if self.random.random() < self.via_client:
                live = [self.client]
            if live:
                engine = self.random.choice(live)
                try:
                    workflow = order.get("workflow", "sim_order")
                    await engine.start(workflow, order, run_id=run_id, version=version)
                    return
                except (StoreError, Crash):
                    pass  # the same run_id again is safe: start is idempotent
            await self.replace_crashed()
            await asyncio.sleep(0.02)
        raise RuntimeError(f"could not start run {run_id}")

    async def unfinished(self) -> int:
        runs = await patiently(lambda: all_runs(self.reader))
        done = sum(1 for r in runs if r.run_id in self.orders and RunStatus(r.status).finished)
        return len(self.orders) - done

    async def until_waiting(self, kinds: tuple[str, ...], timeout: float = 60.0) -> None:
        """Keep the engines going until every run waits for one of `kinds`."""
        deadline = time.monotonic() + timeout
        while True:
            runs = await patiently(lambda: all_runs(self.reader))
            waiting = {r.run_id for r in runs if any(w.get("kind") in kinds for w in r.waiting_for)}
            if waiting >= set(self.orders):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"runs not waiting for {kinds} after {timeout:.0f}s")
            await self.replace_crashed(self.rates)
            await asyncio.sleep(0.05)

    async def until_finished(
        self,
        timeout: float = 60.0,
        tick: Callable[[], Awaitable[None]] | None = None,
        rates: FaultRates | None = None,
    ) -> None:
        """Keep the engines going until every run has finished (or `timeout`)."""
        deadline = time.monotonic() + timeout
        while await self.unfinished():
            if time.monotonic() > deadline:
                raise TimeoutError(f"runs unfinished after {timeout:.0f}s")
            await self.replace_crashed(rates)
            if tick is not None:
                await tick()
            await asyncio.sleep(0.05)

    # -- verdict ------------------------------------------------------------
    async def finish(self) -> Outcome:
        for engine, _ in list(self.engines):
            await self.stop(engine)
        await self.client.close()
        out = self.outcome
        out.runs = len(self.orders)
        for injector in self.retired:
            out.faults.update(injector.injected)
            out.crashes += injector.crashed.is_set()
        out.violations.extend(await patiently(lambda: check_invariants(self.reader)))
        out.violations.extend(_ledger.violations())
        runs = {r.run_id: r for r in await patiently(lambda: all_runs(self.reader))}
        for run_id, order in self.orders.items():
            run = runs.get(run_id)
            if run is None:
                out.violations.append(Violation("admitted", "default", run_id, "run is missing"))
            elif run.status != RunStatus.COMPLETED:
                out.violations.append(
                    Violation("admitted", run.tenant, run_id, f"ended {run.status}: {run.error}")
                )
            elif not expected(order, run.result):
                out.violations.append(
                    Violation("result", run.tenant, run_id, f"wrong result {run.result!r}")
                )
            else:
                out.completed += 1
        return out


async def patiently(read: Callable[[], Awaitable[T]], seconds: float = 60.0) -> T:
    """The harness's own reads outlast a database restart, as the engines do."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await read()
        except StoreError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


class DiesMigrating(FaultyStore):
    """A faulty store whose engine dies just before or just after it commits a migration."""

    where: str

    def __init__(self, inner: Store, injector: FaultInjector, where: str) -> None:
        super().__init__(inner, injector)
        object.__setattr__(self, "where", where)

    async def commit_run(self, commit: RunCommit) -> CommitResult:
        commit_run = FaultyStore.__getattr__(self, "commit_run")
        inj: FaultInjector = self.injector
        migrating = any(e.type == EventType.RUN_MIGRATED for e in commit.events)
        if not migrating or inj.crashed.is_set():
            return cast(CommitResult, await commit_run(commit))
        if self.where == "before" and inj.roll("crash just before a migration's commit", 1):
            raise inj.crash("just before a migration's commit")
        result = cast(CommitResult, await commit_run(commit))
        if self.where == "after" and inj.roll("crash just after a migration's commit", 1):
            raise inj.crash("just after a migration's commit")
        return result
