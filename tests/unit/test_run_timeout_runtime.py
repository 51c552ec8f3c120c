"""The run timeout in the pure runtime: the timer a run's first activation starts, what its
firing does, and replay of histories with and without it."""

from __future__ import annotations

from datetime import timedelta

import pytest

import waypost as wp
from tests.helpers.runtime import Driver, charge, kinds
from waypost.model.events import EventType as E
from waypost.testing.replay import ReplayStatus, replay_history


@wp.workflow(name="rt_bounded", run_timeout=timedelta(minutes=10))
async def bounded(ctx: wp.WorkflowContext) -> str:
    return str(await ctx.run(charge, 100))


@wp.workflow(name="rt_bounded")  # the same workflow, as other code has it
async def unbounded(ctx: wp.WorkflowContext) -> str:
    return str(await ctx.run(charge, 100))


def test_the_first_activation_starts_the_timer_before_the_code_s_steps() -> None:
    d = Driver(bounded, charge)
    cmds = d.start()
    assert kinds(cmds) == [("TimerStarted", "run-timeout"), ("ActivityScheduled", "1")]
    timer = cmds[0].data
    assert timer["kind"] == "run-timeout" and timer["duration"] == 600
    assert timer["fire_at"] == d.history[0].ts + 600


def test_a_start_s_run_timeout_wins_over_the_workflow_s() -> None:
    d = Driver(bounded, charge)
    cmds = d.feed(E.RUN_STARTED, workflow="rt_bounded", version="1", input=None, run_timeout=30.0)
    assert cmds[0].data["duration"] == 30.0
    assert cmds[0].data["fire_at"] == d.history[0].ts + 30


def test_its_firing_ends_the_run_failed_and_drops_what_it_awaited() -> None:
    d = Driver(bounded, charge)
    d.start()
    abandoned, ended = d.fire("run-timeout")
    # What the code still awaited is abandoned (a running attempt is told), then the end.
    assert kinds([abandoned]) == [("ActivityCancelRequested", "1")]
    assert ended.type == E.RUN_FAILED
    error = d.error()
    assert error["type"] == "RunTimedOut"
    assert error["message"] == "the run did not end within its run timeout of 10 minutes"
    assert error["details"]["run_timeout"] == 600
    assert d.inst.finished and d.inst.snapshot()[1] == []
    assert replay_history([bounded, charge], d.history).ok


def test_a_run_that_ends_first_replays_without_a_new_command() -> None:
    d = Driver(bounded, charge)
    d.start()
    d.complete("1", "ok")
    assert d.result() == "ok"
    assert replay_history([bounded, charge], d.history).ok


def test_replay_follows_the_history_not_today_s_decorator() -> None:
    """A history made without a run timeout replays under code that has one since, and one
    made with it replays under code that has none: the recorded timer is the truth."""
    old = Driver(unbounded, charge)
    old.start()
    assert kinds(old.history[1:]) == [("ActivityScheduled", "1")]
    now_bounded = Driver.replayed(bounded, charge, history=old.history)
    assert now_bounded.new_commands == []
    assert now_bounded.inst.run_timeout.deadline is None

    new = Driver(bounded, charge)
    new.start()
    assert replay_history([unbounded, charge], new.history).status is ReplayStatus.OK
    again = Driver.replayed(unbounded, charge, history=new.history)
    assert again.inst.run_timeout.deadline == new.inst.run_timeout.deadline
    again.fire("run-timeout")
    assert again.error()["type"] == "RunTimedOut"


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), "1h", True])
def test_a_workflow_s_run_timeout_must_be_a_positive_duration(bad: object) -> None:
    with pytest.raises(wp.ConfigurationError, match="rt_bad: run_timeout must be a positive"):

        @wp.workflow(name="rt_bad", run_timeout=bad)  # type: ignore[arg-type]
        async def bad_timeout(ctx: wp.WorkflowContext) -> None:
            return None
