"""The cancel grace in the pure runtime: the timer a cancelled run's instance starts when
its code goes on after a cancel request, what its firing does, and replay of both."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import waypost as wp
from tests.helpers.runtime import Driver, charge, cleanup, kinds
from waypost.model.events import EventType as E
from waypost.runtime.cancellation import cancelled_error
from waypost.testing.replay import replay_history


@wp.workflow(name="grace_cleaner")
async def cleaner(ctx: wp.WorkflowContext) -> str:
    try:
        await ctx.run(charge, 100)
    except asyncio.CancelledError:
        await ctx.run(cleanup, "cancelled")
        raise
    return "done"


@wp.workflow(name="grace_quitter")
async def quitter(ctx: wp.WorkflowContext) -> str:
    await ctx.run(charge, 100)
    return "done"


def cancel(d: Driver, grace: float | None = 5.0, reason: str = "stop") -> list[Any]:
    data: dict[str, Any] = {"reason": reason}
    if grace is not None:
        data["grace"] = grace
    return d.feed(E.CANCEL_REQUESTED, **data)


def test_code_that_goes_on_after_a_cancel_gets_a_grace_timer() -> None:
    d = Driver(cleaner, charge, cleanup)
    d.start()
    cmds = cancel(d)
    assert kinds(cmds) == [
        ("ActivityCancelRequested", "1"),
        ("ActivityScheduled", "2"),
        ("TimerStarted", "cancel-grace"),
    ]
    timer = cmds[-1]
    requested = d.history[cmds[0].seq - 2]
    assert requested.type == E.CANCEL_REQUESTED
    assert timer.data["kind"] == "cancel-grace"
    assert timer.data["duration"] == 5.0
    assert timer.data["cause"] == requested.seq
    assert timer.data["fire_at"] > requested.ts
    _, waiting = d.inst.snapshot()
    assert [w.get("step") for w in waiting] == ["2", "cancel-grace"]


def test_the_grace_timer_firing_ends_the_run_cancelled_forced() -> None:
    d = Driver(cleaner, charge, cleanup)
    d.start()
    cancel(d)
    abandoned, ended = d.fire("cancel-grace")
    # What the code still awaited is abandoned (a running attempt is told), then the end.
    assert kinds([abandoned]) == [("ActivityCancelRequested", "2")]
    assert ended.type == E.RUN_CANCELLED
    assert ended.data == {"reason": "stop", "forced": True, "after": 5.0}
    assert d.inst.finished
    assert cancelled_error(ended.data) == {
        "type": "Cancelled",
        "message": "stop",
        "details": {"forced": True, "after": 5.0},
    }


def test_clean_up_that_ends_first_ends_the_run_as_usual() -> None:
    d = Driver(cleaner, charge, cleanup)
    d.start()
    cancel(d)
    (ended,) = d.complete("2")
    assert ended.data == {"reason": "stop"}
    assert cancelled_error(ended.data) == {"type": "Cancelled", "message": "stop"}


def test_code_that_ends_at_the_cancel_starts_no_timer() -> None:
    d = Driver(quitter, charge)
    d.start()
    cmds = cancel(d)
    assert kinds(cmds) == [("ActivityCancelRequested", "1"), ("RunCancelled", None)]


def test_a_request_without_a_grace_starts_no_timer() -> None:
    d = Driver(cleaner, charge, cleanup)
    d.start()
    cmds = cancel(d, grace=None)
    assert kinds(cmds) == [("ActivityCancelRequested", "1"), ("ActivityScheduled", "2")]


@pytest.mark.parametrize("grace", [5.0, None])
def test_histories_with_and_without_a_grace_replay_without_new_commands(
    grace: float | None,
) -> None:
    d = Driver(cleaner, charge, cleanup)
    d.start()
    cancel(d, grace=grace)
    replayed = Driver.replayed(cleaner, charge, cleanup, history=d.history)
    assert replayed.new_commands == []
    if grace is not None:
        assert replayed.inst.grace_until == d.inst.grace_until
        # The replayed instance ends the run as the first one would have.
        assert replayed.fire("cancel-grace")[-1].data["forced"] is True


def test_a_run_ended_by_its_grace_replays_to_the_same_end() -> None:
    d = Driver(cleaner, charge, cleanup)
    d.start()
    cancel(d)
    d.fire("cancel-grace")
    assert replay_history([cleaner, charge, cleanup], d.history).ok


def test_a_second_cancel_request_starts_no_second_timer() -> None:
    d = Driver(cleaner, charge, cleanup)
    d.start()
    cancel(d)
    assert cancel(d, grace=1.0, reason="again") == []


def test_a_request_taken_in_by_an_engine_without_the_grace_replays_without_one() -> None:
    # A rolling upgrade: a new engine recorded the grace, an older one fed the request
    # to the code and recorded no timer. Replaying that history must not suspend the run.
    d = Driver(cleaner, charge, cleanup)
    d.start()
    cancel(d)
    older = [e for e in d.history if e.data.get("step") != "cancel-grace"]
    replayed = Driver.replayed(cleaner, charge, cleanup, history=older)
    assert replayed.new_commands == []
    assert replayed.inst.grace_until is None
    (ended,) = replayed.complete("2")
    assert ended.data == {"reason": "stop"}
