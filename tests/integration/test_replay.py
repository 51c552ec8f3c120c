"""Replay on a real engine: replaying every step agrees with a cached run, and drifted code
suspends a run instead of advancing it."""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually
from waypost.model.events import COMMAND_EVENTS, Event

HERE = os.path.basename(__file__)


def site(fn: Callable[..., Any], text: str) -> str:
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, line in enumerate(lines) if text in line]
    assert hits, f"{text!r} not in {fn.__name__}"
    return f"{HERE}:{hits[0]}"


def waiting_for(engine: wp.Engine, run_id: str, kind: str, **match: Any) -> bool:
    info = engine.get(run_id)
    return any(
        w.get("kind") == kind and all(w.get(k) == v for k, v in match.items())
        for w in info.waiting_for
    )


# == one workflow, replayed at every step or kept in the cache ===========================

starts: dict[str, int] = {}
replays_seen: dict[str, set[bool]] = {}
cleanups: list[str] = []


@pytest.fixture(autouse=True)
def _fresh_records() -> None:
    """Each test (and each store it runs on) starts with empty records."""
    starts.clear()
    replays_seen.clear()
    cleanups.clear()


lock = threading.Lock()


@wp.activity
def square(ctx: wp.ActivityContext, x: int) -> int:
    return x * x


@wp.activity
async def shout(ctx: wp.ActivityContext, word: str, delay: float) -> str:
    await asyncio.sleep(delay)
    return word.upper()


@wp.workflow(name="replay_mix")
async def replay_mix(ctx: wp.WorkflowContext, n: int) -> dict[str, Any]:
    with lock:
        starts[ctx.run_id] = starts.get(ctx.run_id, 0) + 1
        replays_seen.setdefault(ctx.run_id, set()).add(ctx.is_replaying)
    first = await ctx.run(square, n)
    words = await asyncio.gather(ctx.run(shout, "a", 0.0), ctx.run(shout, "b", 0.02))

    async def branch(k: int) -> int:
        v = await ctx.run(square, k)
        await ctx.sleep(0.02)
        return int(v) + 1

    branches = await asyncio.gather(branch(2), branch(3))
    await ctx.sleep(0.03)
    stamp = ctx.now()
    ident = ctx.uuid()
    newer = ctx.patched("mix-v2")
    total = 0

    def on_add(v: int) -> None:
        nonlocal total
        total += v

    ctx.on_signal("add", on_add)
    go = await ctx.wait_signal("go", timeout=60)
    timed_out = await ctx.wait_condition(lambda: total >= 5, timeout=60)
    last = await ctx.run(square, total)
    return {
        "first": first,
        "words": words,
        "branches": branches,
        "stamp_type": type(stamp).__name__,
        "uuid_version": ident.version,
        "newer": newer,
        "go": go,
        "timed_out": timed_out,
        "last": last,
    }


def drive_mix(engine: wp.Engine, run_id: str) -> Any:
    engine.start(replay_mix, 4, run_id=run_id)
    eventually(lambda: waiting_for(engine, run_id, "signal", name="go"), what="the wait for 'go'")
    engine.signal(run_id, "go", {"now": True})
    eventually(lambda: waiting_for(engine, run_id, "condition"), what="the condition wait")
    engine.signal(run_id, "add", 2)
    engine.signal(run_id, "add", 3)
    return engine.result(run_id, timeout=20)


def shape(events: list[Event]) -> dict[str, Any]:
    """What replay must reproduce: the commands with their content and the event that
    caused each, and the set of all events by (type, step). Timestamps, run-specific
    keys and recorded random values are left out; so is the interleaving of parallel
    completions, which depends on thread timing, not on replay."""
    by_seq = {e.seq: e for e in events}

    def ident(e: Event) -> tuple[Any, ...]:
        d = e.data
        return (str(e.type), d.get("step"), d.get("name"), d.get("change_id"))

    commands = []
    for e in events:
        if e.type in COMMAND_EVENTS:
            d = e.data
            cause = by_seq[d["cause"]]
            commands.append(
                (
                    ident(e),
                    d.get("activity"),
                    d.get("args"),
                    d.get("kind"),
                    d.get("duration"),
                    d.get("site"),
                    ident(cause),
                )
            )
    return {
        "commands": sorted(commands, key=repr),
        "command_steps_in_order": [
            e.data.get("step") for e in events if e.type in COMMAND_EVENTS and "step" in e.data
        ],
        "events": sorted((ident(e) for e in events), key=repr),
        "first": str(events[0].type),
        "last": str(events[-1].type),
    }


