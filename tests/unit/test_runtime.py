"""The replay runtime on its own: `WorkflowInstance` fed synthetic histories, no database.

`Driver` plays the engine's part: it numbers and hashes events, feeds them to
the instance one at a time and appends the commands the code issues, the way
the engine commits them. `Driver.replayed` rebuilds a fresh instance from a
history, as the engine does after a crash or with cache_size=0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import json
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import waypost as wp
from waypost.model.chain import seal
from waypost.model.codec import JsonCodec
from waypost.model.events import TERMINAL_EVENTS, Event, EventType, NewEvent
from waypost.runtime.instance import WorkflowInstance, idempotency_key
from waypost.runtime.registry import Registry

E = EventType
T0 = 1_700_000_000.0
HERE = os.path.basename(__file__)


def site(fn: Callable[..., Any], text: str, nth: int = 1) -> str:
    """`test_runtime.py:LINE` of the nth source line of `fn` that contains `text`."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, line in enumerate(lines) if text in line]
    assert len(hits) >= nth, f"{text!r} not found in {fn.__name__}"
    return f"{HERE}:{hits[nth - 1]}"


class Clock:
    def __init__(self, start: float = T0) -> None:
        self.t = start

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


class Driver:
    """One run of one workflow, driven event by event like the engine does."""

    def __init__(
        self,
        workflow: Any,
        *activities: Any,
        clock: Clock | None = None,
        history: list[Event] | None = None,
    ) -> None:
        self.registry = Registry()
        for item in (workflow, *activities):
            self.registry.add(item)
        self.defn = workflow.__waypost_workflow__
        self.clock = clock or Clock()
        self.history: list[Event] = list(history or [])
        self.inst = WorkflowInstance(
            workflow=self.defn,
            activities=self.registry.activities(),
            codec=JsonCodec(),
            tenant="t1",
            run_id="run-1",
            clock=self.clock,
        )

    @classmethod
    def replayed(
        cls,
        workflow: Any,
        *activities: Any,
        history: list[Event],
        processed_seq: int | None = None,
        clock: Clock | None = None,
    ) -> Driver:
        """A fresh instance rebuilt from `history`; raises NondeterminismError."""
        history = stored(history)
        d = cls(workflow, *activities, clock=clock or Clock(T0 + 1_000_000), history=history)
        if processed_seq is None:
            processed_seq = d.last_fed_seq()
        d.inst.replay(history, processed_seq)
        d.new_commands = d.append(d.inst.take_commands())
        return d

    def last_fed_seq(self) -> int:
        """The last event that was not a command (what the engine records as processed)."""
        fed = [e.seq for e in self.history if e.data.get("cause") is None]
        return fed[-1] if fed else 0

    def append(self, events: list[NewEvent]) -> list[Event]:
        last = self.history[-1] if self.history else None
        sealed = seal(last.seq if last else 0, last.hash if last else "", events)
        self.history.extend(sealed)
        return sealed

    def feed(self, type_: EventType, **data: Any) -> list[Event]:
        """Append one event, let the code react, append and return its commands."""
        assert self.outcome is None, "the run has finished already"
        (ev,) = self.append([NewEvent(type_, data, self.clock())])
        self.inst.apply_new(ev)
        return self.append(self.inst.take_commands())

    # shorthands
    def start(self, input: Any = None) -> list[Event]:
        return self.feed(
            E.RUN_STARTED, workflow=self.defn.name, version=self.defn.version, input=input
        )

    def complete(self, step: str, result: Any = None) -> list[Event]:
        return self.feed(E.ACTIVITY_COMPLETED, step=step, attempt=1, result=result)

    def fail(self, step: str, message: str = "boom", attempt: int = 3) -> list[Event]:
        return self.feed(
            E.ACTIVITY_FAILED,
            step=step,
            attempt=attempt,
            error={"type": "RuntimeError", "module": "builtins", "message": message},
            retrying=False,
        )

    def fire(self, step: str) -> list[Event]:
        return self.feed(E.TIMER_FIRED, step=step, generation=1)

    def signal(self, name: str, payload: Any = None) -> list[Event]:
        return self.feed(E.SIGNAL_RECEIVED, name=name, payload=payload)

    def cancel(self, reason: str = "asked") -> list[Event]:
        return self.feed(E.CANCEL_REQUESTED, reason=reason)

    @property
    def outcome(self) -> Event | None:
        """The run's last event if it ended the run."""
        if self.history and self.history[-1].type in TERMINAL_EVENTS:
            return self.history[-1]
        return None

    def result(self) -> Any:
        out = self.outcome
        assert out is not None, f"the run has not finished: {self.history!r}"
        assert out.type == E.RUN_COMPLETED, out
        return out.data["result"]

    def error(self) -> dict[str, Any]:
        out = self.outcome
        assert out is not None and out.type == E.RUN_FAILED, out
        return out.data["error"]


def stored(events: list[Event]) -> list[Event]:
    """Events as the store hands them back: plain string types, data parsed from its text."""
    return [dataclasses.replace(e, type=str(e.type), data=json.loads(e.data_json)) for e in events]


def kinds(events: list[Event]) -> list[tuple[str, str | None]]:
    """(type, step) of each event: what replay must agree on."""
    return [(str(e.type), e.data.get("step")) for e in events]


# == activities (never executed here: the Driver plays their results) ==========


@wp.activity
def add(ctx: wp.ActivityContext, a: int, b: int) -> int:
    return a + b


@wp.activity
def echo(ctx: wp.ActivityContext, value: Any) -> Any:
    return value


@wp.activity
def charge(ctx: wp.ActivityContext, cents: int) -> str:
    return "receipt"


@wp.activity
def refund(ctx: wp.ActivityContext, cents: int) -> str:
    return "refunded"


@wp.activity
def cleanup(ctx: wp.ActivityContext, why: str) -> None:
    return None


@wp.activity
def new_id(ctx: wp.ActivityContext) -> uuid.UUID:
    return uuid.uuid4()


@dataclasses.dataclass
class Parcel:
    sku: str
    weight: float


@wp.activity
def weigh(ctx: wp.ActivityContext, sku: str) -> Parcel:
    return Parcel(sku, 1.0)


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
    assert waiting[0]["site"].startswith("test_runtime.py:")
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


def test_a_workflow_that_does_not_catch_cancellation_ends_cancelled_at_once() -> None:
    d = Driver(pay_v1, charge)
    d.start()
    d.complete("1", "r")
    (done,) = d.cancel("bye")
    assert done.type == E.RUN_CANCELLED
    assert done.data == {"reason": "bye"}


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


# == more edges ===============================================================================


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
