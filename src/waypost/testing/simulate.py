"""Fault scenarios: throw production's failures at waypost and check the invariants.

Each scenario starts a handful of engines on one database, starts runs of a
workflow that uses parallel activities, a durable timer and a downstream
system that deduplicates by idempotency key, injects its faults (chosen by a
seeded generator), waits until every run has finished, and then checks the
invariants of `waypost.testing.invariants` over the whole store, that every
admitted run completed with the result it must have, and that no downstream
effect happened twice. (`definition_migration` runs a workflow defined as data
instead, and moves its waiting runs to the definition's next version.)

    python -m waypost.testing.simulate --seeds 1000
    python -m waypost.testing.simulate --scenario lost_response --seed 17 --db postgresql://...

prints one line per failing seed and a summary table. A failing seed runs the
same scenario with the same faults again when given to ``--seed``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import logging
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import waypost as wp
from waypost.engine.core import AsyncEngine
from waypost.engine.faults import Crash
from waypost.engine.senders import Notification
from waypost.errors import StoreError
from waypost.model.status import RunStatus
from waypost.store import open_store
from waypost.store.base import Store

from .clock import TestClock
from .faults import FaultInjector, FaultRates, FaultyStore
from .invariants import Ledger, Violation, all_runs, check_invariants

log = logging.getLogger("waypost.simulate")
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


@wp.workflow(name="sim_order")
async def sim_order(ctx: wp.WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
    n = int(order["n"])
    reserved = await asyncio.gather(ctx.run(sim_reserve, n, 1), ctx.run(sim_reserve, n, 2))
    await ctx.sleep(float(order["sleep"]))
    paid = await ctx.run(sim_charge, n, n * 10)
    return {"n": n, "reserved": list(reserved), "paid": paid}


@wp.workflow(name="sim_order")
async def sim_order_patched(ctx: wp.WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
    """The next release of `sim_order`: it ships after charging, guarded by `patched`."""
    n = int(order["n"])
    reserved = await asyncio.gather(ctx.run(sim_reserve, n, 1), ctx.run(sim_reserve, n, 2))
    await ctx.sleep(float(order["sleep"]))
    paid = await ctx.run(sim_charge, n, n * 10)
    out: dict[str, Any] = {"n": n, "reserved": list(reserved), "paid": paid}
    if ctx.patched("ship-after-charge"):
        out["shipped"] = await ctx.run(sim_ship, n)
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
            from .simulate_migration import DiesMigrating  # here: that module imports this one

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
        from .simulate_migration import DiesMigrating  # here: that module imports this one

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
        runs = await _patiently(lambda: all_runs(self.reader))
        done = sum(1 for r in runs if r.run_id in self.orders and RunStatus(r.status).finished)
        return len(self.orders) - done

    async def until_waiting(self, kinds: tuple[str, ...], timeout: float = 60.0) -> None:
        """Keep the engines going until every run waits for one of `kinds`."""
        deadline = time.monotonic() + timeout
        while True:
            runs = await _patiently(lambda: all_runs(self.reader))
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
        out.violations.extend(await _patiently(lambda: check_invariants(self.reader)))
        out.violations.extend(_ledger.violations())
        runs = {r.run_id: r for r in await _patiently(lambda: all_runs(self.reader))}
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


async def _patiently(read: Callable[[], Awaitable[T]], seconds: float = 60.0) -> T:
    """The harness's own reads outlast a database restart, as the engines do."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await read()
        except StoreError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


Scenario = Callable[[Sim], Awaitable[None]]


async def _two_faulty_engines(sim: Sim, rates: FaultRates) -> None:
    """Two engines with the same faults serve the scenario's runs to the end."""
    await sim.engine(rates)
    await sim.engine(rates)
    await sim.start_runs(sim.n_runs)
    await sim.until_finished()


async def _crash_at_a_write(sim: Sim, where: str) -> None:
    rates = FaultRates(**{f"crash_{where}_write": 0.02})
    # The first engine surely dies at a write chosen by the seed; engines
    # started in place of a dead one may die too, less often.
    await sim.engine(crash_at=(where, sim.random.randint(3, 15)))
    await sim.engine()
    await sim.start_runs(sim.n_runs)
    await sim.until_finished(rates=rates)


