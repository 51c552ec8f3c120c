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
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import waypost as wp
from waypost.engine.faults import Crash
from waypost.errors import StoreError
from waypost.features.senders import Notification
from waypost.model.logs import logger

from .faults import FaultRates
from .sim import APPROVERS, LEASE, NEW_CODE, OLD_CODE, Outcome, Sim, new_ledger
from .simulate_migration import definition_migration

log = logger("waypost.simulate")
T = TypeVar("T")

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
    return {**SCENARIOS, "definition_migration": definition_migration}


async def run_scenario(name: str, seed: int, url: str, *, runs: int = 8) -> Outcome:
    """Run scenario `name` with `seed` on the (empty) database at `url`."""
    known = scenarios()
    if name not in known:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(known)}")
    new_ledger()
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
