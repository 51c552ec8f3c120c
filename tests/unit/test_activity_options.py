"""An activity call's own options (`ctx.options(...).run`), on the replay runtime alone:
recorded with the step, replayed the same, and refused where they are not allowed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers.runtime import Driver, echo


@wp.workflow(name="with-options")
async def with_options(ctx: wp.WorkflowContext) -> Any:
    fast = ctx.options(timeout=10, retry=wp.Retry(max_attempts=None), queue="slow-lane")
    return await fast.run(echo, "x")


def test_a_calls_options_are_recorded_with_its_step_and_replayed_the_same() -> None:
    d = Driver(with_options, echo)
    (scheduled,) = d.start()
    assert scheduled.data["timeout"] == 10.0
    assert scheduled.data["retry"]["max_attempts"] is None
    assert scheduled.data["queue"] == "slow-lane"
    assert Driver.replayed(with_options, echo, history=d.history).new_commands == []
    d.complete("1", "x")
    assert d.result() == "x"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout must be positive"),
        ({"timeout": "10s"}, "timeout must be a timedelta or a number of seconds"),
        ({"heartbeat_timeout": 0.5}, "heartbeat_timeout must be at least 1 second"),
        ({"retry": {"max_attempts": 3}}, "retry must be a waypost.Retry"),
        ({"queue": "no spaces"}, "queue 'no spaces' is not allowed"),
    ],
)
def test_options_that_are_not_allowed_are_a_bug_of_the_code(
    options: dict[str, Any], message: str
) -> None:
    @wp.workflow(name="bad-options")
    async def bad_options(ctx: wp.WorkflowContext) -> Any:
        return await ctx.options(**options).run(echo, "x")

    with pytest.raises(wp.WorkflowBug, match=message):
        Driver(bad_options, echo).start()


@wp.activity(name="bounded-echo", schedule_to_close=timedelta(minutes=2))
def bounded_echo(ctx: wp.ActivityContext, value: Any) -> Any:
    return value


@wp.workflow(name="with-schedule-to-close")
async def with_schedule_to_close(ctx: wp.WorkflowContext) -> Any:
    first = await ctx.run(bounded_echo, "decorator's")
    second = await ctx.options(schedule_to_close=30).run(bounded_echo, "call's")
    return [first, second, await ctx.run(echo, "none")]


def test_schedule_to_close_is_recorded_with_its_step_and_when_it_is_reached() -> None:
    d = Driver(with_schedule_to_close, bounded_echo, echo)
    (first,) = d.start()
    assert first.data["schedule_to_close"] == 120.0
    assert first.data["close_by"] == first.ts + 120
    (second,) = d.complete("1", "a")
    assert second.data["schedule_to_close"] == 30.0
    assert second.data["close_by"] == second.ts + 30
    (third,) = d.complete("2", "b")
    assert "schedule_to_close" not in third.data and "close_by" not in third.data
    assert Driver.replayed(with_schedule_to_close, bounded_echo, echo, history=d.history)
    d.complete("3", "c")
    assert d.result() == ["a", "b", "c"]


@pytest.mark.parametrize("bad", [0, -3, float("inf"), float("nan"), "1m", timedelta(0)])
def test_a_schedule_to_close_that_is_not_a_positive_duration_is_refused(bad: Any) -> None:
    @wp.workflow(name="bad-schedule-to-close")
    async def bad_call(ctx: wp.WorkflowContext) -> Any:
        return await ctx.options(schedule_to_close=bad).run(echo, "x")

    with pytest.raises(wp.WorkflowBug, match="schedule_to_close must be"):
        Driver(bad_call, echo).start()
    with pytest.raises(wp.ConfigurationError, match="activity late: schedule_to_close must be"):

        @wp.activity(name="late", schedule_to_close=bad)
        def late(ctx: wp.ActivityContext) -> None:
            return None
