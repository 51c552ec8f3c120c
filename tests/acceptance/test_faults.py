"""Fault scenarios on both stores: crashes, duplicates, lost responses, outages, clock jumps.

Each test runs one named scenario of `waypost.testing.simulate` for a fixed
list of seeds and requires: every run the scenario admitted completed with the
result it must have, the faults really happened, and the invariant checker
found nothing (histories gap-free and hash-chained, no run moved backwards,
only current attempts' results accepted, timers fired once, downstream effects
at most once per idempotency key, nothing stuck without a reason, definition
runs moved between versions only as their histories say).

A failing seed is rerun with
``python -m waypost.testing.simulate --scenario NAME --seed N [--store postgresql]``.
Real-process versions of some scenarios live beside this file: SIGKILL
(test_crash.py), SIGSTOP past the lease (test_stale_worker.py), a real
PostgreSQL restart (test_pg_outage.py), a backlog (test_backlog.py).
"""

from __future__ import annotations

import asyncio

import pytest

import waypost as wp
from waypost.testing.simulate import Outcome, run_scenario

SEEDS = (1, 2, 3)
pytestmark = pytest.mark.timeout(300)


def run(name: str, url: str, *, faults: bool = True) -> list[Outcome]:
    """Run scenario `name` for every seed and require a clean verdict."""
    outcomes = []
    for seed in SEEDS:
        outcome = asyncio.run(run_scenario(name, seed, url))
        assert outcome.error is None, f"seed {seed}: {outcome.error}"
        violations = [str(v) for v in outcome.violations]
        assert violations == [], f"seed {seed}: " + "\n".join(violations)
        assert outcome.completed == outcome.runs > 0, f"seed {seed}"
        outcomes.append(outcome)
    if faults:
        injected = sum(sum(o.faults.values()) for o in outcomes)
        assert injected > 0, f"scenario {name} injected no fault in seeds {SEEDS}"
    return outcomes


def test_crash_after_the_event_commit_before_the_engine_learns(db_url: str) -> None:
    outcomes = run("crash_after_commit", db_url)
    assert all(o.crashes >= 1 for o in outcomes)


def test_crash_before_a_write_reaches_the_database(db_url: str) -> None:
    outcomes = run("crash_before_commit", db_url)
    assert all(o.crashes >= 1 for o in outcomes)


def test_duplicate_and_dropped_task_delivery(db_url: str) -> None:
    outcomes = run("duplicate_delivery", db_url)
    assert any(o.faults["task delivered twice"] for o in outcomes)


def test_stale_worker_past_its_lease_then_reports(db_url: str) -> None:
    outcomes = run("stale_worker", db_url)
    assert any(o.faults["worker stalled past its lease"] for o in outcomes)


def test_activity_succeeded_but_the_response_was_lost(db_url: str) -> None:
    outcomes = run("lost_response", db_url)
    assert any(o.faults["activity response lost"] for o in outcomes)


def test_timer_delivered_twice(db_url: str) -> None:
    outcomes = run("timer_twice", db_url)
    assert any(o.faults["timers fired twice at once"] for o in outcomes)


def test_two_schedulers_running_at_once(db_url: str) -> None:
    run("two_schedulers", db_url, faults=False)


def test_database_outage_mid_run(db_url: str) -> None:
    outcomes = run("database_outage", db_url)
    assert all(o.faults["database outage"] for o in outcomes)


def test_code_deploy_interrupted_half_way(db_url: str) -> None:
    run("deploy_half_way", db_url, faults=False)


def test_clock_jumps_forward_and_back(db_url: str) -> None:
    outcomes = run("clock_jumps", db_url)
    assert any(o.faults["clock jumped back"] for o in outcomes)
    assert any(o.faults["clock jumped forward"] for o in outcomes)


def test_every_fault_at_once(db_url: str) -> None:
    run("mixed", db_url)


def test_database_held_by_another_process_mid_run(db_url: str) -> None:
    """A real outage of the writer kind: another connection holds the write lock for
    seconds while runs are in flight (longer than SQLite's busy timeout, so writes fail
    and are retried). Every run completes, once, and the invariants hold."""
    from tests.helpers import write_lock
    from waypost.testing import check_invariants, sim

    url = f"{db_url}?busy_timeout=0.3" if db_url.startswith("sqlite") else db_url

    async def scenario() -> None:
        engine = wp.AsyncEngine(url, lease=1.0, poll_interval=0.05, shutdown_grace=5)
        engine.register(*sim.OLD_CODE)
        async with engine.running():
            orders = [{"n": n, "sleep": 0.2} for n in range(1, 21)]
            runs = [await engine.start("sim_order", o) for o in orders]
            with write_lock(db_url):
                await asyncio.sleep(3.0)  # the outage lasts this long; runs wait on it
            results = [await r.result(timeout=60) for r in runs]
        assert all(sim.expected(o, r) for o, r in zip(orders, results, strict=True))
        await engine.store.open()
        try:
            assert await check_invariants(engine.store) == []
        finally:
            await engine.store.close()

    asyncio.run(scenario())


def test_approval_credentials_replayed_and_raced(db_url: str) -> None:
    outcomes = run("approval_race", db_url)
    assert any(o.faults["concurrent decisions with one credential"] for o in outcomes)


def test_definition_migration_interrupted(db_url: str) -> None:
    """Runs of a definition are moved to version 2 while the migrating engine dies just
    before or after the commit, two engines move one run at once, a decision or signal
    races the move, and the database drops out: each run moves at most once, ends on
    the version its history says, and revoked approvals take no decision."""
    outcomes = run("definition_migration", db_url)
    for o in outcomes:
        assert o.faults["crash just before a migration's commit"] >= 1, o.faults
        assert o.faults["crash just after a migration's commit"] >= 1, o.faults
        assert o.faults["one run migrated twice at once"] >= 1, o.faults
        assert o.faults["database outage"] >= 1, o.faults
        assert o.faults["a decision racing the migration"] >= 1, o.faults
        assert o.faults["a signal racing the migration"] >= 1, o.faults
        assert o.faults["one of two votes cast before the migration"] >= 1, o.faults
    assert any(o.faults["revoked credential presented"] for o in outcomes)