async def crash_after_commit(sim: Sim) -> None:
    """An engine dies just after a commit (events, tasks and timers written together)."""
    await _crash_at_a_write(sim, "after")


async def crash_before_commit(sim: Sim) -> None:
    """An engine dies just before a write reaches the database."""
    await _crash_at_a_write(sim, "before")


async def duplicate_delivery(sim: Sim) -> None:
    """Claimed tasks are delivered twice, or leased and never delivered."""
    rates = FaultRates(duplicate_delivery=0.3, drop_delivery=0.1)
    sim.via_client = 1.0  # every run's first task goes through a claim
    await _two_faulty_engines(sim, rates)


async def stale_worker(sim: Sim) -> None:
    """A worker stalls past its lease, another takes the step, then the stale one reports."""
    await _two_faulty_engines(sim, FaultRates(stall=0.25, stall_seconds=LEASE * 3))


async def lost_response(sim: Sim) -> None:
    """An activity succeeds but its response never reaches the store."""
    await _two_faulty_engines(sim, FaultRates(lose_response=0.3))


async def timer_twice(sim: Sim) -> None:
    """Due timers are fired by two concurrent calls; each must fire once."""
    await _two_faulty_engines(sim, FaultRates(fire_timers_twice=0.7))


async def two_schedulers(sim: Sim) -> None:
    """Three engines' schedulers race for the same due timers."""
    for _ in range(3):
        await sim.engine()
    await sim.start_runs(sim.n_runs, sleep=0.3)  # many timers due at about the same time
    await sim.until_finished()


