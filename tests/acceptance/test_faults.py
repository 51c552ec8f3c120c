"""Fault scenarios on both stores: crashes, duplicates, lost responses, outages, clock jumps.

Each test runs one named scenario of `waypost.testing.simulate` for a fixed
list of seeds and requires: every run the scenario admitted completed with the
result it must have, the faults really happened, and the invariant checker
found nothing (histories gap-free and hash-chained, no run moved backwards,
only current attempts' results accepted, timers fired once, downstream effects
at most once per idempotency key, nothing stuck without a reason).

A failing seed is rerun with
``python -m waypost.testing.simulate --scenario NAME --seed N [--store postgresql]``.
Real-process versions of some scenarios live beside this file: SIGKILL
(test_crash.py), SIGSTOP past the lease (test_stale_worker.py), a real
PostgreSQL restart (test_pg_outage.py), a backlog (test_backlog.py).
"""

from __future__ import annotations

import asyncio

import pytest

from waypost.testing.simulate import Outcome, run_scenario

SEEDS = (1, 2, 3)
pytestmark = pytest.mark.timeout(300)


def run(name: str, url: str, *, faults: bool = True) -> list[Outcome]:
    outcomes = []
    for seed in SEEDS:
        outcome = asyncio.run(run_scenario(name, seed, url))
        assert outcome.error is None, f"seed {seed}: {outcome.error}"
        assert outcome.violations == [], f"seed {seed}: " + "\n".join(
            str(v) for v in outcome.violations
        )
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
