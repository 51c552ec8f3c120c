"""The run timeout of code workflows on both stores: a run that has not ended within it
ends `failed` (RunTimedOut) by a durable timer, with the test clock moved, never slept."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import waypost as wp
from tests.helpers import run_reaches
from tests.helpers.definitions import amount_hold
from tests.helpers.gates import gate
from tests.helpers.polling import eventually_async
from waypost.cli.main import main
from waypost.testing import TestEnv, event_types, events_of
from waypost.testing.replay import ReplayStatus, replay_history

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name
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
            assert history[0].data["run_timeout"] == 3600  # the decorator's, as started
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
            # A fork of the last generation counts its own timeout from the fork.
            forked = await env.engine.fork(run.run_id, reason="again")
            fork = wp.AsyncRunHandle(env.engine, forked.run_id)
            await run_reaches(fork, lambda i: i.status == "waiting")
            copy = await fork.history()
            assert "run_deadline" not in copy[0].data
            (timer,) = events_of(copy, "TimerStarted", step="run-timeout")
            assert timer.data["fire_at"] == copy[0].ts + 100

    asyncio.run(scenario())


def test_a_run_timeout_that_is_not_a_positive_duration_is_refused(db_url: str) -> None:
    async def scenario() -> None:
        async with TestEnv(plain, url=db_url) as env:
            for bad in (0, -5, float("inf"), float("nan"), "soon", True, timedelta(0)):
                with pytest.raises(wp.InvalidRequest, match="run_timeout must be a positive"):
                    await env.engine.start(plain, None, run_timeout=bad)
            assert await env.engine.list_runs() == []

    asyncio.run(scenario())


def test_the_client_and_the_http_api_pass_a_start_s_run_timeout(
    make_engine: Any, serve: Any
) -> None:
    engine = make_engine(plain)
    with engine.running():
        base = serve(engine)
        key = make_key(engine, "acme", "sam", "starter")
        with wp.Client(base, key) as client:
            run_id = client.start("rt_plain", None, run_timeout=timedelta(minutes=5))
            with pytest.raises(wp.InvalidRequest, match="run_timeout"):
                client.start("rt_plain", None, run_timeout=0)
        api = Api(base, key)
        posted = api.post("/v1/runs", json={"workflow": "rt_plain", "run_timeout": 90})
        assert posted.status_code == 201, posted.text
        for bad in (-3, 0, "soon", 1e300):
            refused = api.post("/v1/runs", json={"workflow": "rt_plain", "run_timeout": bad})
            assert refused.status_code == 422 and "run_timeout" in refused.text, refused.text
        started = [engine.history(r, tenant="acme")[0] for r in (run_id, posted.json()["run_id"])]
        assert [e.data["run_timeout"] for e in started] == [300, 90]
        assert len(engine.list_runs(tenant="acme")) == 2  # the refused starts wrote nothing


def test_the_command_line_starts_a_run_with_its_run_timeout(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    app = "tests.integration.test_run_timeout:plain"

    def start(*timeout: str) -> Any:
        return CliRunner().invoke(
            main, ["runs", "start", "rt_plain", "--app", app, *timeout, "--db", db]
        )

    given = [start("--run-timeout", "90"), start("--run-timeout", "PT2H"), start()]
    assert [r.exit_code for r in given] == [0, 0, 0], [r.output for r in given]
    for bad in ("0", "-5", "soon", "inf"):
        refused = start("--run-timeout", bad)
        assert refused.exit_code == 2 and "--run-timeout" in refused.output, refused.output
    with wp.Engine(db) as engine:
        started = [engine.history(r.output.strip())[0].data for r in given]
        assert len(engine.list_runs()) == 3
    assert [d.get("run_timeout") for d in started] == [90, 7200, None]


def test_a_definition_s_run_takes_its_own_timeout_not_a_start_s(make_engine: Any) -> None:
    engine = make_engine()
    engine.publish(amount_hold("rt_hold"))
    with pytest.raises(wp.InvalidRequest, match="run_timeout is for workflows written as code"):
        engine.start("rt_hold", {"amount": 5}, run_timeout=60)
    assert engine.list_runs() == []
    run = engine.start("rt_hold", {"amount": 5})
    assert "run_timeout" not in engine.history(run.run_id)[0].data


@wp.activity
def first_step(ctx: wp.ActivityContext, n: int) -> int:
    return n


@wp.workflow(name="rt_forkable", run_timeout=100)
async def forkable(ctx: wp.WorkflowContext, _: Any) -> str:
    await ctx.run(first_step, 1)
    await ctx.wait_signal("go")
    return "went"


def test_a_fork_has_its_own_run_timeout_from_when_it_was_made(db_url: str) -> None:
    async def scenario() -> None:
        async with TestEnv(forkable, first_step, url=db_url) as env:
            run = await env.engine.start(forkable, None)
            await run_reaches(run, lambda i: i.status == "waiting")
            await env.advance(seconds=60)
            forked = await env.engine.fork(run.run_id, reason="redo")
            fork = wp.AsyncRunHandle(env.engine, forked.run_id)
            await run_reaches(fork, lambda i: i.status == "waiting")
            history = await fork.history()
            (timer,) = events_of(history, "TimerStarted", step="run-timeout")
            assert timer.data["fire_at"] == history[0].ts + 100
            assert events_of(history, "ActivityCompleted", step="1")  # copied, not redone
            await env.advance(seconds=41)
            assert (await _timed_out(run)).type == "RunTimedOut"
            await env.settle()
            assert (await fork.get()).status == "waiting"
            await env.advance(seconds=60)
            assert (await _timed_out(fork)).type == "RunTimedOut"
            assert await env.check() == []

    asyncio.run(scenario())
