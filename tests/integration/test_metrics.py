"""Prometheus metrics of a real engine and server, on both stores.

A scripted scenario (runs that complete, fail, retry, time out, sleep, wait for an
approval decided over HTTP, get suspended by a bug, are refused by a quota or wait
behind one) then one scrape of GET /metrics over HTTP, parsed by prometheus-client's
own parser: each series holds the value the scenario must have produced.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.metrics import Scrape
from tests.helpers.store import create_orphan
from tests.helpers.trips import TRIP, book, unbook, waiting_for_signal
from waypost.observability import Metrics
from waypost.store import open_store

from .server_fixtures import Api, make_key, serve, serve_metered

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(180)

FLAKY_CALLS: list[int] = []
GATE = threading.Event()


@wp.activity(name="m.add")
def add(ctx: wp.ActivityContext, a: int, b: int) -> int:
    return a + b


@wp.activity(name="m.flaky", retry=wp.Retry(max_attempts=3, initial_interval=timedelta(0)))
def flaky(ctx: wp.ActivityContext) -> str:
    FLAKY_CALLS.append(ctx.attempt)
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return "ok"


@wp.activity(name="m.boom", retry=wp.Retry(max_attempts=1))
def boom(ctx: wp.ActivityContext) -> str:
    raise RuntimeError("always")


@wp.activity(name="m.slow", retry=wp.Retry(max_attempts=1), timeout=timedelta(seconds=0.2))
async def slow(ctx: wp.ActivityContext) -> str:
    await asyncio.sleep(30)
    return "late"


@wp.activity(name="m.gated")
def gated(ctx: wp.ActivityContext, n: int) -> int:
    GATE.wait(60)
    return n


@wp.workflow(name="m_ok")
async def m_ok(ctx: wp.WorkflowContext) -> int:
    return int(await ctx.run(add, 1, 2))


@wp.workflow(name="m_flaky")
async def m_flaky(ctx: wp.WorkflowContext) -> str:
    return str(await ctx.run(flaky))


@wp.workflow(name="m_fail")
async def m_fail(ctx: wp.WorkflowContext) -> str:
    return str(await ctx.run(boom))


@wp.workflow(name="m_slow")
async def m_slow(ctx: wp.WorkflowContext) -> str:
    return str(await ctx.run(slow))


@wp.workflow(name="m_sleep")
async def m_sleep(ctx: wp.WorkflowContext) -> str:
    await ctx.sleep(0.05)
    return "slept"


@wp.workflow(name="m_approve")
async def m_approve(ctx: wp.WorkflowContext) -> str:
    decision = await ctx.approval("ok", approvers=wp.AnyOf(users=["ann"]))
    return str(decision.outcome)


@wp.workflow(name="m_bug")
async def m_bug(ctx: wp.WorkflowContext) -> int:
    total = await ctx.run(add, 1, 2)
    return int(total["no such field"])  # a bug: the run is suspended


@wp.workflow(name="m_wait")
async def m_wait(ctx: wp.WorkflowContext) -> str:
    await ctx.wait_signal("go")
    return "went"


@wp.workflow(name="m_fan")
async def m_fan(ctx: wp.WorkflowContext) -> list[int]:
    return list(await asyncio.gather(*(ctx.run(gated, i) for i in range(3))))


ITEMS = (add, flaky, boom, slow, gated, m_ok, m_flaky, m_fail, m_slow, m_sleep)
ITEMS2 = (m_approve, m_bug, m_wait, m_fan)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    GATE.clear()
    FLAKY_CALLS.clear()
    yield GATE
    GATE.set()  # let the gated attempts end before the engine closes


SCRAPER = {"Authorization": "Bearer scrape-secret"}


def test_metrics_after_a_scripted_scenario_hold_the_right_values(
    make_engine: Any, serve: Any, gate: threading.Event
) -> None:
    engine, base = serve_metered(make_engine, serve, *ITEMS, *ITEMS2)
    engine.create_tenant("acme")
    engine.set_quotas("acme", {"max_concurrent_runs": 1})
    engine.create_tenant("busy")
    engine.set_quotas("busy", {"max_concurrent_activities": 1})
    ann = Api(base, make_key(engine, "default", "ann", "approver"))

    with engine.running():
        results = {
            name: engine.start(wf)
            for name, wf in (
                ("m_ok", m_ok),
                ("m_flaky", m_flaky),
                ("m_fail", m_fail),
                ("m_slow", m_slow),
                ("m_sleep", m_sleep),
            )
        }
        assert results["m_ok"].result(timeout=20) == 3
        assert results["m_flaky"].result(timeout=20) == "ok"
        assert results["m_sleep"].result(timeout=20) == "slept"
        for name in ("m_fail", "m_slow"):
            with pytest.raises(wp.WorkflowFailed):
                results[name].result(timeout=20)

        approving = engine.start(m_approve)
        inbox = eventually(
            lambda: ann.get("/v1/approvals").json()["approvals"], "the approval to be asked"
        )
        decided = ann.post(
            f"/v1/approvals/{inbox[0]['approval_id']}/decision", json={"decision": "approve"}
        )
        assert decided.status_code == 200, decided.text
        assert approving.result(timeout=20) == "approved"

        buggy = engine.start(m_bug)
        eventually(lambda: engine.get(buggy.run_id).status == "suspended", "the suspension")

        engine.start(m_wait, tenant="acme")
        with pytest.raises(wp.QuotaExceeded):
            engine.start(m_wait, tenant="acme")

        engine.start(m_fan, tenant="busy")  # one attempt runs, two wait in the queue
        assert FLAKY_CALLS == [1, 2]

        def scraped() -> Scrape | None:
            answer = httpx.get(f"{base}/metrics", timeout=10, headers=SCRAPER)
            assert answer.status_code == 200, answer.text
            assert answer.headers["content-type"].startswith("text/plain")
            scrape = Scrape(answer.text)
            return scrape if scrape.queued("busy", "activity") == 2 else None

        m = eventually(scraped, "two gated attempts queued behind the quota")
        gate.set()

    # Counters by workflow and tenant.
    for wf in ("m_ok", "m_flaky", "m_fail", "m_slow", "m_sleep", "m_approve", "m_bug"):
        assert m("waypost_runs_started_total", tenant="default", workflow=wf) == 1, wf
    for wf in ("m_ok", "m_flaky", "m_sleep", "m_approve"):
        assert m("waypost_runs_completed_total", tenant="default", workflow=wf) == 1, wf
    assert m("waypost_runs_failed_total", tenant="default", workflow="m_fail") == 1
    assert m("waypost_runs_failed_total", tenant="default", workflow="m_slow") == 1
    assert m("waypost_runs_failed_total", tenant="default", workflow="m_ok") == 0
    assert m("waypost_runs_suspended_total", tenant="default", workflow="m_bug") == 1
    assert m("waypost_runs_started_total", tenant="acme", workflow="m_wait") == 1
    assert m("waypost_quota_refusals_total", tenant="acme", quota="max_concurrent_runs") == 1

    # Activities: attempts by outcome, retries, timeouts, and the steps asked for.
    assert m("waypost_activity_steps_total", activity="m.flaky") == 1
    assert m("waypost_activity_attempts_total", activity="m.flaky", outcome="failed") == 1
    assert m("waypost_activity_attempts_total", activity="m.flaky", outcome="completed") == 1
    assert m("waypost_activity_retries_total", activity="m.flaky") == 1
    assert m("waypost_activity_attempts_total", activity="m.boom", outcome="failed") == 1
    assert m("waypost_activity_retries_total", activity="m.boom") == 0
    assert m("waypost_activity_attempts_total", activity="m.slow", outcome="timeout") == 1
    assert m("waypost_activity_timeouts_total", activity="m.slow") == 1
    assert m("waypost_activity_steps_total", activity="m.add") == 2  # m_ok and m_bug
    assert m("waypost_activity_steps_total", activity="m.gated") == 3

    # A timer fired, late by a little; one approval decided, after a little.
    assert m("waypost_timer_lag_seconds_count") == 1
    assert 0 <= m("waypost_timer_lag_seconds_sum") < 5
    assert m("waypost_approvals_decided_total", tenant="default", outcome="approved") == 1
    assert m("waypost_approval_dwell_seconds_count") == 1
    assert 0 < m("waypost_approval_dwell_seconds_sum") < 60

    # Commits: each counted once with its events.
    commits = m("waypost_commit_seconds_count")
    assert commits >= 10
    assert m("waypost_commit_events_count") == commits
    assert m("waypost_commit_events_sum") >= commits

    # Gauges read from the database at the scrape.
    assert m("waypost_gauges_up") == 1
    assert m("waypost_runs", tenant="default", workflow="m_ok", status="completed") == 1
    assert m("waypost_runs", tenant="default", workflow="m_fail", status="failed") == 1
    assert m("waypost_runs", tenant="default", workflow="m_bug", status="suspended") == 1
    assert m("waypost_runs", tenant="acme", workflow="m_wait", status="waiting") == 1
    assert m("waypost_runs", tenant="busy", workflow="m_fan", status="running") == 1
    assert m.queued("busy", "activity", "waypost_queue_oldest_age_seconds") >= 0
    assert [q["tenant"] for q in m.labelled("waypost_queue_depth")] == ["busy"]
    assert not m.labelled("waypost_lease_takeovers_total")  # no engine was lost


# == engines lost: lease expirations and takeovers ====================================
HOLDING = threading.Event()
RELEASE = threading.Event()


@wp.activity(
    name="m.hold", timeout=timedelta(minutes=5), retry=wp.Retry(initial_interval=timedelta(0))
)
def hold(ctx: wp.ActivityContext) -> int:
    if ctx.attempt == 1:
        HOLDING.set()
        RELEASE.wait(60)
    return ctx.attempt


@wp.workflow(name="m_held")
async def m_held(ctx: wp.WorkflowContext) -> int:
    return int(await ctx.run(hold))


def test_lost_engines_count_lease_expirations_and_takeovers(db_url: str) -> None:
    HOLDING.clear()
    RELEASE.clear()
    metrics = Metrics()

    def engine(name: str, observer: Metrics | None = None) -> wp.AsyncEngine:
        options: dict[str, Any] = {"observer": observer} if observer else {}
        made = wp.AsyncEngine(
            db_url, lease=120, poll_interval=0.05, worker_id=name, shutdown_grace=1, **options
        )
        made.register(m_held, hold)
        return made

    async def vanished_engines_task() -> None:
        """A run whose workflow task is leased to an engine that vanished."""
        store = open_store(db_url)
        await store.open()
        now = time.time()
        try:
            await create_orphan(store, "m_held", "ghost", 0.2, now)
        finally:
            await store.close()

    async def scenario() -> None:
        # An attempt whose engine crashes while it runs: its lease is found lapsed.
        crashing = engine(f"crashing-{time.monotonic_ns()}")
        await crashing.open()
        await crashing.start_serving()
        run = await crashing.start(m_held)
        await asyncio.to_thread(HOLDING.wait, 30)
        await crashing.abandon()  # as SIGKILL would
        # A workflow task of a vanished engine: its lease lapses and the survivor claims it.
        await vanished_engines_task()
        survivor = engine(f"survivor-{time.monotonic_ns()}", metrics)
        await survivor.open()
        await survivor.start_serving()
        try:
            assert await survivor.result(run.run_id, timeout=30) == 2
            RELEASE.set()
            assert await survivor.result("orphan", timeout=30) in (1, 2)
        finally:
            RELEASE.set()
            await survivor.close()

    asyncio.run(scenario())
    value = metrics.registry.get_sample_value
    assert value("waypost_lease_takeovers_total", {"kind": "workflow"}) == 1
    assert value("waypost_lease_expirations_total", {"kind": "workflow"}) == 1
    assert value("waypost_lease_expirations_total", {"kind": "activity"}) == 1
    assert value("waypost_activity_attempts_total", {"activity": "m.hold", "outcome": "lost"}) == 1
    assert value("waypost_activity_retries_total", {"activity": "m.hold"}) == 1


def test_the_compensations_of_a_cancelled_run_are_counted(make_engine: Any) -> None:
    metrics = Metrics()
    engine = make_engine(book, unbook, observer=metrics)
    with engine.running():
        engine.publish(TRIP)
        run = engine.start("trip", {})
        waiting_for_signal(engine, run.run_id)
        engine.cancel(run.run_id, "the customer changed plans")
        with pytest.raises(wp.WorkflowCancelled):
            engine.result(run.run_id, timeout=20)
    value = metrics.registry.get_sample_value
    by_run = {"tenant": "default", "workflow": "trip"}
    assert value("waypost_compensations_total", {**by_run, "outcome": "ok"}) == 1  # the hotel
    assert value("waypost_compensations_total", {**by_run, "outcome": "failed"}) == 1
    assert value("waypost_runs_cancelled_total", by_run) == 1
    assert value("waypost_runs_started_total", by_run) == 1
