"""`waypost.testing` as a user would use it on their own workflows."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import waypost as wp
from tests.helpers import run_reaches
from waypost.testing import (
    FaultInjector,
    FaultRates,
    Ledger,
    TestClock,
    TestEnv,
    check_invariants,
    event_types,
    events_of,
    faulty_engine,
)

LEDGER = Ledger()


@wp.activity
def send_reminder(ctx: wp.ActivityContext, who: str) -> str:
    LEDGER.apply(ctx.idempotency_key, who)
    return f"reminded {who}"


@wp.workflow
async def remind_in_three_days(ctx: wp.WorkflowContext, who: str) -> str:
    await ctx.sleep(timedelta(days=3))
    return str(await ctx.run(send_reminder, who))


async def _timer_pending(env: TestEnv, run: wp.AsyncRunHandle) -> None:
    """The run's timer has not fired, and cannot have: it is still due after now.

    (A timer fires only once its time has come, so this proves it without waiting.)
    """
    due = await env.engine.store.next_timer_at()
    assert due is not None and due > env.clock()
    assert "TimerFired" not in event_types(await run.history())
    assert (await run.get()).status == "waiting"


def test_advancing_the_clock_fires_a_three_day_timer_at_once() -> None:
    async def scenario() -> None:
        async with TestEnv(remind_in_three_days, send_reminder) as env:
            run = await env.engine.start(remind_in_three_days, "ana")
            info = await run_reaches(run, lambda i: i.status == "waiting")
            assert info.waiting_for[0]["kind"] == "timer"
            await _timer_pending(env, run)  # three days have not passed
            await env.advance(days=3)
            assert await run.result(timeout=10) == "reminded ana"
            history = await run.history()
            assert event_types(history)[:3] == ["RunStarted", "TimerStarted", "TimerFired"]
            assert len(events_of(history, "ActivityCompleted", step="2")) == 1
            assert await env.check() == []

    asyncio.run(scenario())


def test_a_jump_short_of_the_timer_fires_nothing() -> None:
    async def scenario() -> None:
        async with TestEnv(remind_in_three_days, send_reminder) as env:
            run = await env.engine.start(remind_in_three_days, "bo")
            await run_reaches(run, lambda i: i.status == "waiting")
            await env.advance(hours=71)
            await _timer_pending(env, run)
            env.clock.jump(-3600)  # a clock set back must not fire it either
            await _timer_pending(env, run)
            await env.advance(hours=2)
            assert await run.result(timeout=10) == "reminded bo"

    asyncio.run(scenario())


def test_a_users_workflow_under_seeded_faults(sqlite_url: str) -> None:
    """Lost responses and duplicate deliveries: the downstream effect still happens once."""

    async def scenario() -> None:
        injector = FaultInjector(7, FaultRates(lose_response=0.5, duplicate_delivery=0.5))
        clock = TestClock()
        engine = faulty_engine(sqlite_url, injector, lease=0.5, poll_interval=0.05, clock=clock)
        engine.register(remind_in_three_days, send_reminder)
        async with engine.running():
            clock.attach(engine)
            runs = [await engine.start(remind_in_three_days, f"p{i}") for i in range(5)]
            for run in runs:  # every timer is set before the clock moves
                await run_reaches(run, lambda i: i.status == "waiting")
            clock.advance(timedelta(days=3))
            results = [await r.result(timeout=30) for r in runs]
        assert results == [f"reminded p{i}" for i in range(5)]
        assert injector.injected["activity response lost"] > 0
        keys = [(await r.history())[-3].data.get("key") for r in runs]
        assert all(LEDGER.applied[k] == 1 for k in keys if k)
        assert LEDGER.violations() == []
        store = wp.AsyncEngine(sqlite_url).store
        await store.open()
        try:
            assert await check_invariants(store) == []
        finally:
            await store.close()

    asyncio.run(scenario())


@wp.activity
def charge_card(ctx: wp.ActivityContext, cents: int) -> dict[str, int]:
    return {"cents": cents}


@wp.workflow
async def order_with_a_week_to_ship(ctx: wp.WorkflowContext, cents: int) -> dict[str, object]:
    receipt = await ctx.run(charge_card, cents)
    await ctx.sleep(timedelta(seconds=1))
    try:
        shipped = await ctx.wait_signal("shipped", timeout=timedelta(days=7))
    except wp.WaitTimeout:
        return {"status": "not shipped", "receipt": receipt}
    return {"status": "done", "tracking": shipped}


def test_fast_forward_skips_every_timer_until_the_run_ends() -> None:
    async def scenario() -> None:
        async with TestEnv(order_with_a_week_to_ship, charge_card) as env:
            started = env.clock()
            run = await env.engine.start(order_with_a_week_to_ship, 500)
            result = await env.fast_forward(run)
            assert result == {"status": "not shipped", "receipt": {"cents": 500}}
            assert env.clock() - started >= 7 * 86400  # a week passed on the run's clock
            fired = events_of(await run.history(), "TimerFired")
            assert len(fired) == 2
            assert await env.check() == []

            shipped = await env.engine.start(order_with_a_week_to_ship, 700)
            await env.settle()
            await env.advance(seconds=1)
            await env.settle()
            await shipped.signal("shipped", "TRK9")
            assert await env.fast_forward(shipped) == {"status": "done", "tracking": "TRK9"}

    asyncio.run(scenario())


def test_fast_forward_says_when_nothing_will_ever_wake_the_run() -> None:
    @wp.workflow(name="waits_for_ever")
    async def waits_for_ever(ctx: wp.WorkflowContext) -> None:
        await ctx.wait_signal("never")

    async def scenario() -> None:
        async with TestEnv(waits_for_ever) as env:
            run = await env.engine.start(waits_for_ever)
            with pytest.raises(TimeoutError, match="no timer is set"):
                await env.fast_forward(run)

    asyncio.run(scenario())


@wp.activity(retry=wp.Retry(max_attempts=5, initial_interval=60, jitter=0))
def polls_a_slow_service(ctx: wp.ActivityContext) -> int:
    if ctx.attempt < 4:
        raise ConnectionError("not ready yet")
    return ctx.attempt


@wp.workflow(name="poller")
async def poller(ctx: wp.WorkflowContext) -> int:
    return int(await ctx.run(polls_a_slow_service))


def test_fast_forward_skips_the_backoff_of_retries() -> None:
    async def scenario() -> None:
        async with TestEnv(poller, polls_a_slow_service) as env:
            started = env.clock()
            run = await env.engine.start(poller)
            assert await env.fast_forward(run, timeout=30) == 4
            assert env.clock() - started >= 60 + 120 + 240  # the backoff, skipped
            assert len(events_of(await run.history(), "ActivityFailed")) == 3

    asyncio.run(scenario())


def test_settle_returns_and_fast_forward_says_so_when_a_run_is_suspended() -> None:
    @wp.workflow(name="has_a_bug")
    async def has_a_bug(ctx: wp.WorkflowContext) -> None:
        raise KeyError("no such field")

    async def scenario() -> None:
        async with TestEnv(has_a_bug) as env:
            run = await env.engine.start(has_a_bug)
            await env.settle(timeout=10)  # a suspended run waits for an operator
            assert (await run.get()).status == "suspended"
            with pytest.raises(wp.InvalidState, match=r"is suspended .*no such field"):
                await env.fast_forward(run, timeout=10)

    asyncio.run(scenario())
