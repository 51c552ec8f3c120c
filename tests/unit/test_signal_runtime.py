"""The replay runtime on its own: signals and waits, asyncio used wrongly inside a
workflow, and cancellation, fed synthetic histories by the `Driver`."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers.flows import handler_without_payload
from tests.helpers.runtime import (
    T0,
    Driver,
    Parcel,
    charge,
    cleanup,
    echo,
    kinds,
    site,
)
from waypost.model.events import EventType, NewEvent

E = EventType


# == signals ===============================================================================


@wp.workflow(name="mailbox")
async def mailbox(ctx: wp.WorkflowContext) -> list[Any]:
    await ctx.run(echo, "first")
    one = await ctx.wait_signal("item")
    two = await ctx.wait_signal("item", type=Parcel)
    return [one, two, type(two).__name__]


def test_signals_sent_before_the_wait_are_buffered_in_order() -> None:
    d = Driver(mailbox, echo)
    d.start()
    assert d.signal("item", "early-1") == []
    assert d.signal("item", {"sku": "p", "weight": 2}) == []
    assert d.signal("other", 1) == []
    status, waiting = d.inst.snapshot()
    assert status == wp.RunStatus.RUNNING
    assert [{k: w[k] for k in ("kind", "step", "activity")} for w in waiting] == [
        {"kind": "activity", "step": "1", "activity": "echo"}
    ]
    assert waiting[0]["site"].startswith("test_signal_runtime.py:")
    (done,) = d.complete("1")
    assert done.type == E.RUN_COMPLETED
    assert d.result() == ["early-1", {"sku": "p", "weight": 2.0}, "Parcel"]


def test_signals_reach_waiters_as_they_come() -> None:
    d = Driver(mailbox, echo)
    d.start()
    d.complete("1")
    assert d.inst.snapshot() == (wp.RunStatus.WAITING, [{"kind": "signal", "name": "item"}])
    d.signal("item", 1)
    assert d.outcome is None
    d.signal("item", {"sku": "q", "weight": 1})
    assert d.result() == [1, {"sku": "q", "weight": 1.0}, "Parcel"]


def test_a_buffered_signal_replays_to_the_same_wait() -> None:
    d = Driver(mailbox, echo)
    d.start()
    d.signal("item", "early")
    d.complete("1")
    again = Driver.replayed(mailbox, echo, history=d.history)
    assert again.new_commands == []
    again.signal("item", {"sku": "z", "weight": 0})
    assert again.result() == ["early", {"sku": "z", "weight": 0.0}, "Parcel"]


@wp.workflow(name="counter")
async def counter(ctx: wp.WorkflowContext, target: int) -> dict[str, Any]:
    total = 0
    seen: list[int] = []

    def on_add(n: int) -> None:
        nonlocal total
        total += n
        seen.append(n)

    await ctx.run(echo, "setup")
    ctx.on_signal("add", on_add)
    timed_out = await ctx.wait_condition(lambda: total >= target, timeout=timedelta(hours=1))
    return {"total": total, "seen": seen, "timed_out": timed_out}


def test_on_signal_handlers_fold_every_signal_including_earlier_ones() -> None:
    d = Driver(counter, echo)
    d.start(10)
    d.signal("add", 4)  # before the handler is registered
    (timer,) = d.complete("1")
    assert timer.type == E.TIMER_STARTED
    assert timer.data["step"] == "2"
    status, waiting = d.inst.snapshot()
    assert status == wp.RunStatus.WAITING
    assert {w["kind"] for w in waiting} == {"timer", "condition"}
    by_kind = {w["kind"]: w for w in waiting}
    assert by_kind["condition"]["site"] == site(counter, "ctx.wait_condition")
    assert by_kind["timer"]["purpose"] == "wait_condition timeout"
    assert d.signal("add", 5) == []
    cancelled, done = d.signal("add", 3)
    assert kinds([cancelled]) == [("TimerCancelled", "2")]
    assert done.type == E.RUN_COMPLETED
    assert d.result() == {"total": 12, "seen": [4, 5, 3], "timed_out": False}


@wp.workflow(name="async-handler")
async def async_handler(ctx: wp.WorkflowContext) -> dict[str, Any]:
    seen: list[Any] = []

    async def on_item(item: str) -> None:
        checked = await ctx.run(echo, f"checked {item}")  # a step of the handler's own
        seen.append(checked)

    ctx.on_signal("item", on_item)
    await ctx.wait_condition(lambda: len(seen) >= 2)
    return {"seen": seen}


def test_an_async_signal_handler_runs_to_its_end_and_replays_the_same() -> None:
    d = Driver(async_handler, echo)
    d.start()
    (first,) = d.signal("item", "a")
    assert kinds([first]) == [("ActivityScheduled", "h1.1")]
    (second,) = d.signal("item", "b")
    assert kinds([second]) == [("ActivityScheduled", "h2.1")]
    both_asked = list(d.history)
    assert d.complete("h2.1", "checked b") == []
    (done,) = d.complete("h1.1", "checked a")
    assert done.type == E.RUN_COMPLETED
    assert d.result() == {"seen": ["checked b", "checked a"]}
    again = Driver.replayed(async_handler, echo, history=both_asked)
    assert again.new_commands == []  # the handlers' steps are numbered the same
    assert again.complete("h2.1", "checked b") == []
    again.complete("h1.1", "checked a")
    assert again.result() == {"seen": ["checked b", "checked a"]}


@wp.workflow(name="async-handler-fails")
async def async_handler_fails(ctx: wp.WorkflowContext) -> None:
    async def on_item(item: str) -> None:
        await ctx.sleep(1)
        raise KeyError(item)

    ctx.on_signal("item", on_item)
    await ctx.wait_signal("never")


def test_what_an_async_signal_handler_raises_suspends_the_run_at_its_line() -> None:
    d = Driver(async_handler_fails, echo)
    d.start()
    (timer,) = d.signal("item", "x")
    assert kinds([timer]) == [("TimerStarted", "h1.1")]
    with pytest.raises(wp.WorkflowBug) as info:
        d.fire("h1.1")
    assert info.value.error_type == "KeyError"
    assert info.value.site == site(async_handler_fails, "raise KeyError")


@wp.workflow(name="handler-arity")
async def handler_arity(ctx: wp.WorkflowContext) -> None:
    await handler_without_payload(ctx)


def test_a_signal_handler_that_cannot_take_the_payload_is_named_where_it_is_registered() -> None:
    d = Driver(handler_arity, echo)
    with pytest.raises(wp.WorkflowBug) as info:
        d.start()
    bug = info.value
    assert bug.site == site(handler_arity, "await handler_without_payload")  # its own file
    assert "handler_without_payload.<locals>.on_item" in bug.error_message
    assert site(handler_without_payload, "def on_item") in bug.error_message
    assert "must take one argument" in bug.error_message


def test_wait_condition_returns_true_on_timeout() -> None:
    d = Driver(counter, echo)
    d.start(10)
    d.complete("1")
    d.signal("add", 1)
    (done,) = d.fire("2")
    assert done.type == E.RUN_COMPLETED
    assert d.result() == {"total": 1, "seen": [1], "timed_out": True}


def test_wait_condition_already_true_returns_false_at_once_without_a_timer() -> None:
    d = Driver(counter, echo)
    d.start(0)
    (done,) = d.complete("1")
    assert d.result() == {"total": 0, "seen": [], "timed_out": False}


def test_folded_signals_replay_to_the_same_state() -> None:
    d = Driver(counter, echo)
    d.start(10)
    d.signal("add", 4)
    d.complete("1")
    d.signal("add", 5)
    again = Driver.replayed(counter, echo, history=d.history)
    assert again.new_commands == []
    again.signal("add", 1)
    assert again.result() == {"total": 10, "seen": [4, 5, 1], "timed_out": False}


@wp.workflow(name="approval")
async def approval(ctx: wp.WorkflowContext) -> str:
    try:
        answer = await ctx.wait_signal("approve", timeout=timedelta(minutes=5))
    except wp.WaitTimeout as err:
        return f"timeout: {err}"
    return f"approved: {answer}"


def test_wait_signal_timeout_raises_wait_timeout() -> None:
    d = Driver(approval)
    (timer,) = d.start()
    assert timer.type == E.TIMER_STARTED
    assert timer.data["duration"] == 300.0
    status, waiting = d.inst.snapshot()
    assert {"kind": "signal", "name": "approve"} in waiting
    assert any(w.get("purpose") == "wait_signal(approve) timeout" for w in waiting)
    d.fire("1")
    assert d.result() == "timeout: no signal 'approve' within 0:05:00"


def test_a_signal_before_the_timeout_cancels_the_timer() -> None:
    d = Driver(approval)
    d.start()
    cancelled, done = d.signal("approve", "yes")
    assert kinds([cancelled]) == [("TimerCancelled", "1")]
    assert cancelled.data["cause"] == 3
    assert d.result() == "approved: yes"


def test_an_uncaught_wait_timeout_fails_the_run() -> None:
    @wp.workflow(name="strict")
    async def strict(ctx: wp.WorkflowContext) -> Any:
        return await ctx.wait_signal("x", timeout=1)

    d = Driver(strict)
    d.start()
    d.fire("1")
    assert d.error()["type"] == "WaitTimeout"


def test_a_wait_with_a_timeout_replays_then_times_out_or_takes_a_signal() -> None:
    d = Driver(approval)
    d.start()
    again = Driver.replayed(approval, history=d.history)
    assert again.new_commands == []
    again.fire("1")
    assert again.result() == "timeout: no signal 'approve' within 0:05:00"

    # A signal appended but not processed yet: replay feeds it live.
    d.append([NewEvent(E.SIGNAL_RECEIVED, {"name": "approve", "payload": "ok"}, T0 + 9)])
    again = Driver.replayed(approval, history=d.history, processed_seq=1)
    assert kinds(again.new_commands) == [("TimerCancelled", "1"), ("RunCompleted", None)]
    assert again.result() == "approved: ok"


# == asyncio misuse ========================================================================


@wp.workflow(name="os_timers")
async def os_timers(ctx: wp.WorkflowContext, how: str) -> Any:
    await ctx.run(echo, "before")
    if how == "sleep":
        await asyncio.sleep(1)
    elif how == "wait_for":
        return await asyncio.wait_for(ctx.run(echo, "x"), 5)
    elif how == "timeout":
        async with asyncio.timeout(5):
            return await ctx.run(echo, "y")
    elif how == "sleep0":
        await asyncio.sleep(0)
        return "fine"
    return "unreachable"


@pytest.mark.parametrize("how", ["sleep", "wait_for", "timeout"])
def test_asyncio_timers_are_a_bug_with_a_clear_message(how: str) -> None:
    d = Driver(os_timers, echo)
    d.start(how)
    with pytest.raises(wp.WorkflowBug) as info:
        d.complete("1")
    assert info.value.error_type == "WorkflowError"
    assert "not durable inside a workflow" in info.value.error_message
    assert "ctx.sleep()" in info.value.error_message
    assert d.inst.closed
    assert d.outcome is None


def test_asyncio_sleep_zero_is_allowed() -> None:
    d = Driver(os_timers, echo)
    d.start("sleep0")
    d.complete("1")
    assert d.result() == "fine"


def test_the_context_refuses_use_after_the_run_finished() -> None:
    d = Driver(os_timers, echo)
    d.start("sleep0")
    d.complete("1")
    with pytest.raises(wp.WorkflowError, match="finished"):
        d.inst.context.run(echo, "late")
    with pytest.raises(wp.WorkflowError, match="finished"):
        d.inst.context.now()


# == cancellation ============================================================================


@wp.workflow(name="cancellable")
async def cancellable(ctx: wp.WorkflowContext) -> str:
    try:
        await ctx.run(charge, 100)
        await ctx.sleep(timedelta(days=1))
    except asyncio.CancelledError:
        assert ctx.cancel_requested
        await ctx.run(cleanup, "cancelled")
        raise
    return "done"


def test_cancellation_cancels_the_pending_step_and_allows_cleanup() -> None:
    d = Driver(cancellable, charge, cleanup)
    d.start()
    cmds = d.cancel("customer asked")
    assert kinds(cmds) == [("ActivityCancelRequested", "1"), ("ActivityScheduled", "2")]
    assert cmds[1].data["activity"] == "cleanup"
    assert cmds[1].data["args"] == ["cancelled"]
    assert {c.data["cause"] for c in cmds} == {3}
    assert d.outcome is None
    assert d.inst.cancel_requested
    (done,) = d.complete("2")
    assert done.type == E.RUN_CANCELLED
    assert done.data["reason"] == "customer asked"


def test_cancellation_while_sleeping_cancels_the_timer() -> None:
    d = Driver(cancellable, charge, cleanup)
    d.start()
    d.complete("1", "r")
    cmds = d.cancel("stop")
    assert kinds(cmds) == [("TimerCancelled", "2"), ("ActivityScheduled", "3")]
    d.complete("3")
    assert d.outcome is not None
    assert d.outcome.type == E.RUN_CANCELLED


def test_a_second_cancel_request_changes_nothing() -> None:
    d = Driver(cancellable, charge, cleanup)
    d.start()
    d.cancel("first")
    assert d.cancel("second") == []
    d.complete("2")
    assert d.outcome is not None
    assert d.outcome.data["reason"] == "first"


def test_cancellation_replays_to_the_same_state() -> None:
    d = Driver(cancellable, charge, cleanup)
    d.start()
    d.cancel("stop")
    again = Driver.replayed(cancellable, charge, cleanup, history=d.history)
    assert again.new_commands == []
    assert again.inst.cancel_requested
    (done,) = again.complete("2")
    assert done.type == E.RUN_CANCELLED
    assert done.data["reason"] == "stop"


def test_a_workflow_that_swallows_cancellation_ends_cancelled_with_its_result() -> None:
    @wp.workflow(name="stubborn")
    async def stubborn(ctx: wp.WorkflowContext) -> str:
        try:
            await ctx.wait_signal("never")
        except asyncio.CancelledError:
            return "cleaned up"
        return "signalled"

    d = Driver(stubborn)
    d.start()
    (done,) = d.cancel("enough")
    assert done.type == E.RUN_CANCELLED
    assert done.data == {"reason": "enough", "result": "cleaned up"}