def test_replaying_every_step_gives_the_same_result_and_history_as_the_cache(
    make_engine: Any,
) -> None:
    cached = make_engine(replay_mix, square, shout)
    uncached = make_engine(replay_mix, square, shout, cache_size=0)
    with cached.running():
        result_cached = drive_mix(cached, "mix-cached")
    with uncached.running():
        result_uncached = drive_mix(uncached, "mix-uncached")

    expected = {
        "first": 16,
        "words": ["A", "B"],
        "branches": [5, 10],
        "stamp_type": "datetime",
        "uuid_version": 4,
        "newer": True,
        "go": {"now": True},
        "timed_out": False,
        "last": 25,
    }
    assert result_cached == expected
    assert result_uncached == expected

    h_cached = cached.history("mix-cached")
    h_uncached = uncached.history("mix-uncached")
    assert shape(h_cached) == shape(h_uncached)
    assert len(h_cached) == len(h_uncached)
    assert shape(h_uncached)["last"] == "RunCompleted"
    steps = [e.data["step"] for e in h_uncached if e.type == "ActivityScheduled"]
    assert steps == ["1", "2", "3", "4.1", "5.1", "11"]
    assert uncached.verify("mix-uncached") == []
    assert cached.verify("mix-cached") == []

    # The uncached engine really did rebuild the run from history, many times over.
    assert starts["mix-uncached"] >= 8
    assert replays_seen["mix-uncached"] == {False, True}
    assert starts["mix-cached"] < starts["mix-uncached"], starts


def test_a_replay_engine_takes_over_a_run_started_by_a_caching_engine(make_engine: Any) -> None:
    first = make_engine(replay_mix, square, shout)
    second = make_engine(replay_mix, square, shout, cache_size=0)
    run_id = "mix-handover"
    with first.running():
        first.start(replay_mix, 4, run_id=run_id)
        eventually(lambda: waiting_for(first, run_id, "signal", name="go"), what="'go' wait")
    before = len(first.history(run_id))
    with second.running():
        second.signal(run_id, "go", {"now": True})
        eventually(lambda: waiting_for(second, run_id, "condition"), what="condition wait")
        second.signal(run_id, "add", 5)
        result = second.result(run_id, timeout=20)
    assert result["last"] == 25
    assert result["go"] == {"now": True}
    history = second.history(run_id)
    assert len(history) > before
    assert not [e for e in history if e.type in ("RunSuspended", "RunFailed")]


# == drifted code suspends the run ===========================================================


@wp.workflow(name="drift", version="1")
async def drift_v1(ctx: wp.WorkflowContext, x: int) -> int:
    a = await ctx.run(square, x)
    await ctx.wait_signal("go")
    return int(await ctx.run(square, a))


@wp.workflow(name="drift", version="1")
async def drift_changed(ctx: wp.WorkflowContext, x: int) -> int:
    word = await ctx.run(shout, "changed", 0.0)
    await ctx.wait_signal("go")
    return len(word)


def waits_for_go(make_engine: Any, run_id: str) -> None:
    """Run `run_id` of `drift_v1`, on the code it started with, until it waits for 'go'."""
    original = make_engine(drift_v1, square, shout)
    with original.running():
        original.start(drift_v1, 3, run_id=run_id)
        eventually(lambda: waiting_for(original, run_id, "signal", name="go"), what="'go' wait")


