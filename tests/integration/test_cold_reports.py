"""A step's outcome reported by an engine that does not hold the run in memory (its cache
evicted it, or another process started it, as after a restart): the run is read with its
idle workflow task's fence, and the outcome and the decision on it go in one commit under
that fence, as for a run in memory. Where the task is not idle (or not in a queue the
engine serves), the store gives no fence and the long way decides."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import waypost as wp
from tests.helpers import eventually
from tests.helpers.gates import gate
from tests.helpers.store import open_tasks
from waypost.store import open_store


@wp.activity
def held(ctx: wp.ActivityContext, name: str) -> str:
    gate(f"{name}-began").set()
    assert gate(name).wait(30), "the test never opened the gate"
    return name.upper()


@wp.workflow(name="step_then_wait")
async def step_then_wait(ctx: wp.WorkflowContext, name: str) -> str:
    got: str = await ctx.run(held, name)
    more = await ctx.wait_signal("go")
    return f"{got}{more}"


@wp.workflow(name="waits")
async def waits(ctx: wp.WorkflowContext, name: str) -> str:
    more: str = await ctx.wait_signal("go")
    return name + more


def workflow_task(url: str, run_id: str) -> Any:
    return next(t for t in open_tasks(url, run_id) if t.kind == "workflow")


def step_running_out_of_memory(engine: wp.Engine, name: str) -> tuple[Any, Any]:
    """A run whose step is under way, and another run whose start evicted it from the
    engine's one cached run (now waiting on a signal)."""
    run = engine.start(step_then_wait, name)
    assert gate(f"{name}-began").wait(20)
    other = engine.start(waits, name)
    eventually(lambda: engine.get(other.run_id).status == "waiting", "the other run")
    return run, other


def test_a_cold_report_commits_the_outcome_and_the_decision_under_the_idle_fence(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(step_then_wait, waits, held, cache_size=1)
    name = f"cold{uuid.uuid4().hex[:6]}"
    with engine.running():
        run, other = step_running_out_of_memory(engine, name)
        before = workflow_task(db_url, run.run_id)
        gate(name).set()
        eventually(lambda: engine.get(run.run_id).status == "waiting", "the signal wait")
        after = workflow_task(db_url, run.run_id)
        # The long way claims the task (its fence moves on) before deciding; the outcome
        # and the decision in one commit leave it idle under the fence it had.
        assert after.fence == before.fence
        history = engine.history(run.run_id)
        assert [e.type for e in history] == ["RunStarted", "ActivityScheduled", "ActivityCompleted"]
        assert engine.get(run.run_id).waiting_for[0]["kind"] == "signal"
        engine.signal(run.run_id, "go", "!")
        engine.signal(other.run_id, "go", "?")
        assert run.result(timeout=20) == f"{name.upper()}!"
        assert other.result(timeout=20) == f"{name}?"
    assert engine.verify(run.run_id) == []


def test_a_signal_that_came_while_the_step_ran_is_taken_in_with_its_outcome(
    make_engine: Any,
) -> None:
    engine = make_engine(step_then_wait, waits, held, cache_size=1)
    name = f"busy{uuid.uuid4().hex[:6]}"
    with engine.running():
        run, other = step_running_out_of_memory(engine, name)
        engine.signal(run.run_id, "go", "+")
        eventually(
            lambda: any(e.type == "SignalReceived" for e in engine.history(run.run_id)),
            "the signal recorded",
        )
        gate(name).set()
        assert run.result(timeout=20) == f"{name.upper()}+"
        engine.signal(other.run_id, "go", "-")
        assert other.result(timeout=20) == f"{name}-"
    types = [e.type for e in engine.history(run.run_id)]
    assert types[-1] == "RunCompleted" and types.count("ActivityCompleted") == 1
    assert engine.verify(run.run_id) == []


def test_a_fence_only_for_an_idle_workflow_task_of_a_queue_served(
    make_engine: Any, db_url: str
) -> None:
    """What decides between the one commit and the long way: the store gives the fence
    (and the history) only for an idle task in one of the queues asked about."""

    def idle(run_id: str, queues: list[str]) -> tuple[Any, list[Any], int | None]:
        async def read() -> tuple[Any, list[Any], int | None]:
            store = open_store(db_url)
            await store.open()
            try:
                return await store.load_idle_run("default", run_id, queues)
            finally:
                await store.close()

        return asyncio.run(read())

    engine = make_engine(waits)
    run = engine.start(waits, "z")  # nobody serves it: its task is ready, not idle
    queue = workflow_task(db_url, run.run_id).queue
    assert idle(run.run_id, [queue]) == (None, [], None)
    with engine.running():
        eventually(lambda: engine.get(run.run_id).status == "waiting", "the signal wait")
    task = workflow_task(db_url, run.run_id)
    found, history, fence = idle(run.run_id, [queue])
    assert found is not None and found.run_id == run.run_id
    assert fence == task.fence and [e.seq for e in history] == [1]
    assert idle(run.run_id, ["another queue"]) == (None, [], None)
    assert idle("no such run", [queue]) == (None, [], None)
    engine.signal(run.run_id, "go", "!")  # work waiting: ready again
    assert idle(run.run_id, [queue]) == (None, [], None)
