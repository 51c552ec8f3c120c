"""Child runs in the pure runtime: the command, its replay, the end, the bounds."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from tests.helpers.runtime import Driver, kinds
from waypost.errors import NondeterminismError
from waypost.model.events import EventType as E
from waypost.runtime.children import MAX_CHILD_DEPTH, child_run_id


@wp.workflow(name="leaf")
async def leaf(ctx: wp.WorkflowContext, n: int) -> int:
    return n


@wp.workflow(name="leaf2")
async def leaf2(ctx: wp.WorkflowContext, n: int) -> int:
    return n


@wp.workflow(name="asks")
async def asks(ctx: wp.WorkflowContext, n: int) -> Any:
    try:
        return await ctx.child(leaf, n)
    except wp.ChildFailed as exc:
        return {"status": exc.status, "type": exc.type}


@wp.workflow(name="asks")
async def asks_another(ctx: wp.WorkflowContext, n: int) -> Any:
    return await ctx.child(leaf2, n)


@wp.workflow(name="bad_close")
async def bad_close(ctx: wp.WorkflowContext, close: Any) -> Any:
    return await ctx.child(leaf, 1, close=close)


@wp.workflow(name="bad_id")
async def bad_id(ctx: wp.WorkflowContext, run_id: Any) -> Any:
    return await ctx.child(leaf, 1, run_id=run_id)


def test_a_child_is_a_command_and_its_end_is_the_result() -> None:
    d = Driver(asks)
    (started,) = d.start(4)
    assert kinds([started]) == [("ChildStarted", "1")]
    data = started.data
    assert (data["workflow"], data["version"], data["run_id"], data["close"]) == (
        "leaf",
        "1",
        "run-1-1",
        "cancel",
    )
    assert (data["queue"], data["input"], data["depth"]) == ("leaf@1", 4, 1)
    _, waiting = d.inst.snapshot()
    assert waiting == [{"kind": "child", "step": "1", "workflow": "leaf", "run_id": "run-1-1"}]
    # Replayed, the child is matched, not started again.
    assert Driver.replayed(asks, history=d.history).new_commands == []
    done = d.feed(E.CHILD_COMPLETED, step="1", run_id="run-1-1", status="completed", result=4)
    assert kinds(done) == [("RunCompleted", None)] and d.outcome is not None
    assert d.outcome.data["result"] == 4


def test_a_childs_failure_is_an_exception_the_code_catches() -> None:
    d = Driver(asks)
    d.start(4)
    error = {"type": "Terminated", "message": "stuck"}
    d.feed(E.CHILD_FAILED, step="1", run_id="run-1-1", status="terminated", error=error)
    assert d.outcome is not None
    assert d.outcome.data["result"] == {"status": "terminated", "type": "Terminated"}


def test_replay_that_starts_another_child_is_non_deterministic() -> None:
    d = Driver(asks)
    d.start(4)
    with pytest.raises(NondeterminismError, match="started workflow 'leaf'"):
        Driver.replayed(asks_another, leaf2, history=d.history)


def test_a_run_at_the_deepest_level_cannot_start_a_child() -> None:
    d = Driver(asks)
    parent = {"run_id": "up", "step": "1", "depth": MAX_CHILD_DEPTH}
    done = d.feed(E.RUN_STARTED, workflow="asks", version="1", input=1, parent=parent)
    assert kinds(done) == [("RunCompleted", None)]  # nothing recorded, nothing started
    assert d.outcome is not None
    assert d.outcome.data["result"] == {"status": "not_started", "type": "TooDeep"}


@pytest.mark.parametrize("close", ["kill", "", None, 3])
def test_an_unknown_close_policy_is_a_bug(close: Any) -> None:
    d = Driver(bad_close)
    with pytest.raises(wp.WorkflowBug, match="close must be one of"):
        d.start(close)


@pytest.mark.parametrize("run_id", ["", "a\nb", "x" * 500, 7])
def test_a_child_run_id_that_is_no_id_is_a_bug(run_id: Any) -> None:
    d = Driver(bad_id)
    with pytest.raises(wp.WorkflowBug):
        d.start(run_id)


def test_child_ids_keep_to_one_url_path_segment() -> None:
    assert child_run_id("order-7", "3") == "order-7-3"
    assert child_run_id("order-7", "2/4.1") == "order-7-2~4.1"
