"""The replay runtime on its own: `WorkflowInstance` fed synthetic histories, no database.

`Driver` (tests/helpers/runtime.py) plays the engine's part: it numbers and hashes
events, feeds them to the instance one at a time and appends the commands the code
issues, the way the engine commits them. `Driver.replayed` rebuilds a fresh instance
from a history, as the engine does after a crash or with cache_size=0. Non-determinism
and `patched()` are tested in test_nondeterminism_runtime.py; signals, asyncio misuse
and cancellation in test_signal_runtime.py.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers.runtime import (
    T0,
    Driver,
    Parcel,
    add,
    charge,
    echo,
    kinds,
    new_id,
    refund,
    site,
    weigh,
)
from waypost.model.events import EventType, NewEvent
from waypost.runtime.instance import idempotency_key

E = EventType
HERE = os.path.basename(__file__)


# == live processing ===============================================================


@wp.workflow(name="sequence")
async def sequence(ctx: wp.WorkflowContext, n: int) -> dict[str, Any]:
    total = await ctx.run(add, n, 1)
    await ctx.sleep(timedelta(seconds=30))
    stamp = ctx.now()
    parcel = await ctx.run(weigh, sku=f"sku-{total}")
    return {"total": total, "at": stamp.isoformat(), "parcel": parcel}


def test_live_processing_emits_commands_caused_by_the_event_fed() -> None:
    d = Driver(sequence, add, weigh)
    (scheduled,) = d.start(41)
    assert scheduled.type == E.ACTIVITY_SCHEDULED
    assert scheduled.data["activity"] == "add"
    assert scheduled.data["step"] == "1"
    assert scheduled.data["args"] == [41, 1]
    assert scheduled.data["cause"] == 1
    assert scheduled.data["key"] == idempotency_key("t1", "run-1", "1")
    assert scheduled.data["site"] == site(sequence, "ctx.run(add")
    assert scheduled.data["retry"] == wp.Retry().to_json()
    assert scheduled.data["timeout"] == 300.0
    assert d.inst.snapshot() == (
        wp.RunStatus.RUNNING,
        [{"kind": "activity", "step": "1", "activity": "add", "site": scheduled.data["site"]}],
    )

    (timer,) = d.complete("1", 42)
    assert timer.type == E.TIMER_STARTED
    assert timer.data["step"] == "2"
    assert timer.data["cause"] == 3
    assert timer.data["duration"] == 30.0
    assert timer.data["kind"] == "timer"
    assert timer.data["site"] == site(sequence, "ctx.sleep")
    assert timer.data["fire_at"] == pytest.approx(timer.ts + 30.0, abs=2)
    status, waiting = d.inst.snapshot()
    assert status == wp.RunStatus.WAITING
    assert waiting == [
        {
            "kind": "timer",
            "step": "2",
            "until": datetime.fromtimestamp(timer.data["fire_at"], UTC).isoformat(),
            "site": timer.data["site"],
        }
    ]

    marker, weighing = d.fire("2")
    assert marker.type == E.MARKER_RECORDED
    assert marker.data["kind"] == "now"
    assert marker.data["step"] == "3"
    assert marker.data["cause"] == 5
    assert weighing.data["step"] == "4"
    assert weighing.data["kwargs"] == {"sku": "sku-42"}
    assert weighing.data["cause"] == 5

    (done,) = d.complete("4", {"sku": "sku-42", "weight": 2.5})
    assert done.type == E.RUN_COMPLETED
    assert done.data == {
        "result": {
            "total": 42,
            "at": datetime.fromtimestamp(marker.data["value"], UTC).isoformat(),
            "parcel": {"sku": "sku-42", "weight": 2.5},
        }
    }
    assert d.inst.finished
    assert d.inst.closed


@wp.workflow(name="typed")
async def typed(ctx: wp.WorkflowContext, parcel: Parcel) -> list[Any]:
    weighed = await ctx.run(weigh, parcel.sku)
    return [type(parcel).__name__, type(weighed).__name__, weighed.weight]


def test_inputs_and_results_are_decoded_by_type_hints() -> None:
    d = Driver(typed, weigh)
    d.start({"sku": "x", "weight": 1})
    d.complete("1", {"sku": "x", "weight": 3})
    assert d.result() == ["Parcel", "Parcel", 3.0]


def test_an_input_that_does_not_fit_the_hint_fails_the_run() -> None:
    d = Driver(typed, weigh)
    d.start(["not", "a", "parcel"])
    error = d.error()
    assert error["type"] == "PayloadError"
    assert "Parcel" in error["message"]


@wp.workflow(name="uuid_result")
async def uuid_result(ctx: wp.WorkflowContext) -> str:
    try:
        value = await ctx.run(new_id)
    except wp.PayloadError as err:
        return f"unreadable: {err}"
    return str(value)


def test_an_activity_result_of_the_wrong_type_is_raised_at_the_await() -> None:
    d = Driver(uuid_result, new_id)
    d.start()
    d.complete("1", 12345)
    assert d.result().startswith("unreadable: value should be str")


def test_a_malformed_activity_result_is_raised_at_the_await() -> None:
    d = Driver(uuid_result, new_id)
    d.start()
    # A string that is not a UUID must reach the workflow as a PayloadError,
    # not escape the instance (which would leave the engine unable to process the run).
    d.complete("1", "not-a-uuid")
    assert d.result().startswith("unreadable: ")


class OutOfStock(Exception):
    """A business outcome this workflow declares as failing."""


@wp.workflow(name="failing", failure_types=(OutOfStock,))
async def failing(ctx: wp.WorkflowContext, how: str) -> Any:
    if how == "raise":
        raise KeyError("missing thing")
    if how == "unknown":
        return await ctx.run("no_such_activity")
    if how == "result":
        return {1, 2}
    if how == "failure":
        raise wp.Failure("card declined", type="CardDeclined", details={"code": 51})
    if how == "declared":
        raise OutOfStock("no more red shoes")
    if how == "uncaught":
        return await ctx.run(charge, 100)
    try:
        return await ctx.run(charge, 100)
    except wp.ActivityError as err:
        return {
            "type": err.type,
            "message": err.message,
            "attempts": err.attempts,
            "step": err.step_id,
        }


def bug_of(d: Driver, how: str) -> wp.WorkflowBug:
    """Start the run: its code raises a bug, which the instance raises for the engine."""
    with pytest.raises(wp.WorkflowBug) as info:
        d.start(how)
    assert d.outcome is None  # the run did not end: the engine suspends it
    assert d.inst.closed
    return info.value


def test_an_unexpected_exception_in_the_workflow_is_a_bug_with_type_message_traceback_and_site() -> (
    None
):
    d = Driver(failing, charge)
    bug = bug_of(d, "raise")
    assert bug.error_type == "KeyError"
    assert "missing thing" in bug.error_message
    assert bug.site == site(failing, "raise KeyError")
    error = bug.to_json()
    assert error["type"] == "KeyError" and error["bug"] is True
    assert error["file"] == HERE and error["line"] == int(bug.site.split(":")[1])
    assert "Traceback" in error["traceback"]
    assert f"line {error['line']}" in error["traceback"]
    assert "RunStarted" in str(bug) and bug.site in str(bug)


def test_a_huge_exception_message_is_bounded_in_the_bug() -> None:
    @wp.workflow(name="loud")
    async def loud(ctx: wp.WorkflowContext) -> None:
        raise ValueError("x" * 1_000_000)

    bug = bug_of(Driver(loud), None)  # type: ignore[arg-type]
    assert len(bug.error_message) < 3_000
    assert len(bug.to_json()["traceback"]) < 20_000


def test_failure_fails_the_run_with_its_type_message_and_details() -> None:
    d = Driver(failing, charge)
    d.start("failure")
    error = d.error()
    assert error["type"] == "CardDeclined"
    assert error["message"] == "card declined"
    assert error["details"] == {"code": 51}


def test_an_exception_type_the_workflow_declares_as_failing_fails_the_run() -> None:
    d = Driver(failing, charge)
    d.start("declared")
    assert d.error()["type"] == "OutOfStock"
    assert "red shoes" in d.error()["message"]


def test_an_activity_error_the_code_does_not_catch_fails_the_run() -> None:
    d = Driver(failing, charge)
    d.start("uncaught")
    d.fail("1", "card declined", attempt=3)
    error = d.error()
    assert error["type"] == "ActivityError"
    assert "card declined" in error["message"]


def test_failure_types_must_be_exception_classes() -> None:
    with pytest.raises(wp.ConfigurationError, match="failure_types"):
        wp.workflow(name="bad", failure_types=("KeyError",))  # type: ignore[arg-type]


def test_an_unknown_activity_is_a_bug_naming_it() -> None:
    bug = bug_of(Driver(failing, charge), "unknown")
    assert bug.error_type == "UnknownActivity"
    assert "no_such_activity" in bug.error_message
    assert "charge" in bug.error_message


def test_a_result_that_is_not_json_is_a_bug() -> None:
    bug = bug_of(Driver(failing, charge), "result")
    assert bug.error_type == "PayloadError"
    assert "the workflow's result" in bug.error_message


def test_retrying_failures_are_invisible_and_the_final_one_raises_activity_error() -> None:
    d = Driver(failing, charge)
    d.start("activity")
    assert (
        d.feed(
            E.ACTIVITY_FAILED,
            step="1",
            attempt=1,
            error={"type": "Flaky", "message": "again"},
            retrying=True,
            retry_at=T0 + 99,
        )
        == []
    )
    assert d.outcome is None
    d.fail("1", "card declined", attempt=2)
    assert d.result() == {
        "type": "RuntimeError",
        "message": "card declined",
        "attempts": 2,
        "step": "1",
    }


def test_events_for_unknown_or_finished_steps_change_nothing() -> None:
    d = Driver(sequence, add, weigh)
    d.start(1)
    assert d.complete("99", 5) == []
    assert d.fire("42") == []
    assert d.feed(E.LATE_RESULT_IGNORED, step="1", attempt=1, fence=1, outcome="completed") == []
    (timer,) = d.complete("1", 2)
    assert timer.type == E.TIMER_STARTED
    assert d.complete("1", 3) == []  # a duplicate delivery
    assert d.inst.snapshot()[0] == wp.RunStatus.WAITING


# == step ids of parallel work ========================================================


@wp.workflow(name="fan")
async def fan(ctx: wp.WorkflowContext) -> list[Any]:
    async def pair(base: int) -> int:
        x = await ctx.run(add, base, 0)
        y, z = await asyncio.gather(sub(x, 1), sub(x, 2))
        return x + y + z

    async def sub(x: int, k: int) -> int:
        return int(await ctx.run(add, x, k))

    results = await asyncio.gather(ctx.run(add, 1, 0), ctx.run(add, 2, 0), pair(30))
    tail = await ctx.run(add, 0, 0)
    return [*results, tail]


FAN_STEPS = {"1": 1, "2": 2, "3.1": 30, "3.2.1": 31, "3.3.1": 32}


def drive_fan(order: list[str]) -> Driver:
    """Run `fan`, completing the steps of FAN_STEPS in `order` as they become scheduled."""
    d = Driver(fan, add)
    pending = {e.data["step"] for e in d.start()}
    todo = list(order)
    while todo:
        step = next(s for s in todo if s in pending)
        todo.remove(step)
        pending.discard(step)
        pending |= {e.data["step"] for e in d.complete(step, FAN_STEPS[step])}
    (tail,) = pending
    assert tail == "4"
    d.complete("4", 0)
    return d


def test_gather_step_ids_do_not_depend_on_completion_order() -> None:
    orders = list(itertools.permutations(FAN_STEPS))[::7]
    assert len(orders) > 10
    seen = set()
    for order in orders:
        d = drive_fan(list(order))
        assert d.result() == [1, 2, 30 + 31 + 32, 0]
        scheduled = sorted(e.data["step"] for e in d.history if e.type == E.ACTIVITY_SCHEDULED)
        seen.add(tuple(scheduled))
    assert seen == {("1", "2", "3.1", "3.2.1", "3.3.1", "4")}


def test_gather_issues_its_futures_in_order_and_tasks_get_hierarchical_ids() -> None:
    d = Driver(fan, add)
    first = d.start()
    assert [e.data["step"] for e in first] == ["1", "2", "3.1"]
    assert {e.data["cause"] for e in first} == {1}
    assert first[0].data["site"] == site(fan, "results = await asyncio.gather")
    assert first[2].data["site"] == site(fan, "x = await ctx.run(add, base, 0)")
    nested = d.complete("3.1", 30)
    assert [e.data["step"] for e in nested] == ["3.2.1", "3.3.1"]
    assert [e.data["args"] for e in nested] == [[30, 1], [30, 2]]
    assert {e.data["site"] for e in nested} == {site(fan, "int(await ctx.run(add, x, k))")}


def test_a_replay_of_any_completion_order_matches() -> None:
    for order in (["3.1", "3.3.1", "2", "3.2.1", "1"], ["1", "2", "3.1", "3.2.1", "3.3.1"]):
        live = drive_fan(order)
        history = live.history[:-2]  # up to the last completion, before the tail step
        assert history[-1].type == E.ACTIVITY_SCHEDULED
        again = Driver.replayed(fan, add, history=history)
        assert again.new_commands == []
        again.complete("4", 0)
        assert again.result() == live.result()


@wp.workflow(name="tasks")
async def tasks(ctx: wp.WorkflowContext) -> list[int]:
    async def branch(k: int) -> int:
        await ctx.sleep(k)
        return int(await ctx.run(add, k, 0))

    first = asyncio.create_task(branch(1))
    second = asyncio.ensure_future(branch(2))
    direct = await ctx.run(add, 9, 0)
    return [await first, await second, direct]


def test_create_task_takes_a_step_id_and_its_operations_nest_under_it() -> None:
    d = Driver(tasks, add)
    # The root runs on until it blocks before the new tasks get their first turn.
    assert kinds(d.start()) == [
        ("ActivityScheduled", "3"),
        ("TimerStarted", "1.1"),
        ("TimerStarted", "2.1"),
    ]
    assert kinds(d.fire("2.1")) == [("ActivityScheduled", "2.2")]
    assert kinds(d.fire("1.1")) == [("ActivityScheduled", "1.2")]
    d.complete("2.2", 2)
    d.complete("3", 9)
    d.complete("1.2", 1)
    assert d.result() == [1, 2, 9]


# == replay ==========================================================================


@wp.workflow(name="recorder")
async def recorder(ctx: wp.WorkflowContext, n: int) -> dict[str, Any]:
    seen = [ctx.is_replaying]
    a = await ctx.run(echo, n + 1)
    b, c = await asyncio.gather(ctx.run(echo, "b"), ctx.run(echo, "c"))
    await ctx.sleep(5)
    when = ctx.now()
    r = ctx.random()
    u = ctx.uuid()
    seen.append(ctx.is_replaying)
    go = await ctx.wait_signal("go")
    seen.append(ctx.is_replaying)
    return {
        "a": a,
        "b": b,
        "c": c,
        "when": when.isoformat(),
        "random": r,
        "uuid": str(u),
        "go": go,
        "replaying": seen,
    }


def record_until_waiting() -> Driver:
    d = Driver(recorder, echo)
    d.start(1)
    d.complete("1", "recorded-a")  # not what `add` would compute: replay must not recompute
    d.complete("3", "recorded-c")
    d.complete("2", "recorded-b")
    d.fire("4")
    assert d.inst.snapshot() == (wp.RunStatus.WAITING, [{"kind": "signal", "name": "go"}])
    return d


def test_replay_returns_recorded_results_and_issues_no_commands() -> None:
    live = record_until_waiting()
    live_values = {
        m.data["kind"]: m.data["value"] for m in live.history if m.type == E.MARKER_RECORDED
    }
    assert set(live_values) == {"now", "random", "uuid"}

    again = Driver.replayed(recorder, echo, history=list(live.history))
    assert again.new_commands == []
    assert again.inst.snapshot() == live.inst.snapshot()
    assert again.inst.last_seq == live.history[-1].seq
    assert not again.inst.replaying

    live.signal("go", {"ok": 1})
    (done,) = again.signal("go", {"ok": 1})
    assert done.type == E.RUN_COMPLETED
    result = again.result()
    assert result == {**live.result(), "replaying": [True, True, False]}
    assert result["a"] == "recorded-a"
    assert result["b"] == "recorded-b"
    assert result["c"] == "recorded-c"
    assert result["when"] == datetime.fromtimestamp(live_values["now"], UTC).isoformat()
    assert result["random"] == live_values["random"]
    assert result["uuid"] == live_values["uuid"]
    assert live.result()["replaying"] == [False, False, False]


def test_now_random_and_uuid_are_recorded_markers_with_step_ids() -> None:
    live = record_until_waiting()
    markers = [e for e in live.history if e.type == E.MARKER_RECORDED]
    assert [(m.data["kind"], m.data["step"]) for m in markers] == [
        ("now", "5"),
        ("random", "6"),
        ("uuid", "7"),
    ]
    assert 0 <= markers[1].data["value"] < 1
    assert uuid.UUID(markers[2].data["value"]).version == 4
    # ctx.now() is the engine clock at the time of the call.
    assert T0 < markers[0].data["value"] <= live.clock.t


def test_replay_with_unprocessed_events_processes_them_live() -> None:
    live = Driver(sequence, add, weigh)
    live.start(1)
    live.complete("1", 2)
    # The timer fired and was appended, but no engine processed it yet.
    (fired,) = live.append([NewEvent(E.TIMER_FIRED, {"step": "2", "generation": 1}, T0 + 50)])
    again = Driver.replayed(sequence, add, weigh, history=list(live.history), processed_seq=3)
    assert kinds(again.new_commands) == [("MarkerRecorded", "3"), ("ActivityScheduled", "4")]
    assert {e.data["cause"] for e in again.new_commands} == {fired.seq}
    assert again.new_commands[0].data["value"] > T0 + 1_000_000  # a new value: this is live


def test_replaying_an_unprocessed_start_is_the_same_as_starting_live() -> None:
    live = Driver(sequence, add, weigh)
    started = live.start(3)
    again = Driver.replayed(sequence, add, weigh, history=live.history[:1], processed_seq=0)
    assert kinds(again.new_commands) == kinds(started)
    assert again.new_commands[0].data["args"] == [3, 1]
    assert again.new_commands[0].data["cause"] == 1


def test_a_replayed_instance_goes_on_like_the_live_one() -> None:
    live = Driver(sequence, add, weigh)
    live.start(5)
    live.complete("1", 6)
    again = Driver.replayed(sequence, add, weigh, history=list(live.history))
    assert again.new_commands == []
    assert kinds(again.fire("2")) == kinds(live.fire("2"))
    assert kinds(again.complete("4", {"sku": "a", "weight": 1})) == kinds(
        live.complete("4", {"sku": "a", "weight": 1})
    )
    assert again.result()["total"] == live.result()["total"] == 6


# == more edges ===============================================================================


def test_a_failing_signal_handler_or_predicate_is_a_bug() -> None:
    @wp.workflow(name="fragile")
    async def fragile(ctx: wp.WorkflowContext, where: str) -> str:
        def handler(v: int) -> None:
            if where == "handler":
                raise ValueError(f"bad signal {v}")

        ctx.on_signal("s", handler)

        seen: list[int] = []

        def predicate() -> bool:
            if where == "predicate" and seen:
                raise LookupError("broken predicate")
            return False

        ctx.on_signal("t", seen.append)
        await ctx.wait_condition(predicate)
        return "never"

    d = Driver(fragile)
    d.start("handler")
    with pytest.raises(wp.WorkflowBug) as info:
        d.signal("s", 7)
    assert info.value.error_type == "ValueError"
    assert "bad signal 7" in info.value.error_message
    assert info.value.site == site(fragile, 'raise ValueError(f"bad signal')

    d = Driver(fragile)
    d.start("predicate")
    with pytest.raises(wp.WorkflowBug) as info:
        d.signal("t", 1)
    assert info.value.error_type == "LookupError"
    assert d.outcome is None


def test_cancelling_a_gather_cancels_every_pending_branch() -> None:
    @wp.workflow(name="parallel_cancel")
    async def parallel_cancel(ctx: wp.WorkflowContext) -> None:
        async def slow() -> None:
            await ctx.sleep(100)

        await asyncio.gather(ctx.run(charge, 1), ctx.run(refund, 2), slow())

    d = Driver(parallel_cancel, charge, refund)
    assert kinds(d.start()) == [
        ("ActivityScheduled", "1"),
        ("ActivityScheduled", "2"),
        ("TimerStarted", "3.1"),
    ]
    d.complete("2", "r")
    cmds = d.cancel("stop")
    assert sorted(kinds(cmds)[:-1]) == [("ActivityCancelRequested", "1"), ("TimerCancelled", "3.1")]
    assert cmds[-1].type == E.RUN_CANCELLED


def test_a_replayed_timer_keeps_its_recorded_fire_time() -> None:
    live = Driver(sequence, add, weigh)
    live.start(5)
    live.complete("1", 6)
    again = Driver.replayed(sequence, add, weigh, history=list(live.history))
    assert again.inst.snapshot() == live.inst.snapshot()


@wp.workflow(name="typed_signal")
async def typed_signal(ctx: wp.WorkflowContext) -> str:
    try:
        value = await ctx.wait_signal("id", type=uuid.UUID)
    except wp.PayloadError as err:
        return f"unreadable: {err}"
    return str(value)


def test_a_signal_payload_of_the_wrong_type_is_raised_at_the_wait() -> None:
    d = Driver(typed_signal)
    d.start()
    d.signal("id", 42)
    assert d.result() == "unreadable: value should be str, got int"


def test_a_malformed_signal_payload_is_raised_at_the_wait() -> None:
    # Signals come from outside: a payload that does not parse as the declared type
    # must fail the wait, not escape the instance and wedge the run.
    d = Driver(typed_signal)
    d.start()
    d.signal("id", "not-a-uuid")
    assert d.result().startswith("unreadable: ")