def test_drifted_code_suspends_the_run_naming_the_event_and_the_line(make_engine: Any) -> None:
    run_id = "drift-1"
    waits_for_go(make_engine, run_id)

    changed = make_engine(drift_changed, square, shout, cache_size=0)
    with changed.running():
        changed.signal(run_id, "go")
        info = eventually(
            lambda: (i := changed.get(run_id)).status == wp.RunStatus.SUSPENDED and i,
            what="suspension",
        )
        assert info.error is not None
        assert info.error["type"] == "NondeterminismError"
        message = info.error["message"]
        assert "event 2 (ActivityScheduled square, step 1" in message
        assert f"from {site(drift_v1, 'ctx.run(square, x)')}" in message
        assert f"ctx.run(shout) at {site(drift_changed, 'ctx.run(shout')}" in message
        assert [w["kind"] for w in info.waiting_for] == ["operator"]
        # It does not advance: no step of the changed code runs, the run does not end,
        # and more events wake it only to find the same mismatch (recorded once).
        changed.signal(run_id, "go")  # wakes the run: its workflow task is due now

        def task_idle() -> bool:
            query = "SELECT state FROM tasks WHERE run_id = ? AND kind = 'workflow'"
            return db_query(changed.url, query, (run_id,)) == [("idle",)]

        eventually(task_idle, what="the engine to have looked at the run again")
        assert changed.get(run_id).status == wp.RunStatus.SUSPENDED
        history = changed.history(run_id)
    types = [e.type for e in history]
    assert types == [
        "RunStarted",
        "ActivityScheduled",
        "ActivityCompleted",
        "SignalReceived",
        "RunSuspended",
        "SignalReceived",
    ]
    assert history[-2].data["error"]["message"] == message
    assert changed.get(run_id).status == wp.RunStatus.SUSPENDED
    assert changed.verify(run_id) == []
    assert [r.run_id for r in changed.list_runs(status="suspended")] == [run_id]


@contextmanager
def suspended_by_changed_code(make_engine: Any, run_id: str) -> Iterator[Any]:
    """Run `run_id` of `drift_v1` until it waits for 'go'; then signal it on an engine of
    the changed code, which runs, until the run is suspended: yields that engine."""
    waits_for_go(make_engine, run_id)
    changed = make_engine(drift_changed, square, shout, cache_size=0)
    with changed.running():
        changed.signal(run_id, "go")
        eventually(lambda: changed.get(run_id).status == wp.RunStatus.SUSPENDED, what="suspension")
        yield changed


def test_a_suspended_run_resumes_once_matching_code_runs_it_and_an_operator_resumes_it(
    make_engine: Any,
) -> None:
    run_id = "drift-2"
    with suspended_by_changed_code(make_engine, run_id):
        pass  # the engine of the changed code stops
    fixed = make_engine(drift_v1, square, shout, cache_size=0)
    with fixed.running():
        # An event alone no longer wakes a suspended run: it waits in the history.
        fixed.signal(run_id, "nudge")
        with pytest.raises(wp.ResultTimeout, match="still suspended"):
            fixed.result(run_id, timeout=0.5)
        fixed.resume(run_id, reason="deployed the code that matches")
        assert fixed.result(run_id, timeout=10) == 81
    history = fixed.history(run_id)
    types = [e.type for e in history]
    (resumed,) = [e for e in history if e.type == "RunResumed"]
    assert resumed.data["status_before"] == "suspended"
    assert resumed.data["status_after"] == "running"
    assert types.index("RunResumed") > types.index("RunSuspended")
    assert types[-1] == "RunCompleted"
    assert fixed.get(run_id).status == wp.RunStatus.COMPLETED


def test_cancelling_a_suspended_run_ends_it(make_engine: Any) -> None:
    run_id = "drift-3"
    with suspended_by_changed_code(make_engine, run_id) as changed:
        changed.cancel(run_id, "code drifted")
        with pytest.raises(wp.WorkflowCancelled, match="code drifted"):
            changed.result(run_id, timeout=10)
    assert [e.type for e in changed.history(run_id)][-2:] == ["CancelRequested", "RunCancelled"]


# == cancellation, replayed ===================================================================


