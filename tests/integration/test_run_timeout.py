"""The run timeout of code workflows on both stores: a run that has not ended within it
ends `failed` (RunTimedOut) by a durable timer, with the test clock moved, never slept."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import run_reaches
from tests.helpers.gates import gate
from tests.helpers.polling import eventually_async
from waypost.testing import TestEnv, event_types, events_of
from waypost.testing.replay import ReplayStatus, replay_history

pytestmark = pytest.mark.timeout(120)


@wp.activity(retry=wp.Retry(max_attempts=1), timeout=timedelta(days=30))
def hangs(ctx: wp.ActivityContext, label: str) -> str:
    """A sync activity that does not return until its gate opens (the test opens it)."""
    gate(f"{label}-started").set()
    gate(label).wait(60)
    return "done"


@wp.workflow(name="rt_waits", run_timeout=timedelta(hours=1))
async def waits_for_ever(ctx: wp.WorkflowContext, _: Any) -> str:
    """Waits for a signal nobody sends: without its run timeout it would wait for ever."""
    await ctx.wait_signal("never")
    return "signalled"


@wp.workflow(name="rt_plain")
async def plain(ctx: wp.WorkflowContext, _: Any) -> str:
    await ctx.wait_signal("go")
    return "went"


@wp.workflow(name="rt_activity")
async def awaits_activity(ctx: wp.WorkflowContext, label: str) -> str:
    result: str = await ctx.run(hangs, label)
    return result


@wp.workflow(name="rt_chain", run_timeout=100)
async def chain(ctx: wp.WorkflowContext, n: int) -> int:
    """A generation every 40 seconds, for ever: the timeout spans the whole chain."""
    await ctx.sleep(40)
    ctx.continue_as_new(n + 1)
    return n


async def _in_generation(run: wp.AsyncRunHandle, generation: int) -> bool:
    """Whether the run waits in `generation` (its timer started)."""
    history = await run.history()
    return (
        (await run.get()).status == "waiting"
        and history[0].data.get("generation", 1) == generation
        and any(e.type == "TimerStarted" and e.data["step"] != "run-timeout" for e in history)
    )


async def _timed_out(run: wp.AsyncRunHandle) -> wp.WorkflowFailed:
    with pytest.raises(wp.WorkflowFailed) as failed:
        await run.result(timeout=10)
    return failed.value


def test_a_run_that_would_wait_for_ever_fails_at_its_run_timeout(db_url: str) -> None:
    async def scenario() -> None:
        async with TestEnv(waits_for_ever, url=db_url) as env:
            run = await env.engine.start(waits_for_ever, None)
            await run_reaches(run, lambda i: i.status == "waiting")
            await env.advance(minutes=59)
            await env.settle()
            assert (await run.get()).status == "waiting"
            await env.advance(minutes=2)
            error = await _timed_out(run)
            assert error.type == "RunTimedOut"
            assert "run timeout of 1 hours" in error.message
            history = await run.history()
            started = events_of(history, "TimerStarted", step="run-timeout")
            assert len(started) == 1 and started[0].data["duration"] == 3600
            assert events_of(history, "TimerFired", step="run-timeout")
            assert event_types(history)[-1] == "RunFailed"
            assert replay_history(waits_for_ever, history).status is ReplayStatus.OK
            assert await env.check() == []

    asyncio.run(scenario())


def test_a_start_s_run_timeout_overrides_the_workflow_s(db_url: str) -> None:
    async def scenario() -> None:
        async with TestEnv(waits_for_ever, plain, url=db_url) as env:
            short = await env.engine.start(waits_for_ever, None, run_timeout=60)
            given = await env.engine.start(plain, None, run_timeout=timedelta(minutes=2))
            unbounded = await env.engine.start(plain, None)
            for run in (short, given, unbounded):
                await run_reaches(run, lambda i: i.status == "waiting")
            started = (await short.history())[0]
            assert started.data["run_timeout"] == 60
            await env.advance(seconds=61)
            assert (await _timed_out(short)).type == "RunTimedOut"
            await env.settle()
            assert (await given.get()).status == "waiting"
            await env.advance(minutes=1)
            assert "2 minutes" in (await _timed_out(given)).message
            await env.advance(days=3650)
            await env.settle()
            assert (await unbounded.get()).status == "waiting"
            assert not events_of(await unbounded.history(), "TimerStarted")

    asyncio.run(scenario())


def test_a_timed_out_run_drops_the_attempt_it_awaited(db_url: str, label: str) -> None:
    async def scenario() -> None:
        async with TestEnv(awaits_activity, hangs, url=db_url) as env:
            try:
                run = await env.engine.start(awaits_activity, label, run_timeout=30)
                await asyncio.to_thread(gate(f"{label}-started").wait, 10)
                await env.advance(seconds=31)
                assert (await _timed_out(run)).type == "RunTimedOut"
                tasks = await env.engine.store.run_tasks("default", run.run_id)
                assert tasks == []
            finally:
                gate(label).set()
            await env.settle()
            history = await run.history()
            assert not events_of(history, "ActivityCompleted")
            assert event_types(history)[-1] != "RunCompleted"

    asyncio.run(scenario())


def test_the_run_timeout_spans_continue_as_new(db_url: str) -> None:
    async def scenario() -> None:
        async with TestEnv(chain, url=db_url) as env:
            run = await env.engine.start(chain, 0)
            # Generations start at 0, 40 and 80 seconds; the deadline (100 s) ends the third.
            for generation in (1, 2, 3):
                await eventually_async(
                    lambda g=generation: _in_generation(run, g), f"generation {generation}"
                )
                await env.advance(seconds=40)
            error = await _timed_out(run)
            assert error.type == "RunTimedOut"
            assert "run timeout of 100 seconds" in error.message
            history = await run.history()
            started = history[0]
            assert started.data["generation"] == 3
            timer = events_of(history, "TimerStarted", step="run-timeout")[0]
            assert timer.data["fire_at"] == started.data["run_deadline"]

    asyncio.run(scenario())


def test_a_run_timeout_that_is_not_a_positive_duration_is_refused(db_url: str) -> None:
    async def scenario() -> None:
        async with TestEnv(plain, url=db_url) as env:
            for bad in (0, -5, float("inf"), float("nan"), "soon", True, timedelta(0)):
                with pytest.raises(wp.InvalidRequest, match="run_timeout must be a positive"):
                    await env.engine.start(plain, None, run_timeout=bad)
            assert await env.engine.list_runs() == []

    asyncio.run(scenario())


def test_a_workflow_s_run_timeout_must_be_a_positive_duration() -> None:
    for bad in (0, -1, timedelta(seconds=-1), "1h"):
        with pytest.raises(wp.ConfigurationError, match="rt_bad: run_timeout must be a positive"):

            @wp.workflow(name="rt_bad", run_timeout=bad)
            async def bad_timeout(ctx: wp.WorkflowContext) -> None:
                return None