async def database_outage(sim: Sim) -> None:
    """The database refuses every call for a while, several times, mid-run."""
    seconds = sim.random.uniform(0.2, 1.0)
    rates = FaultRates(outage=0.01, outage_seconds=seconds)
    await sim.engine(rates)
    await sim.engine(rates)
    await sim.start_runs(sim.n_runs // 2)
    for _, injector in sim.engines:  # the database goes away for everyone, mid-run
        injector.begin_outage(seconds)
    await sim.start_runs(sim.n_runs - sim.n_runs // 2)
    await sim.until_finished(timeout=120)


async def deploy_half_way(sim: Sim) -> None:
    """A release rolled out half-way: old and new code serve side by side, then old stops.

    The new code adds a step behind `ctx.patched`; runs that passed that point
    under the old code finish without it, runs that reach it under the new
    code take it. No run may fail or stay suspended once the rollout ends.
    """
    old = await sim.engine(code=OLD_CODE)
    await sim.start_runs(sim.n_runs // 2)
    await sim.engine(code=NEW_CODE)
    await sim.start_runs(sim.n_runs - sim.n_runs // 2)
    await asyncio.sleep(sim.random.uniform(0.1, 0.6))
    await sim.stop(old)  # the rollout completes: only new code serves from now on
    await sim.until_finished()


async def clock_jumps(sim: Sim) -> None:
    """The wall clock jumps forward (past leases and timers) and back while runs proceed."""
    await sim.engine()
    await sim.engine()
    await sim.start_runs(sim.n_runs, sleep=3600.0)  # an hour's timer, skipped by jumps

    async def tick() -> None:
        roll = sim.random.random()
        if roll < 0.3:
            sim.clock.jump(-sim.random.uniform(1, 30))
            sim.note("clock jumped back")
        elif roll < 0.7:
            sim.clock.jump(sim.random.uniform(60, 900))
            sim.note("clock jumped forward")

    await sim.until_finished(tick=tick)


async def mixed(sim: Sim) -> None:
    """A random blend of every fault above, at rates chosen by the seed."""
    r = sim.random
    rates = FaultRates(
        crash_before_write=r.choice([0, 0.02]),
        crash_after_write=r.choice([0, 0.02]),
        drop_delivery=r.choice([0, 0.05]),
        duplicate_delivery=r.choice([0, 0.2]),
        lose_response=r.choice([0, 0.2]),
        stall=r.choice([0, 0.1]),
        stall_seconds=LEASE * 2.5,
        fire_timers_twice=r.choice([0, 0.5]),
        outage=r.choice([0, 0.005]),
        outage_seconds=0.3,
    )
    for _ in range(r.randint(1, 3)):
        await sim.engine(rates)
    await sim.start_runs(sim.n_runs)

    async def tick() -> None:
        if r.random() < 0.05:
            sim.clock.jump(r.uniform(-5, 120))
            sim.note("clock jumped")

    await sim.until_finished(tick=tick, rates=rates, timeout=120)


async def approval_race(sim: Sim) -> None:
    """Approvers click twice at once, replay used links and race each other, while
    engines crash and the database drops out. Each credential counts at most once,
    each approver at most once, and every run ends approved by two distinct people."""
    rates = FaultRates(crash_after_write=0.003, outage=0.002, outage_seconds=0.2)
    await sim.client.add_to_group("approvers", APPROVERS)
    await sim.engine(rates)
    await sim.engine(rates)
    await sim.start_runs(sim.n_runs, workflow="sim_approval")
    counted: set[tuple[str, str]] = set()  # (approval, approver) whose approve counted

    async def click(note: Notification, action: str) -> None:
        live = [e for e, inj in sim.engines if not inj.crashed.is_set()] or [sim.client]
        engine = sim.random.choice(live)
        token = note.approve_token if action == "approve" else note.reject_token
        with contextlib.suppress(
            wp.InvalidCredential, wp.DecisionRefused, StoreError, Crash, LookupError
        ):
            await engine.decide(note.approval_id, token, note.approver, action)
            if action == "approve":
                counted.add((note.approval_id, note.approver))

    async def tick() -> None:
        for note in sim.inbox.all():
            if (note.approval_id, note.approver) in counted:
                if sim.random.random() < 0.1:  # a used link, clicked again later
                    sim.note("credential replayed")
                    await click(note, sim.random.choice(["approve", "reject"]))
                continue
            clicks = sim.random.randint(1, 3)  # a double or triple click
            if clicks > 1:
                sim.note("concurrent decisions with one credential")
            await asyncio.gather(*(click(note, "approve") for _ in range(clicks)))

    await sim.until_finished(tick=tick, rates=rates, timeout=120)


SCENARIOS: dict[str, Scenario] = {
    "crash_after_commit": crash_after_commit,
    "crash_before_commit": crash_before_commit,
    "duplicate_delivery": duplicate_delivery,
    "stale_worker": stale_worker,
    "lost_response": lost_response,
    "timer_twice": timer_twice,
    "two_schedulers": two_schedulers,
    "database_outage": database_outage,
    "deploy_half_way": deploy_half_way,
    "clock_jumps": clock_jumps,
    "mixed": mixed,
    "approval_race": approval_race,
}


def scenarios() -> dict[str, Scenario]:
    """Every scenario by name: those above, then those of their own modules."""
    # Such a module imports this one (for `Sim`), so it is imported here, when asked for.
    from .simulate_migration import definition_migration

    return {**SCENARIOS, "definition_migration": definition_migration}


async def run_scenario(name: str, seed: int, url: str, *, runs: int = 8) -> Outcome:
    """Run scenario `name` with `seed` on the (empty) database at `url`."""
    global _ledger
    known = scenarios()
    if name not in known:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(known)}")
    _ledger = Ledger()
    started = time.monotonic()
    sim = Sim(name, seed, url, runs)
    await sim.reader.open()
    await sim.client.open()
    try:
        try:
            await known[name](sim)
        except Exception as exc:  # the verdict below says what state it left
            sim.outcome.error = f"{type(exc).__name__}: {exc}"
        outcome = await sim.finish()
    finally:
        for engine, _ in sim.engines:
            await engine.abandon()
        await sim.reader.close()
    outcome.seconds = time.monotonic() - started
    return outcome


# == the command line ==========================================================
@contextlib.asynccontextmanager
async def _database(kind: str, base: str | None, workdir: str) -> Any:
    """A fresh, empty database for one seed."""
    if kind == "sqlite":
        path = os.path.join(workdir, f"sim-{uuid.uuid4().hex[:8]}.db")
        try:
            yield f"sqlite:///{path}"
        finally:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path + suffix)
        return
    import psycopg

    admin_url = base or "postgresql://postgres@127.0.0.1:5432/postgres"
    name = f"waypost_sim_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rpartition("/")[0] + "/" + name
    finally:
        for attempt in range(60):  # the server may be restarting
            try:
                with psycopg.connect(admin_url, autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                break
            except psycopg.OperationalError:
                if attempt == 59:
                    raise
                await asyncio.sleep(1.0)


def _table(outcomes: list[Outcome]) -> str:
    header = ["scenario", "store", "seeds", "runs", "completed", "faults", "crashes", "violations"]
    groups: dict[tuple[str, str], list[Outcome]] = collections.defaultdict(list)
    for o in outcomes:
        groups[(o.scenario, o.store)].append(o)
    counts: list[tuple[str, str, list[int]]] = []
    for (scenario, store), items in sorted(groups.items()):
        numbers = [
            len(items),
            sum(o.runs for o in items),
            sum(o.completed for o in items),
            sum(sum(o.faults.values()) for o in items),
            sum(o.crashes for o in items),
            sum(len(o.violations) + (o.error is not None) for o in items),
        ]
        counts.append((scenario, store, numbers))
    totals = [sum(c[2][i] for c in counts) for i in range(6)]
    rows = [header]
    rows += [[scenario, store, *map(str, numbers)] for scenario, store, numbers in counts]
    rows.append(["all", "", *map(str, totals)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(len(lines) - 1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


async def _main(args: argparse.Namespace) -> int:
    names = args.scenario or list(scenarios())
    if args.seed is not None:
        seeds = [args.seed]
    else:
        seeds = list(range(args.first, args.first + args.seeds))
    stores = args.store
    outcomes: list[Outcome] = []
    failed: list[Outcome] = []
    started = time.monotonic()
    total = len(seeds) * len(stores)
    with tempfile.TemporaryDirectory(prefix="waypost-sim-") as workdir:
        done = 0
        for seed in seeds:
            for kind in stores:
                # Each seed runs one scenario (cycling through the list), so seeds cover all.
                name = names[seed % len(names)] if args.seed is None else names[0]
                async with _database(kind, args.postgres, workdir) as url:
                    outcome = await run_scenario(name, seed, url, runs=args.runs)
                outcomes.append(outcome)
                done += 1
                if not outcome.ok:
                    failed.append(outcome)
                    print(
                        f"FAIL seed {seed} {name} on {kind}: "
                        f"{outcome.error or ''} {[str(v) for v in outcome.violations[:5]]}",
                        flush=True,
                    )
                if done % args.progress == 0 or done == total:
                    elapsed = time.monotonic() - started
                    print(
                        f"[{done}/{total}] {elapsed:.0f}s, {len(failed)} failing",
                        file=sys.stderr,
                        flush=True,
                    )
    print(_table(outcomes))
    if failed:
        print("failing seeds (rerun with --scenario NAME --seed N):")
        for o in failed:
            print(f"  --scenario {o.scenario} --seed {o.seed} --store {o.store}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    known = scenarios()
    parser = argparse.ArgumentParser(
        prog="python -m waypost.testing.simulate",
        description="Run fault scenarios against waypost and check its invariants.",
    )
    parser.add_argument("--seeds", type=int, default=len(known), help="how many seeds")
    parser.add_argument("--first", type=int, default=1, help="the first seed")
    parser.add_argument("--seed", type=int, default=None, help="run just this seed")
    parser.add_argument(
        "--scenario", action="append", choices=sorted(known), help="only these (repeatable)"
    )
    parser.add_argument(
        "--store",
        action="append",
        choices=["sqlite", "postgresql"],
        help="databases to run on (repeatable; default sqlite)",
    )
    parser.add_argument(
        "--postgres",
        default=None,
        help="PostgreSQL server URL (a database per seed is created there)",
    )
    parser.add_argument("--runs", type=int, default=8, help="runs per scenario")
    parser.add_argument("--progress", type=int, default=25, help="print progress every N seeds")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    args.store = args.store or ["sqlite"]
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL)
    return asyncio.run(_main(args))


if __name__ == "__main__":
    # Run the package's copy of this module, the one `simulate_migration` imports. Were
    # this __main__ copy to run, the activities that scenario registers (the package
    # copy's) would record their effects in a ledger this copy never resets or checks.
    from waypost.testing import simulate

    sys.exit(simulate.main())
