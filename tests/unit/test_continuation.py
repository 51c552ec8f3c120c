"""Continue-as-new in the runtime alone: the outcome, the next generation's step ids, and
the signals handed on, with no database (the engine's part is played by `Driver`)."""

from __future__ import annotations

import asyncio
from typing import Any

import waypost as wp
from tests.helpers.runtime import Driver, echo
from waypost.engine.decisions import next_generation
from waypost.model.events import EventType, NewEvent
from waypost.runtime.instance import idempotency_key

E = EventType


@wp.workflow(name="cont_loop")
async def loop(ctx: wp.WorkflowContext, n: int) -> int:
    await ctx.run(echo, n)
    if n < 2:
        ctx.continue_as_new(n + 1)
    return n


@wp.workflow(name="cont_gather")
async def gathered(ctx: wp.WorkflowContext, n: int) -> None:
    async def branch() -> None:
        await ctx.run(echo, "b")
        ctx.continue_as_new(n + 1)

    await asyncio.gather(ctx.run(echo, "a"), branch())


@wp.workflow(name="cont_inbox")
async def inbox(ctx: wp.WorkflowContext, got: list[Any]) -> None:
    got = [*got, await ctx.wait_signal("item")]
    ctx.continue_as_new(got)


def _next_run(d: Driver) -> Driver:
    """The next generation as the store starts it: its RunStarted and inherited signals."""
    outcome = d.inst.outcome
    assert outcome is not None and outcome.type == E.RUN_CONTINUED_AS_NEW
    nxt = next_generation(d.inst, outcome)
    fresh = Driver(loop if d.defn.name == "cont_loop" else inbox, echo)
    # The store writes RunStarted and the inherited signals at once; the engine feeds
    # them all, then commits what the code decided.
    for ev in fresh.append([nxt.started, *nxt.signals]):
        fresh.inst.apply_new(ev)
    fresh.append(fresh.inst.take_commands())
    return fresh


def test_continuing_ends_the_generation_with_the_next_ones_input() -> None:
    d = Driver(loop, echo)
    d.start(0)
    (scheduled,) = [e for e in d.history if e.type == E.ACTIVITY_SCHEDULED]
    assert scheduled.data["step"] == "1"
    d.complete("1", 0)
    outcome = d.outcome
    assert outcome is not None and outcome.type == E.RUN_CONTINUED_AS_NEW
    assert outcome.data == {"input": 1, "generation": 2, "signals": []}
    second = _next_run(d)
    steps = [e.data["step"] for e in second.history if e.type == E.ACTIVITY_SCHEDULED]
    assert steps == ["2/1"]  # the generation's own step ids
    assert idempotency_key("t1", "run-1", "2/1") != idempotency_key("t1", "run-1", "1")
    second.complete("2/1", 1)
    third = _next_run(second)
    third.complete("3/1", 2)
    assert third.result() == 2


def test_a_continuation_from_a_branch_ends_the_whole_generation() -> None:
    d = Driver(gathered, echo)
    d.start(0)
    d.complete("2.1", "b")
    outcome = d.outcome
    assert outcome is not None and outcome.type == E.RUN_CONTINUED_AS_NEW
    assert outcome.data["input"] == 1
    # The other branch's activity is abandoned with the generation (the store deletes its
    # task with the generation's other rows; a late result finds no task of its step).
    assert [(str(e.type), e.data.get("step")) for e in d.history] == [
        ("RunStarted", None),
        ("ActivityScheduled", "1"),
        ("ActivityScheduled", "2.1"),
        ("ActivityCompleted", "2.1"),
        ("RunContinuedAsNew", None),
    ]


def test_signals_not_taken_in_are_handed_to_the_next_generation() -> None:
    d = Driver(inbox)
    d.start([])
    d.signal("item", 1)  # taken in: the code continues at once
    # Two more arrive in the same activation, after the code continued (before the
    # engine commits): the next generation gets both, in order.
    for n in (2, 3):
        (ev,) = d.append([NewEvent(E.SIGNAL_RECEIVED, {"name": "item", "payload": n}, 0.0)])
        d.inst.apply_new(ev)
    nxt = next_generation(d.inst, d.inst.outcome)  # type: ignore[arg-type]
    assert nxt.generation == 2 and nxt.input == [1]
    assert nxt.started.data["generation"] == 2 and nxt.started.data["input"] == [1]
    assert [s.data for s in nxt.signals] == [
        {"name": "item", "payload": 2},
        {"name": "item", "payload": 3},
    ]
    second = _next_run(d)
    # The next generation takes the first inherited signal and continues again.
    outcome = second.outcome
    assert outcome is not None and outcome.type == E.RUN_CONTINUED_AS_NEW
    assert outcome.data["input"] == [1, 2] and outcome.data["generation"] == 3
    assert next_generation(second.inst, second.inst.outcome).signals[0].data["payload"] == 3  # type: ignore[arg-type]


def test_a_run_asked_to_cancel_ends_cancelled_instead_of_continuing() -> None:
    d = Driver(loop, echo)
    d.start(0)
    d.cancel("stop")  # the code is awaiting the activity: it sees CancelledError
    outcome = d.outcome
    assert outcome is not None and outcome.type == E.RUN_CANCELLED
