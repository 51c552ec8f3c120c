"""Correlated signal waits in the pure runtime: the commands, their replay, their bounds."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from tests.helpers.runtime import Driver, kinds
from waypost.errors import NondeterminismError
from waypost.model.events import EventType as E


@wp.workflow(name="corr")
async def corr(ctx: wp.WorkflowContext, order_id: str) -> Any:
    return await ctx.wait_signal("paid", 60, correlate=("order", order_id))


@wp.workflow(name="corr")
async def corr_changed(ctx: wp.WorkflowContext, order_id: str) -> Any:
    return await ctx.wait_signal("paid", 60, correlate=("order", order_id.upper()))


@wp.workflow(name="corr_bad")
async def corr_bad(ctx: wp.WorkflowContext, pair: Any) -> Any:
    return await ctx.wait_signal("paid", correlate=pair)


def test_a_correlated_wait_registers_and_withdraws_its_pair() -> None:
    d = Driver(corr)
    started = d.start("o-1")
    assert kinds(started) == [("CorrelationRegistered", "1"), ("TimerStarted", "2")]
    assert {k: started[0].data[k] for k in ("signal", "key", "value")} == {
        "signal": "paid",
        "key": "order",
        "value": "o-1",
    }
    _, waiting = d.inst.snapshot()
    assert {"kind": "signal", "name": "paid", "correlate": {"key": "order", "value": "o-1"}} in (
        waiting
    )
    assert Driver.replayed(corr, history=d.history).new_commands == []
    done = d.signal("paid", {"ok": True})
    assert kinds(done) == [
        ("CorrelationWithdrawn", "1"),
        ("TimerCancelled", "2"),
        ("RunCompleted", None),
    ]


def test_a_timed_out_wait_withdraws_its_pair() -> None:
    d = Driver(corr)
    d.start("o-1")
    fired = d.fire("2")
    assert kinds(fired)[0] == ("CorrelationWithdrawn", "1")
    assert d.error()["type"] == "WaitTimeout"


def test_a_signal_received_first_registers_nothing() -> None:
    d = Driver(corr)
    d.append([])
    d.feed(E.SIGNAL_RECEIVED, name="paid", payload=1)  # before the run's code ever ran
    started = d.start("o-1")
    assert kinds(started) == [("RunCompleted", None)]


def test_replay_with_another_pair_is_non_deterministic() -> None:
    d = Driver(corr)
    d.start("o-1")
    with pytest.raises(NondeterminismError, match="correlated by"):
        Driver.replayed(corr_changed, history=d.history)


@pytest.mark.parametrize(
    "pair", [("order",), ("order", 7), ["", "x"], ("order", "x" * 201), ("order", "a\nb"), "ab"]
)
def test_a_pair_that_is_no_pair_of_short_ids_is_a_bug_that_suspends_the_run(pair: Any) -> None:
    d = Driver(corr_bad)
    with pytest.raises(wp.WorkflowBug) as info:
        d.start(list(pair) if isinstance(pair, tuple) else pair)
    assert info.value.error_type == "WorkflowError"
    assert d.outcome is None
