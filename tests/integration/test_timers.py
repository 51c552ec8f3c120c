"""Durable timers: they fire once, not early, not when cancelled, across engines."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

import waypost as wp
from tests.helpers import eventually, of_type, until_event
from tests.helpers.store import fire_far_in_the_future
from waypost.model.chain import verify_chain
from waypost.model.events import EventType, NewEvent
from waypost.store import open_store
from waypost.store.base import FiredTimer, NewRun, NewTimer, RunCommit
from waypost.store.effects import StartTimers

T = TypeVar("T")
T0 = 1_700_000_000.0


# == two stores on one file ==================================================


def test_two_stores_firing_at_the_same_moment_fire_each_timer_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'timers.db'}"
    runs = [f"r{i}" for i in range(30)]
    rounds = 4

    async def setup() -> None:
        store = open_store(url)
        await store.open()
        try:
            for run_id in runs:
                started = NewEvent(EventType.RUN_STARTED, {"workflow": "wf"}, T0)
                await store.create_run(NewRun("default", run_id, "wf", "1", None, T0, started))
                for r in range(rounds):
                    step = f"t{r}"
                    res = await store.commit_run(
                        RunCommit(
                            "default",
                            run_id,
                            [NewEvent(EventType.TIMER_STARTED, {"step": step}, T0)],
                            T0,
                            effects=(StartTimers([NewTimer(step, T0 + r)]),),
                        )
                    )
                    assert res.ok
        finally:
            await store.close()

    asyncio.run(setup())
    stores = [open_store(url), open_store(url)]
    for s in stores:
        asyncio.run(s.open())
    fired: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def fire(barrier: threading.Barrier, store: Any, owner: str | None, now: float) -> None:
        async def go() -> list[FiredTimer]:
            barrier.wait(5)  # both schedulers fire at the same moment
            return await store.fire_due_timers(now, 1000, owner, ["wf@1"], 30.0)

        try:
            got = asyncio.run(go())
        except BaseException as exc:
            errors.append(exc)
            return
        with lock:
            fired.extend((t.run_id, t.step) for t in got)

    try:
        for r in range(rounds):
            barrier = threading.Barrier(2)
            threads = [
                threading.Thread(target=fire, args=(barrier, stores[0], "w1", T0 + r)),
                threading.Thread(target=fire, args=(barrier, stores[1], None, T0 + r)),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert errors == []
            due = sorted((run_id, f"t{k}") for run_id in runs for k in range(r + 1))
            assert sorted(fired) == due  # each due timer exactly once, so far
    finally:
        for s in stores:
            asyncio.run(s.close())

    async def check() -> None:
        store = open_store(url)
        await store.open()
        try:
            for run_id in runs:
                history = await store.load_history("default", run_id)
                assert verify_chain(history, run=("default", run_id)) == []
                fired_steps = [e.data["step"] for e in history if e.type == "TimerFired"]
                assert sorted(fired_steps) == [f"t{r}" for r in range(rounds)]
        finally:
            await store.close()

    asyncio.run(check())


# == through engines ==========================================================


@wp.workflow(name="timer_nap")
async def napper(ctx: wp.WorkflowContext, seconds: float) -> dict[str, float]:
    before = ctx.now().timestamp()
    await ctx.sleep(timedelta(seconds=seconds))
    after = ctx.now().timestamp()
    return {"before": before, "after": after}


@wp.workflow(name="timer_two_naps")
async def two_naps(ctx: wp.WorkflowContext, seconds: float) -> int:
    await asyncio.gather(ctx.sleep(seconds), ctx.sleep(seconds * 1.5))
    await ctx.sleep(seconds / 2)
    return 3


def test_sleep_wakes_the_run_after_its_duration_not_before(make_engine: Any) -> None:
    engine = make_engine(napper)
    with engine.running():
        handle = engine.start(napper, 0.5)
        got = handle.result(timeout=10)
    assert got["after"] - got["before"] >= 0.5
    history = engine.history(handle.run_id)
    (started,) = of_type(history, "TimerStarted")
    (fired,) = of_type(history, "TimerFired")
    assert started.data["duration"] == 0.5
    assert started.data["fire_at"] == pytest.approx(started.ts + 0.5, abs=0.05)
    assert fired.ts >= started.data["fire_at"]
    assert fired.data["step"] == started.data["step"]
    assert verify_chain(history, run=("default", handle.run_id)) == []


def test_two_engines_on_one_file_fire_each_timer_once(make_engine: Any) -> None:
    a = make_engine(two_naps, napper)
    b = make_engine(two_naps, napper)
    with a.running(), b.running():
        handles = [(a if i % 2 else b).start(two_naps, 0.3) for i in range(6)]
        handles += [(b if i % 2 else a).start(napper, 0.3) for i in range(4)]
        for h in handles:
            h.result(timeout=15)
    for h in handles:
        history = a.history(h.run_id)
        started = [e.data["step"] for e in of_type(history, "TimerStarted")]
        fired = [e.data["step"] for e in of_type(history, "TimerFired")]
        assert sorted(fired) == sorted(started)
        assert len(started) in (1, 3)
        assert verify_chain(history, run=("default", h.run_id)) == []


@wp.workflow(name="timer_signal_or_timeout")
async def signal_or_timeout(ctx: wp.WorkflowContext, seconds: float) -> Any:
    try:
        got = await ctx.wait_signal("go", timeout=timedelta(seconds=seconds))
    except wp.WaitTimeout as exc:
        got = f"timed out: {exc}"
    await ctx.wait_signal("finish")
    return got


def test_a_signal_wait_times_out_once(make_engine: Any) -> None:
    engine = make_engine(signal_or_timeout)
    with engine.running():
        handle = engine.start(signal_or_timeout, 0.3)
        until_event(engine, handle.run_id, "TimerFired", "the timeout to fire")
        handle.signal("finish")
        got = handle.result(timeout=10)
    assert got.startswith("timed out: no signal 'go'")
    history = engine.history(handle.run_id)
    (started,) = of_type(history, "TimerStarted")
    (fired,) = of_type(history, "TimerFired")
    assert fired.ts >= started.data["fire_at"]


def test_a_cancelled_timer_does_not_fire(make_engine: Any, db_url: str) -> None:
    engine = make_engine(signal_or_timeout)
    with engine.running():
        handle = engine.start(signal_or_timeout, 60)
        eventually(
            lambda: any(w["kind"] == "signal" for w in engine.get(handle.run_id).waiting_for),
            "the run to wait for the signal",
        )
        handle.signal("go", "in time")
        until_event(engine, handle.run_id, "TimerCancelled", "the timeout timer to be cancelled")
        # Even a scheduler an hour ahead finds nothing to fire.
        assert fire_far_in_the_future(db_url) == []
        assert of_type(engine.history(handle.run_id), "TimerFired") == []
        handle.signal("finish")
        assert handle.result(timeout=10) == "in time"
    history = engine.history(handle.run_id)
    (started,) = of_type(history, "TimerStarted")
    (cancelled,) = of_type(history, "TimerCancelled")
    assert cancelled.data["step"] == started.data["step"]
    assert of_type(history, "TimerFired") == []


def test_a_timer_started_under_one_engine_fires_under_another(make_engine: Any) -> None:
    first = make_engine(napper)
    with first.running():
        handle = first.start(napper, 1.0)
        until_event(first, handle.run_id, "TimerStarted", "the timer to start")
    info = first.get(handle.run_id)
    assert info.status == wp.RunStatus.WAITING
    assert [w["kind"] for w in info.waiting_for] == ["timer"]
    second = make_engine(napper)
    with second.running():
        got = second.result(handle.run_id, timeout=10)
    assert got["after"] - got["before"] >= 1.0
    assert len(of_type(second.history(handle.run_id), "TimerFired")) == 1


def test_timers_of_many_runs_all_fire(make_engine: Any) -> None:
    engine = make_engine(napper)
    label = uuid.uuid4().hex[:8]
    with engine.running():
        handles = [engine.start(napper, 0.2 + i / 100, run_id=f"{label}-{i}") for i in range(20)]
        for h in handles:
            got = h.result(timeout=15)
            assert got["after"] - got["before"] >= 0.2
    for h in handles:
        assert len(of_type(engine.history(h.run_id), "TimerFired")) == 1


@wp.workflow(name="timer_nap_until")
async def nap_until(ctx: wp.WorkflowContext, at: float) -> None:
    await ctx.sleep(at - ctx.now().timestamp())


def test_a_timer_set_while_the_timer_loop_sleeps_long_fires_on_time(make_engine: Any) -> None:
    """The timer loop sleeps until the next due timer (here one due in a minute, with
    polls 30 s apart); a timer set meanwhile, due sooner, wakes it."""
    engine = make_engine(napper, poll_interval=30.0)
    with engine.running():
        far = engine.start(napper, 60.0)
        eventually(lambda: bool(engine.get(far.run_id).waiting_for), timeout=10)
        near = engine.start(napper, 0.3)
        near.result(timeout=20)
    history = engine.history(near.run_id)
    (started,) = of_type(history, "TimerStarted")
    (fired,) = of_type(history, "TimerFired")
    # Seconds at most on a loaded machine; without the wake-up, a minute.
    assert 0.0 <= fired.ts - started.data["fire_at"] < 5.0


def test_a_burst_of_timers_due_at_one_moment_fires_each_once(make_engine: Any) -> None:
    """More timers due at once than one firing transaction takes: they fire in several
    transactions (at once, on PostgreSQL), each exactly once, none early."""
    engine = make_engine(nap_until)
    label = uuid.uuid4().hex[:8]
    with engine.running():
        at = time.time() + 5.0
        handles = [engine.start(nap_until, at, run_id=f"{label}-{i}") for i in range(100)]
        for h in handles:
            h.result(timeout=60)
    for h in handles:
        history = engine.history(h.run_id)
        (started,) = of_type(history, "TimerStarted")
        (fired,) = of_type(history, "TimerFired")
        assert fired.ts >= started.data["fire_at"]
        assert verify_chain(history, run=("default", h.run_id)) == []


def test_an_unexpected_error_in_the_timer_loop_does_not_stop_the_engines_timers(
    make_engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug met by one pass of the timer loop (here the store's admission pass raising
    something that is not a StoreError, once) is logged, and the timers go on firing."""
    engine = make_engine(napper)
    store = engine.aio.store
    real = store.admit_enqueued
    raised: list[bool] = []

    async def broken_once(now: float) -> bool:
        if not raised:
            raised.append(True)
            raise RuntimeError("a bug in one pass")
        return await real(now)

    store.admit_enqueued = broken_once  # type: ignore[method-assign]
    with engine.running():
        slept = engine.start(napper, 0.3).result(timeout=20)
    assert slept["after"] - slept["before"] >= 0.3
    assert raised == [True]
    assert "the timer loop failed unexpectedly" in caplog.text
