"""The replay runtime on its own, when replay meets other code: a history the code no
longer matches is a non-determinism error naming the event and the call site, and
`ctx.patched` lets new code branch for runs that started before it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import waypost as wp
from tests.helpers.runtime import (
    Driver,
    charge,
    echo,
    kinds,
    refund,
    site,
)
from waypost.model.events import Event, EventType

E = EventType


# == non-determinism ===================================================================


@wp.workflow(name="pay")
async def pay_v1(ctx: wp.WorkflowContext) -> str:
    receipt = await ctx.run(charge, 100)
    await ctx.wait_signal("done")
    return str(receipt)


@wp.workflow(name="pay")
async def pay_refund(ctx: wp.WorkflowContext) -> str:
    receipt = await ctx.run(refund, 100)
    await ctx.wait_signal("done")
    return str(receipt)


@wp.workflow(name="pay")
async def pay_timer(ctx: wp.WorkflowContext) -> str:
    await ctx.sleep(10)
    await ctx.wait_signal("done")
    return "slept"


@wp.workflow(name="pay")
async def pay_more(ctx: wp.WorkflowContext) -> str:
    receipt = await ctx.run(charge, 100)
    await ctx.run(refund, 1)
    await ctx.wait_signal("done")
    return str(receipt)


@wp.workflow(name="pay")
async def pay_now(ctx: wp.WorkflowContext) -> str:
    ctx.uuid()
    await ctx.wait_signal("done")
    return "x"


def pay_history() -> list[Event]:
    d = Driver(pay_v1, charge)
    d.start()
    d.complete("1", "r-1")
    assert kinds(d.history) == [
        ("RunStarted", None),
        ("ActivityScheduled", "1"),
        ("ActivityCompleted", "1"),
    ]
    return d.history


def test_a_different_activity_at_a_step_is_detected() -> None:
    with pytest.raises(wp.NondeterminismError) as err:
        Driver.replayed(pay_refund, charge, refund, history=pay_history())
    message = str(err.value)
    assert "'run-1'" in message
    assert "event 2 (ActivityScheduled charge, step 1" in message
    assert f"from {site(pay_v1, 'ctx.run(charge')}" in message
    assert f"ctx.run(refund) at {site(pay_refund, 'ctx.run(refund')}" in message


def test_an_activity_replaced_by_a_timer_is_detected() -> None:
    with pytest.raises(wp.NondeterminismError) as err:
        Driver.replayed(pay_timer, charge, history=pay_history())
    message = str(err.value)
    assert "event 2 (ActivityScheduled charge, step 1" in message
    assert f"ctx.sleep at {site(pay_timer, 'ctx.sleep')}" in message


def test_a_timer_replaced_by_an_activity_is_detected() -> None:
    d = Driver(pay_timer, charge)
    d.start()
    with pytest.raises(wp.NondeterminismError) as err:
        Driver.replayed(pay_v1, charge, history=d.history)
    message = str(err.value)
    assert "event 2 (TimerStarted timer, step 1" in message
    assert f"from {site(pay_timer, 'ctx.sleep')}" in message
    assert f"ctx.run(charge) at {site(pay_v1, 'ctx.run(charge')}" in message


def test_a_marker_replaced_by_an_activity_is_detected() -> None:
    d = Driver(pay_now, charge)
    d.start()
    with pytest.raises(wp.NondeterminismError, match=r"event 2 \(MarkerRecorded uuid, step 1"):
        Driver.replayed(pay_v1, charge, history=d.history)


def test_a_new_command_while_replaying_is_detected() -> None:
    with pytest.raises(wp.NondeterminismError) as err:
        Driver.replayed(pay_more, charge, refund, history=pay_history())
    message = str(err.value)
    assert f"ctx.run(refund) at {site(pay_more, 'ctx.run(refund')} (step 2)" in message
    assert "while replaying event 3" in message
    assert "has no such step" in message


def test_a_new_command_while_replaying_names_the_type_of_the_event_being_replayed() -> None:
    # Like every other mismatch message, this one should name the history event by
    # number and type: "event 3 (ActivityCompleted ...)", not just "event 3".
    with pytest.raises(wp.NondeterminismError) as err:
        Driver.replayed(pay_more, charge, refund, history=pay_history())
    assert "event 3 (ActivityCompleted" in str(err.value)


@wp.workflow(name="both")
async def both_parallel(ctx: wp.WorkflowContext) -> None:
    await asyncio.gather(ctx.run(charge, 1), ctx.run(refund, 2))
    await ctx.wait_signal("done")


@wp.workflow(name="both")
async def only_charge(ctx: wp.WorkflowContext) -> None:
    await ctx.run(charge, 1)
    await ctx.wait_signal("done")


@wp.workflow(name="both")
async def both_in_turn(ctx: wp.WorkflowContext) -> None:
    await ctx.run(charge, 1)
    await ctx.run(refund, 2)
    await ctx.wait_signal("done")


def test_a_recorded_step_no_longer_issued_is_detected() -> None:
    d = Driver(both_parallel, charge, refund)
    d.start()
    with pytest.raises(wp.NondeterminismError) as err:
        Driver.replayed(only_charge, charge, refund, history=d.history)
    message = str(err.value)
    assert "event 3 (ActivityScheduled refund, step 2" in message
    assert f"from {site(both_parallel, 'asyncio.gather')}" in message
    assert "not issued by the code on replay" in message


def test_a_recorded_step_no_longer_issued_is_detected_at_the_end_of_the_history() -> None:
    d = Driver(both_in_turn, charge, refund)
    d.start()
    d.complete("1", "r")
    assert kinds(d.history)[-1] == ("ActivityScheduled", "2")
    with pytest.raises(wp.NondeterminismError, match=r"event 4 \(ActivityScheduled refund, step 2"):
        Driver.replayed(only_charge, charge, refund, history=d.history)


def test_a_step_issued_in_response_to_another_event_is_detected() -> None:
    d = Driver(both_in_turn, charge, refund)
    d.start()
    d.complete("1", "r")
    with pytest.raises(wp.NondeterminismError) as err:
        Driver.replayed(both_parallel, charge, refund, history=d.history)
    message = str(err.value)
    assert "while handling event 1" in message
    assert "event 4 (ActivityScheduled refund, step 2" in message
    assert "issued while handling event 3" in message
    assert site(both_parallel, "asyncio.gather") in message


def test_returning_early_while_history_goes_on_is_detected() -> None:
    @wp.workflow(name="pay")
    async def pay_and_go(ctx: wp.WorkflowContext) -> str:
        return str(await ctx.run(charge, 100))

    d = Driver(pay_v1, charge)
    d.start()
    d.complete("1", "r")
    d.signal("other")  # a later event the code has processed
    with pytest.raises(wp.NondeterminismError, match="returned while replaying event 3"):
        Driver.replayed(pay_and_go, charge, history=d.history)


def test_unchanged_code_replays_without_complaint_and_changed_args_are_not_checked() -> None:
    @wp.workflow(name="pay")
    async def pay_other_amount(ctx: wp.WorkflowContext) -> str:
        receipt = await ctx.run(charge, 999)
        await ctx.wait_signal("done")
        return str(receipt)

    history = pay_history()
    assert Driver.replayed(pay_v1, charge, history=history).new_commands == []
    assert Driver.replayed(pay_other_amount, charge, history=history).new_commands == []


# == patched() ===========================================================================


@wp.workflow(name="shipping")
async def ship_v1(ctx: wp.WorkflowContext) -> list[Any]:
    a = await ctx.run(echo, "pack")
    await ctx.wait_signal("go")
    b = await ctx.run(echo, "ship")
    return [a, b]


@wp.workflow(name="shipping")
async def ship_v2(ctx: wp.WorkflowContext) -> list[Any]:
    checked = ctx.patched("fraud-check")
    a = await ctx.run(echo, "pack" if not checked else "pack-checked")
    await ctx.wait_signal("go")
    late = ctx.patched("insure")
    b = await ctx.run(echo, "ship-insured" if late else "ship")
    return [a, b, checked, late, ctx.patched("fraud-check")]


def test_patched_is_true_on_new_runs_and_recorded_without_a_step_id() -> None:
    d = Driver(ship_v2, echo)
    marker, scheduled = d.start()
    assert marker.type == E.MARKER_RECORDED
    assert marker.data["kind"] == "patch"
    assert marker.data["change_id"] == "fraud-check"
    assert "step" not in marker.data
    assert marker.data["site"] == site(ship_v2, 'ctx.patched("fraud-check")')
    assert scheduled.data["step"] == "1"
    assert scheduled.data["args"] == ["pack-checked"]
    d.complete("1", "A")
    insure, shipped = d.signal("go")
    assert insure.data["change_id"] == "insure"
    assert shipped.data["step"] == "2"
    d.complete("2", "B")
    assert d.result() == ["A", "B", True, True, True]
    # patched() does not shift step ids: the same steps as the code without it.
    old = Driver(ship_v1, echo)
    old.start()
    old.complete("1")
    old.signal("go")
    steps = [e.data["step"] for e in d.history if e.type == E.ACTIVITY_SCHEDULED]
    assert steps == [e.data["step"] for e in old.history if e.type == E.ACTIVITY_SCHEDULED]


def test_patched_is_false_on_replay_of_an_old_history() -> None:
    old = Driver(ship_v1, echo)
    old.start()
    old.complete("1", "A")
    again = Driver.replayed(ship_v2, echo, history=old.history)
    assert again.new_commands == []
    # The run passed "fraud-check" under the old code and keeps the old path; it has
    # not reached "insure" yet, so it takes the new one there.
    insure, shipped = again.signal("go")
    assert insure.data["change_id"] == "insure"
    assert shipped.data["args"] == ["ship-insured"]
    again.complete("2", "B")
    assert again.result() == ["A", "B", False, True, False]


def test_patched_stays_true_on_replay_of_a_new_history() -> None:
    new = Driver(ship_v2, echo)
    new.start()
    new.complete("1", "A")
    new.signal("go")
    again = Driver.replayed(ship_v2, echo, history=new.history)
    assert again.new_commands == []
    again.complete("2", "B")
    assert again.result() == ["A", "B", True, True, True]


def test_removing_a_patched_call_later_is_tolerated() -> None:
    new = Driver(ship_v2, echo)
    new.start()
    again = Driver.replayed(ship_v1, echo, history=new.history)
    assert again.new_commands == []


# == pay, its error swallowed or its run cancelled ===========================================


@wp.workflow(name="pay")
async def pay_refund_swallowing(ctx: wp.WorkflowContext) -> str:
    try:
        await ctx.run(refund, 100)
    except Exception as err:  # code that catches everything must not hide non-determinism
        return f"swallowed {err}"
    await ctx.wait_signal("done")
    return "swallowed"


def test_non_determinism_is_reported_even_if_the_code_catches_the_error() -> None:
    with pytest.raises(wp.NondeterminismError, match=r"event 2 \(ActivityScheduled charge"):
        Driver.replayed(pay_refund_swallowing, charge, refund, history=pay_history())


def test_a_workflow_that_does_not_catch_cancellation_ends_cancelled_at_once() -> None:
    d = Driver(pay_v1, charge)
    d.start()
    d.complete("1", "r")
    (done,) = d.cancel("bye")
    assert done.type == E.RUN_CANCELLED
    assert done.data == {"reason": "bye"}