@wp.activity
def record_cleanup(ctx: wp.ActivityContext, run_id: str) -> str:
    with lock:
        cleanups.append(run_id)
    return "cleaned"


@wp.workflow(name="cancel_cleanup")
async def cancel_cleanup(ctx: wp.WorkflowContext, x: int) -> str:
    try:
        await ctx.run(square, x)
        await ctx.wait_signal("never", timeout=3600)
    except asyncio.CancelledError:
        await ctx.run(record_cleanup, ctx.run_id)
        raise
    return "not cancelled"


@pytest.mark.parametrize("cache_size", [0, 1000], ids=["replay-every-step", "cached"])
def test_cancellation_runs_cleanup_and_ends_cancelled(make_engine: Any, cache_size: int) -> None:
    engine = make_engine(cancel_cleanup, square, record_cleanup, cache_size=cache_size)
    run_id = f"cancel-{cache_size}"
    with engine.running():
        engine.start(cancel_cleanup, 2, run_id=run_id)
        eventually(lambda: waiting_for(engine, run_id, "signal", name="never"), what="wait")
        engine.cancel(run_id, "customer asked")
        with pytest.raises(wp.WorkflowCancelled, match="customer asked"):
            engine.result(run_id, timeout=10)
    assert cleanups.count(run_id) == 1
    history = engine.history(run_id)
    assert [(e.type, e.data.get("step")) for e in history] == [
        ("RunStarted", None),
        ("ActivityScheduled", "1"),
        ("ActivityCompleted", "1"),
        ("TimerStarted", "2"),
        ("CancelRequested", None),
        ("TimerCancelled", "2"),  # cancelled with the wait, before the cleanup runs
        ("ActivityScheduled", "3"),
        ("TimerStarted", "cancel-grace"),  # the cleanup goes on: the cancel grace starts
        ("ActivityCompleted", "3"),
        ("RunCancelled", None),
    ]
    assert history[-1].data["reason"] == "customer asked"
    info = engine.get(run_id)
    assert info.status == wp.RunStatus.CANCELLED
    assert engine.verify(run_id) == []


# == failures and timeouts, replayed ===========================================================


class Declined(Exception):
    pass


@wp.activity(
    retry=wp.Retry(
        max_attempts=2, initial_interval=timedelta(milliseconds=10), non_retryable=(Declined,)
    )
)
def decline(ctx: wp.ActivityContext, cents: int) -> str:
    raise Declined(f"{cents} declined")


@wp.workflow(name="setbacks")
async def setbacks(ctx: wp.WorkflowContext, cents: int) -> dict[str, Any]:
    try:
        await ctx.run(decline, cents)
        charged = "yes"
    except wp.ActivityError as err:
        charged = f"{err.type}: {err.message} after {err.attempts}"
    try:
        answer = await ctx.wait_signal("approve", timeout=0.05)
    except wp.WaitTimeout:
        answer = "timed out"
    met = await ctx.wait_condition(lambda: False, timeout=0.05)
    return {"charged": charged, "answer": answer, "condition_timed_out": met}


def test_failures_and_timeouts_replay_to_the_same_history(make_engine: Any) -> None:
    histories = []
    for cache_size in (0, 1000):
        engine = make_engine(setbacks, decline, cache_size=cache_size)
        run_id = f"setbacks-{cache_size}"
        with engine.running():
            engine.start(setbacks, 250, run_id=run_id)
            assert engine.result(run_id, timeout=10) == {
                "charged": "Declined: 250 declined after 1",
                "answer": "timed out",
                "condition_timed_out": True,
            }
        histories.append([(e.type, e.data.get("step")) for e in engine.history(run_id)])
    assert histories[0] == histories[1]
    assert histories[0] == [
        ("RunStarted", None),
        ("ActivityScheduled", "1"),
        ("ActivityFailed", "1"),
        ("TimerStarted", "2"),
        ("TimerFired", "2"),
        ("TimerStarted", "3"),
        ("TimerFired", "3"),
        ("RunCompleted", None),
    ]
