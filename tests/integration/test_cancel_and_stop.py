"""Cancelling runs, and stopping engines without re-running or losing work."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

import waypost as wp
from tests.helpers import eventually, of_type, until_event
from tests.helpers.gates import gate
from tests.helpers.store import fire_far_in_the_future, open_tasks
from tests.helpers.workers import signalled_at_the_end, worker_process
from waypost.model.chain import verify_chain

T = TypeVar("T")

_lock = threading.Lock()
calls: dict[str, list[dict[str, Any]]] = {}


def record(label: str, **what: Any) -> None:
    with _lock:
        calls.setdefault(label, []).append({"at": time.time(), **what})


def calls_of(label: str, name: str) -> list[dict[str, Any]]:
    with _lock:
        return [c for c in calls.get(label, []) if c.get("name") == name]


# == cancellation =============================================================


@wp.workflow(name="cancel_waiter")
async def waiter(ctx: wp.WorkflowContext, _: Any) -> str:
    await asyncio.gather(ctx.wait_signal("never"), ctx.sleep(timedelta(hours=1)))
    return "woke"


def test_cancelling_a_waiting_run_ends_it_cancelled(make_engine: Any, db_url: str) -> None:
    engine = make_engine(waiter)
    with engine.running():
        handle = engine.start(waiter, None)
        eventually(
            lambda: engine.get(handle.run_id).status == wp.RunStatus.WAITING, "the run to wait"
        )
        handle.cancel("customer asked")
        with pytest.raises(wp.WorkflowCancelled) as err:
            handle.result(timeout=10)
    assert "customer asked" in str(err.value)
    info = engine.get(handle.run_id)
    assert info.status == wp.RunStatus.CANCELLED
    assert info.error == {"type": "Cancelled", "message": "customer asked"}
    assert info.finished_at is not None
    history = engine.history(handle.run_id)
    types = [e.type for e in history]
    assert types[-1] == "RunCancelled"
    (requested,) = of_type(history, "CancelRequested")
    assert requested.data["reason"] == "customer asked"
    assert len(of_type(history, "TimerCancelled")) == 1
    assert verify_chain(history, run=("default", handle.run_id)) == []
    # Nothing is left to run or fire.
    assert open_tasks(db_url, handle.run_id) == []
    assert fire_far_in_the_future(db_url) == []
    assert of_type(engine.history(handle.run_id), "TimerFired") == []


@wp.activity(retry=wp.Retry(max_attempts=1))
def long_job(ctx: wp.ActivityContext, label: str) -> str:
    record(label, name="long_job", attempt=ctx.attempt)
    gate(label).set()
    saw_cancelled = False
    raised: BaseException | None = None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        saw_cancelled = saw_cancelled or ctx.cancelled
        try:
            ctx.heartbeat({"label": label})
        except wp.ActivityCancelled as exc:
            raised = exc
            break
        time.sleep(0.02)
    record(label, name="long_job_end", saw_cancelled=saw_cancelled, raised=raised)
    if raised is not None:
        raise raised
    return "finished"


@wp.activity
def never_started(ctx: wp.ActivityContext, label: str) -> str:
    record(label, name="never_started")
    return "ran"


@wp.workflow(name="cancel_two_jobs")
async def two_jobs(ctx: wp.WorkflowContext, label: str) -> list[str]:
    return list(await asyncio.gather(ctx.run(long_job, label), ctx.run(never_started, label)))


@contextmanager
def long_job_running(make_engine: Any, flow: Any, label: str) -> Iterator[tuple[Any, Any]]:
    """A running engine with one activity slot, and a run of `flow` whose `long_job`
    holds that slot."""
    engine = make_engine(flow, long_job, never_started, max_activities=1)
    with engine.running():
        handle = engine.start(flow, label)
        assert gate(label).wait(10)
        yield engine, handle


def test_cancel_drops_work_not_started_and_tells_running_activities(
    make_engine: Any, db_url: str, label: str
) -> None:
    # One activity slot: long_job takes it, never_started waits in the queue.
    with long_job_running(make_engine, two_jobs, label) as (engine, handle):
        tasks = open_tasks(db_url, handle.run_id)
        queued = [t for t in tasks if t.kind == "activity" and t.queue == "never_started"]
        assert [t.owner for t in queued] == [None]  # ready, not started

        handle.cancel("stop everything")
        with pytest.raises(wp.WorkflowCancelled):
            handle.result(timeout=10)
        (end,) = eventually(lambda: calls_of(label, "long_job_end"), "long_job to stop")
        # The late report of the cancelled attempt is only an audit fact.
        until_event(engine, handle.run_id, "LateResultIgnored", "the cancelled attempt's report")
    assert end["saw_cancelled"] is True
    assert isinstance(end["raised"], wp.ActivityCancelled)
    assert calls_of(label, "never_started") == []
    assert len(calls_of(label, "long_job")) == 1
    assert open_tasks(db_url, handle.run_id) == []
    history = engine.history(handle.run_id)
    scheduled = {e.data["step"] for e in of_type(history, "ActivityScheduled")}
    cancel_requested = {e.data["step"] for e in of_type(history, "ActivityCancelRequested")}
    assert cancel_requested == scheduled
    assert of_type(history, "ActivityCompleted") == []
    assert engine.get(handle.run_id).status == wp.RunStatus.CANCELLED
    assert verify_chain(history, run=("default", handle.run_id)) == []


@wp.workflow(name="cancel_careful")
async def careful(ctx: wp.WorkflowContext, label: str) -> list[str]:
    try:
        return list(await asyncio.gather(ctx.run(long_job, label), ctx.run(never_started, label)))
    except asyncio.CancelledError:
        await ctx.wait_signal("ack")  # clean up before ending cancelled
        raise


def test_a_running_activity_is_asked_to_stop_while_the_run_cleans_up(
    make_engine: Any, db_url: str, label: str
) -> None:
    with long_job_running(make_engine, careful, label) as (engine, handle):
        handle.cancel("cleanup first")
        eventually(
            lambda: (
                [(w["kind"], w.get("step")) for w in engine.get(handle.run_id).waiting_for]
                == [("signal", None), ("timer", "cancel-grace")]
            ),
            "the workflow to wait for its ack, within the cancel grace",
        )
        # The queued step is gone at once; the running one is flagged ...
        tasks = open_tasks(db_url, handle.run_id)
        assert [t.queue for t in tasks if t.kind == "activity"] in (["long_job"], [])
        assert all(t.cancel_requested for t in tasks if t.kind == "activity")
        # ... and its attempt hears of it (heartbeat raises) and ends.
        (end,) = eventually(lambda: calls_of(label, "long_job_end"), "long_job to stop")
        failed = until_event(
            engine, handle.run_id, "ActivityFailed", "the stopped attempt's failure"
        )
        assert [t.kind for t in open_tasks(db_url, handle.run_id)] == ["workflow"]
        handle.signal("ack")
        with pytest.raises(wp.WorkflowCancelled, match="cleanup first"):
            handle.result(timeout=10)
    assert end["saw_cancelled"] is True
    assert isinstance(end["raised"], wp.ActivityCancelled)
    assert [(e.data["error"]["type"], e.data["retrying"]) for e in failed] == [
        ("ActivityCancelled", False)
    ]
    assert calls_of(label, "never_started") == []
    history = engine.history(handle.run_id)
    assert of_type(history, "LateResultIgnored") == []
    assert history[-1].type == "RunCancelled"


def test_cancel_needs_a_reason_and_an_active_run(make_engine: Any) -> None:
    engine = make_engine(waiter)
    handle = engine.start(waiter, None)
    before = engine.history(handle.run_id)
    for reason in ("", "   ", None):
        with pytest.raises(ValueError, match="reason"):
            engine.cancel(handle.run_id, reason)
    assert engine.history(handle.run_id) == before
    with pytest.raises(wp.RunNotFound, match="missing"):
        engine.cancel("missing", "why not")

    engine.cancel(handle.run_id, "first")
    with engine.running():
        with pytest.raises(wp.WorkflowCancelled):
            handle.result(timeout=10)
        finished = engine.history(handle.run_id)
        with pytest.raises(wp.RunNotActive, match="finished"):
            engine.cancel(handle.run_id, "second")
    assert engine.history(handle.run_id) == finished
    assert [e.data["reason"] for e in of_type(finished, "CancelRequested")] == ["first"]


def test_a_cancel_made_while_no_engine_serves_is_carried_out_later(make_engine: Any) -> None:
    first = make_engine(waiter)
    with first.running():
        handle = first.start(waiter, None)
        eventually(
            lambda: first.get(handle.run_id).status == wp.RunStatus.WAITING, "the run to wait"
        )
    first.cancel(handle.run_id, "while nobody serves")
    assert first.get(handle.run_id).status == wp.RunStatus.WAITING
    second = make_engine(waiter)
    with second.running(), pytest.raises(wp.WorkflowCancelled, match="while nobody serves"):
        second.result(handle.run_id, timeout=10)
    assert first.history(handle.run_id)[-1].type == "RunCancelled"


# == graceful stop ============================================================


@wp.activity(timeout=timedelta(seconds=30))
def slow_step(ctx: wp.ActivityContext, label: str) -> str:
    record(label, name="slow_step", attempt=ctx.attempt, phase="start")
    gate(label).set()
    # Keep working until the engine has begun to stop, and a little beyond.
    assert gate(f"{label}-stopping").wait(10)
    time.sleep(0.3)
    record(label, name="slow_step_end", attempt=ctx.attempt)
    return f"slow {label}"


@wp.activity(timeout=timedelta(seconds=30))
async def slow_step_async(ctx: wp.ActivityContext, label: str) -> str:
    record(label, name="slow_step", attempt=ctx.attempt, phase="start")
    gate(label).set()
    assert await asyncio.to_thread(gate(f"{label}-stopping").wait, 10)
    await asyncio.sleep(0.3)
    record(label, name="slow_step_end", attempt=ctx.attempt)
    return f"slow {label}"


@wp.activity
def next_step(ctx: wp.ActivityContext, label: str) -> str:
    record(label, name="next_step", attempt=ctx.attempt)
    return f"next {label}"


@wp.workflow(name="stop_two_steps")
async def two_steps(ctx: wp.WorkflowContext, args: dict[str, str]) -> list[str]:
    first = slow_step_async if args["kind"] == "async" else slow_step
    a = await ctx.run(first, args["label"])
    b = await ctx.run(next_step, args["label"])
    return [a, b]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_leaving_running_lets_an_activity_finish_and_commit(
    make_engine: Any, label: str, kind: str
) -> None:
    items = (two_steps, slow_step, slow_step_async, next_step)
    first = make_engine(*items)
    with first.running():
        handle = first.start(two_steps, {"kind": kind, "label": label})
        assert gate(label).wait(10)
        stop_began = time.time()
        gate(f"{label}-stopping").set()
    # The block has ended: the attempt ended inside it and its result is committed.
    (end,) = calls_of(label, "slow_step_end")
    assert end["at"] > stop_began
    history = first.history(handle.run_id)
    completed = of_type(history, "ActivityCompleted")
    assert [e.data["result"] for e in completed] == [f"slow {label}"]
    assert first.get(handle.run_id).status == wp.RunStatus.RUNNING  # next step queued
    assert calls_of(label, "next_step") == []

    second = make_engine(*items)
    with second.running():
        assert second.result(handle.run_id, timeout=10) == [f"slow {label}", f"next {label}"]
    assert len(calls_of(label, "slow_step")) == 1  # never run twice
    assert len(calls_of(label, "next_step")) == 1
    history = second.history(handle.run_id)
    assert of_type(history, "ActivityFailed") == []
    assert of_type(history, "LateResultIgnored") == []
    assert verify_chain(history, run=("default", handle.run_id)) == []


@wp.activity
def mark(ctx: wp.ActivityContext, folder: str, name: str) -> int:
    (Path(folder) / f"{ctx.run_id}-{name}-attempt-{ctx.attempt}-pid-{os.getpid()}").touch()
    return os.getpid()


@wp.workflow(name="stop_signal_between")
async def signal_between(ctx: wp.WorkflowContext, folder: str) -> dict[str, Any]:
    before = await ctx.run(mark, folder, "before")
    payload = await ctx.wait_signal("go")
    after = await ctx.run(mark, folder, "after")
    return {"before": before, "payload": payload, "after": after}


def waiting_for_go(engine: Any, folder: str) -> Any:
    """A run of `signal_between` that waits for its signal (the engine runs meanwhile)."""
    with engine.running():
        handle = engine.start(signal_between, folder)
        eventually(
            lambda: engine.get(handle.run_id).status == wp.RunStatus.WAITING,
            "the run to wait for its signal",
        )
    return handle


def test_a_second_engine_continues_a_run_started_by_the_first(
    make_engine: Any, tmp_path: Path
) -> None:
    first = make_engine(signal_between, mark)
    handle = waiting_for_go(first, str(tmp_path))
    first.close()
    second = make_engine(signal_between, mark)
    with second.running():
        second.signal(handle.run_id, "go", {"from": "second"})
        got = second.result(handle.run_id, timeout=10)
    assert got == {"before": os.getpid(), "payload": {"from": "second"}, "after": os.getpid()}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(handle.run_id)) == [
        f"{handle.run_id}-after-attempt-1-pid-{os.getpid()}",
        f"{handle.run_id}-before-attempt-1-pid-{os.getpid()}",
    ]
    assert verify_chain(second.history(handle.run_id), run=("default", handle.run_id)) == []


def test_a_worker_process_continues_runs_and_stops_cleanly_on_sigterm(
    make_engine: Any, db_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "markers"
    folder.mkdir()
    engine = make_engine(signal_between, mark)
    waiting = waiting_for_go(engine, str(folder))
    queued = engine.start(signal_between, str(folder))  # nobody serves: it waits for a worker

    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = worker_process(db_url, __name__, log, "--lease", "2", "--grace", "5")
        with signalled_at_the_end(worker, signal.SIGTERM, wait=15):
            engine.signal(waiting.run_id, "go", "from the test")
            got = engine.result(waiting.run_id, timeout=20)
            eventually(
                lambda: engine.get(queued.run_id).status == wp.RunStatus.WAITING,
                "the queued run to reach its signal",
                timeout=20,
            )
            engine.signal(queued.run_id, "go", 2)
            got2 = engine.result(queued.run_id, timeout=20)
        code = worker.returncode
    output = log_path.read_text()
    assert code == 0, output
    assert got == {"before": os.getpid(), "payload": "from the test", "after": worker.pid}
    assert got2 == {"before": worker.pid, "payload": 2, "after": worker.pid}
    # Each step of each run ran once, where the results say it did.
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [
            f"{waiting.run_id}-before-attempt-1-pid-{os.getpid()}",
            f"{waiting.run_id}-after-attempt-1-pid-{worker.pid}",
            f"{queued.run_id}-before-attempt-1-pid-{worker.pid}",
            f"{queued.run_id}-after-attempt-1-pid-{worker.pid}",
        ]
    )
    for handle in (waiting, queued):
        assert verify_chain(engine.history(handle.run_id), run=("default", handle.run_id)) == []
