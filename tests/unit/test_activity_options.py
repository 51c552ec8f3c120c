"""An activity call's own options (`ctx.options(...).run`), on the replay runtime alone:
recorded with the step, replayed the same, and refused where they are not allowed."""

from __future__ import annotations

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
