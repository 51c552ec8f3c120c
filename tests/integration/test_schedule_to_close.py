"""Schedule-to-close on both stores: a step's attempts and retry waits together stay within
its bound; once it is reached no further attempt starts and the step fails naming it."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers.breakage import broken_label, is_broken, mend
from waypost.testing import TestEnv, events_of

pytestmark = pytest.mark.timeout(120)

_lock = threading.Lock()
tries: dict[str, int] = {}

EVERY_TEN_SECONDS = wp.Retry(max_attempts=50, initial_interval=10, backoff=1, jitter=0)


@wp.activity(name="stc_down", retry=EVERY_TEN_SECONDS, schedule_to_close=35)
def always_down(ctx: wp.ActivityContext, label: str) -> None:
    with _lock:
        tries[label] = tries.get(label, 0) + 1
    raise ConnectionError("the service is down")


@wp.activity(
    name="stc_hangs",
    timeout=timedelta(days=1),
    retry=wp.Retry(max_attempts=5),
    schedule_to_close=0.5,
)
async def hangs(ctx: wp.ActivityContext) -> None:
    await asyncio.Event().wait()  # never returns: only its deadline ends it


@wp.workflow(name="stc_caller")
async def caller(ctx: wp.WorkflowContext, args: dict[str, Any]) -> dict[str, Any]:
    call = ctx.options(schedule_to_close=args["bound"]) if args.get("bound") else ctx
    try:
        if args.get("hang"):
            await call.run(hangs)
        else:
            await call.run(always_down, args["label"])
    except wp.ActivityError as exc:
        return {"type": exc.type, "message": exc.message, "error": exc.error}
    return {"type": None}


@pytest.mark.parametrize(("bound", "attempts"), [(None, 4), (15, 2)])
def test_no_attempt_starts_once_the_step_s_bound_is_reached(
    db_url: str, label: str, bound: int | None, attempts: int
) -> None:
    """Attempts at 0, 10, 20, 30 s; the next would start at 40 s, past the decorator's 35 s
    (a call's own 15 s: past it at 20 s). Without the bound: 50 attempts, then ConnectionError."""

    async def scenario() -> None:
        async with TestEnv(caller, always_down, url=db_url) as env:
            run = await env.engine.start(caller, {"label": label, "bound": bound})
            ended = await env.fast_forward(run)
            assert ended["type"] == "ScheduleToCloseTimeout"
            seconds = 35 if bound is None else 15
            assert f"schedule_to_close of {seconds} seconds" in ended["message"]
            assert ended["error"]["cause"]["type"] == "ConnectionError"
            assert tries[label] == attempts
            failed = events_of(await run.history(), "ActivityFailed")
            assert [e.data["retrying"] for e in failed] == [True] * (attempts - 1) + [False]
            assert await env.check() == []

    asyncio.run(scenario())


def test_a_running_attempt_is_stopped_at_the_step_s_bound(make_engine: Any) -> None:
    """The attempt's own timeout is a day; the step's bound of half a second ends it."""
    engine = make_engine(caller, hangs)
    with engine.running():
        run = engine.start(caller, {"hang": True})
        ended = engine.result(run.run_id, timeout=30)
    assert ended["type"] == "ScheduleToCloseTimeout"
    assert ended["error"]["cause"]["type"] == "ActivityTimeout"
    assert ended["error"]["details"]["attempts"] == 1


@wp.activity(name="stc_flaky", retry=EVERY_TEN_SECONDS, schedule_to_close=25)
def flaky(ctx: wp.ActivityContext, label: str) -> str:
    if is_broken(label):
        raise ConnectionError("the service is down")
    return f"done on attempt {ctx.attempt}"


@wp.workflow(name="stc_strict")
async def strict(ctx: wp.WorkflowContext, label: str) -> str:
    result: str = await ctx.run(flaky, label)  # its failure fails the run
    return result


def test_an_operator_retry_gives_the_step_a_fresh_bound(db_url: str) -> None:
    """Attempts at 0, 10 and 20 s fail; the bound (25 s) fails the run. Mended, a retry's
    attempt runs in a bound of its own, not the one that has passed."""
    label = broken_label()

    async def scenario() -> None:
        async with TestEnv(strict, flaky, url=db_url) as env:
            run = await env.engine.start(strict, label)
            with pytest.raises(wp.WorkflowFailed) as failed:
                await env.fast_forward(run)
            assert "ScheduleToCloseTimeout" in failed.value.message
            await env.advance(hours=1)
            mend(label)
            await env.engine.retry(run.run_id, "the service is back")
            assert await env.fast_forward(run) == "done on attempt 4"

    asyncio.run(scenario())
