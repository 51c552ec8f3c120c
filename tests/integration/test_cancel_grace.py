"""Cancellation is cooperative, and bounded: a cancelled run whose code goes on (cleaning
up) past the engine's `cancel_grace` ends `cancelled` anyway, by a durable timer.

The activities here block on a `threading.Event` and never heartbeat: the kind of
code a cancellation cannot reach. The tests release them once the run has ended.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import waypost as wp
from tests.helpers import eventually, of_type, until_event
from tests.helpers.gates import gate
from tests.helpers.store import fire_far_in_the_future, open_tasks, violations
from waypost.cli.main import main
from waypost.model.chain import verify_chain
from waypost.testing.replay import replay_history

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name
pytestmark = pytest.mark.timeout(120)


@wp.activity(retry=wp.Retry(max_attempts=1))
def stubborn(ctx: wp.ActivityContext, label: str) -> str:
    """A sync activity without heartbeats: it neither sees nor obeys a cancellation."""
    gate(f"{label}-started").set()
    gate(label).wait(60)
    return f"done {label}"


@wp.workflow(name="grace_cleanup")
async def cleans_up(ctx: wp.WorkflowContext, label: str) -> str:
    try:
        await ctx.wait_signal("go")
    except asyncio.CancelledError:
        await ctx.run(stubborn, label)  # the clean-up never returns in time
        raise
    return "went"


@wp.workflow(name="grace_direct")
async def awaits_directly(ctx: wp.WorkflowContext, label: str) -> str:
    result: str = await ctx.run(stubborn, label)
    return result


@wp.workflow(name="grace_patient")
async def waits_for_ack(ctx: wp.WorkflowContext, _: Any) -> str:
    try:
        await ctx.wait_signal("go")
    except asyncio.CancelledError:
        await ctx.wait_signal("ack")  # nobody acknowledges
        raise
    return "went"


def grace_events(history: list[wp.Event]) -> list[tuple[str, str]]:
    return [
        (e.type, e.data["step"])
        for e in history
        if e.type in ("TimerStarted", "TimerFired") and e.data["step"] == "cancel-grace"
    ]


def test_a_run_whose_clean_up_hangs_ends_cancelled_after_the_grace(
    make_engine: Any, db_url: str, label: str
) -> None:
    engine = make_engine(cleans_up, stubborn, cancel_grace=0.5)
    try:
        with engine.running():
            run = engine.start(cleans_up, label)
            eventually(
                lambda: "signal" in [w["kind"] for w in engine.get(run.run_id).waiting_for],
                "the run to wait",
            )
            engine.cancel(run.run_id, "stop now")
            assert gate(f"{label}-started").wait(10)
            with pytest.raises(wp.WorkflowCancelled) as ended:
                engine.result(run.run_id, timeout=20)
            ended_history = engine.history(run.run_id)
            # Nothing of the run is left to run or fire, while its attempt still runs.
            assert open_tasks(db_url, run.run_id) == []
            assert fire_far_in_the_future(db_url) == []
            gate(label).set()
            late = until_event(
                engine, run.run_id, "LateResultIgnored", "the late result of the clean-up"
            )
    finally:
        gate(label).set()
    assert ended.value.error == {
        "type": "Cancelled",
        "message": "stop now",
        "details": {"forced": True, "after": 0.5},
    }
    end = ended_history[-1]
    assert end.type == "RunCancelled"
    assert end.data == {"reason": "stop now", "forced": True, "after": 0.5}
    (requested,) = of_type(ended_history, "CancelRequested")
    assert requested.data == {"reason": "stop now", "grace": 0.5}
    assert grace_events(ended_history) == [
        ("TimerStarted", "cancel-grace"),
        ("TimerFired", "cancel-grace"),
    ]
    (timer,) = [
        e for e in of_type(ended_history, "TimerStarted") if e.data["step"] == "cancel-grace"
    ]
    assert timer.data["fire_at"] == pytest.approx(requested.ts + 0.5, abs=0.5)
    assert of_type(ended_history, "ActivityCompleted") == []
    assert late[0].data["step"] == of_type(ended_history, "ActivityScheduled")[0].data["step"]
    history = engine.history(run.run_id)
    assert history[-1].type == "LateResultIgnored"  # audit only: the run stays cancelled
    assert engine.get(run.run_id).status == wp.RunStatus.CANCELLED
    assert verify_chain(history, run=("default", run.run_id)) == []
    # The ended history replays against the code without a mismatch.
    assert replay_history(cleans_up, ended_history).ok
    assert violations(db_url) == []


def test_code_that_awaits_a_hung_activity_ends_at_once_and_keeps_its_late_result(
    make_engine: Any, label: str
) -> None:
    engine = make_engine(awaits_directly, stubborn, cancel_grace=60)
    try:
        with engine.running():
            run = engine.start(awaits_directly, label)
            assert gate(f"{label}-started").wait(10)
            engine.cancel(run.run_id, "not needed")
            with pytest.raises(wp.WorkflowCancelled) as ended:
                engine.result(run.run_id, timeout=10)
            gate(label).set()
            until_event(engine, run.run_id, "LateResultIgnored", "the late result")
    finally:
        gate(label).set()
    # The await is where the code is cancelled: no clean-up, no grace needed.
    assert ended.value.error == {"type": "Cancelled", "message": "not needed"}
    history = engine.history(run.run_id)
    assert grace_events(history) == []
    assert of_type(history, "ActivityCancelRequested")
    assert of_type(history, "ActivityCompleted") == []


@contextmanager
def waiting_for_ack(make_engine: Any, grace: float | None) -> Iterator[tuple[Any, Any]]:
    """A running engine with this cancel grace, and a run of `waits_for_ack` that waits."""
    engine = make_engine(waits_for_ack, cancel_grace=grace)
    with engine.running():
        run = engine.start(waits_for_ack, None)
        eventually(lambda: engine.get(run.run_id).waiting_for, "the run to wait")
        yield engine, run


def test_clean_up_that_ends_within_the_grace_ends_the_run_as_before(make_engine: Any) -> None:
    with waiting_for_ack(make_engine, 60) as (engine, run):
        engine.cancel(run.run_id, "tidy up")
        info = eventually(
            lambda: (
                (i := engine.get(run.run_id))
                and any(w.get("step") == "cancel-grace" for w in i.waiting_for)
                and i
            ),
            "the grace to show among what the run waits for",
        )
        grace = next(w for w in info.waiting_for if w.get("step") == "cancel-grace")
        assert "ends cancelled" in grace["purpose"]
        engine.signal(run.run_id, "ack")
        with pytest.raises(wp.WorkflowCancelled) as ended:
            engine.result(run.run_id, timeout=10)
    assert ended.value.error == {"type": "Cancelled", "message": "tidy up"}
    history = engine.history(run.run_id)
    assert grace_events(history) == [("TimerStarted", "cancel-grace")]
    assert "forced" not in history[-1].data


def test_without_a_grace_clean_up_may_take_as_long_as_it_needs(make_engine: Any) -> None:
    with waiting_for_ack(make_engine, None) as (engine, run):
        engine.cancel(run.run_id, "whenever")
        eventually(
            lambda: [w.get("name") for w in engine.get(run.run_id).waiting_for] == ["ack"],
            "the clean-up to wait for its ack",
        )
        assert of_type(engine.history(run.run_id), "CancelRequested")[0].data == {
            "reason": "whenever"
        }
        engine.signal(run.run_id, "ack")
        with pytest.raises(wp.WorkflowCancelled):
            engine.result(run.run_id, timeout=10)
    assert grace_events(engine.history(run.run_id)) == []


def test_the_grace_is_durable_another_engine_ends_the_run_after_a_restart(
    make_engine: Any, db_url: str
) -> None:
    first = make_engine(waits_for_ack, cancel_grace=3.0)
    with first.running():
        run = first.start(waits_for_ack, None)
        eventually(lambda: first.get(run.run_id).waiting_for, "the run to wait")
        first.cancel(run.run_id, "shut it")
        eventually(
            lambda: grace_events(first.history(run.run_id)), "the grace's timer to be stored"
        )
    first.close()
    # An engine with another setting: the grace recorded with the request is what counts.
    second = make_engine(waits_for_ack, cancel_grace=3600)
    assert second.get(run.run_id).status == wp.RunStatus.WAITING  # not ended by the first
    with second.running(), pytest.raises(wp.WorkflowCancelled) as ended:
        second.result(run.run_id, timeout=20)
    assert ended.value.error["details"] == {"forced": True, "after": 3.0}
    assert grace_events(second.history(run.run_id)) == [
        ("TimerStarted", "cancel-grace"),
        ("TimerFired", "cancel-grace"),
    ]


def test_a_paused_run_starts_its_grace_when_it_is_resumed(make_engine: Any) -> None:
    with waiting_for_ack(make_engine, 0.3) as (engine, run):
        engine.pause(run.run_id, "look first")
        engine.cancel(run.run_id, "then stop")
        # Paused: the code has not learnt of the cancel, so its grace has not begun.
        history = engine.history(run.run_id)
        assert history[-1].type == "CancelRequested"
        assert grace_events(history) == []
        engine.resume(run.run_id, "go on")
        with pytest.raises(wp.WorkflowCancelled) as ended:
            engine.result(run.run_id, timeout=20)
    assert ended.value.error["details"] == {"forced": True, "after": 0.3}
    history = engine.history(run.run_id)
    (resumed,) = of_type(history, "RunResumed")
    (timer,) = [e for e in of_type(history, "TimerStarted") if e.data["step"] == "cancel-grace"]
    assert timer.seq > resumed.seq


@pytest.mark.parametrize("grace", [-1, float("inf"), float("nan")])
def test_a_grace_must_be_a_finite_duration(grace: float, tmp_path: Path) -> None:
    with pytest.raises(wp.ConfigurationError, match="cancel_grace"):
        wp.Engine(f"sqlite:///{tmp_path / 'waypost.db'}", cancel_grace=grace)


@wp.workflow(name="grace_sleeper")
async def sleeper(ctx: wp.WorkflowContext, _: Any) -> None:
    await ctx.sleep(3600)


def test_a_tenant_at_its_timer_quota_can_still_cancel(make_engine: Any) -> None:
    engine = make_engine(
        sleeper, waits_for_ack, cancel_grace=0.3, quotas=wp.Quotas(max_pending_timers=1)
    )
    with engine.running():
        asleep = engine.start(sleeper, None)  # holds the tenant's only timer
        eventually(lambda: engine.get(asleep.run_id).waiting_for, "the sleeper to sleep")
        run = engine.start(waits_for_ack, None)
        eventually(lambda: engine.get(run.run_id).waiting_for, "the run to wait")
        engine.cancel(run.run_id, "over quota")
        with pytest.raises(wp.WorkflowCancelled) as ended:
            engine.result(run.run_id, timeout=20)
    assert ended.value.error["details"] == {"forced": True, "after": 0.3}


def test_the_command_line_gives_its_grace_with_the_request(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    with wp.Engine(db) as engine:
        engine.register(waits_for_ack)
        runs = [engine.start(waits_for_ack, None).run_id for _ in range(3)]

    def cancel(run_id: str, *grace: str) -> Any:
        args = ["cancel", run_id, "--reason", "cli", *grace, "--db", db]
        return CliRunner().invoke(main, args)

    assert cancel(runs[0], "--grace", "0.5").exit_code == 0
    assert cancel(runs[1], "--grace", "none").exit_code == 0
    for bad in ("-1", "soon", "inf"):
        refused = cancel(runs[2], "--grace", bad)
        assert refused.exit_code == 2 and "--grace" in refused.output, refused.output
    assert cancel(runs[2]).exit_code == 0  # the default
    with wp.Engine(db) as engine:
        recorded = [of_type(engine.history(r), "CancelRequested") for r in runs]
    assert [[e.data for e in events] for events in recorded] == [
        [{"reason": "cli", "grace": 0.5}],
        [{"reason": "cli"}],
        [{"reason": "cli", "grace": 30.0}],
    ]


def test_a_cancel_over_http_gets_the_servers_grace_and_refusals_write_nothing(
    make_engine: Any, serve: Any
) -> None:
    engine = make_engine(waits_for_ack, cancel_grace=0.3)
    with engine.running():
        base = serve(engine)
        ops_key = make_key(engine, "acme", "olga", "operator")
        viewer_key = make_key(engine, "acme", "vic", "viewer")
        other_key = make_key(engine, "globex", "gus", "admin")
        run = engine.start(waits_for_ack, None, tenant="acme")
        eventually(lambda: engine.get(run.run_id, tenant="acme").waiting_for, "the run to wait")
        url = f"/v1/runs/{run.run_id}/cancel"
        with Api(base, viewer_key) as viewer, Api(base, other_key) as other:
            assert viewer.post(url, json={"reason": "peek"}).status_code == 403
            assert other.post(url, json={"reason": "mine"}).status_code == 404
        with Api(base, ops_key) as operator:
            assert operator.post(url, json={}).status_code == 422
            assert operator.post(url, json={"reason": "x\x00y"}).status_code == 422
            assert of_type(engine.history(run.run_id, tenant="acme"), "CancelRequested") == []
            assert operator.post(url, json={"reason": "over http"}).status_code == 202
        with pytest.raises(wp.WorkflowCancelled) as ended:
            engine.result(run.run_id, timeout=20, tenant="acme")
    assert ended.value.error == {
        "type": "Cancelled",
        "message": "over http",
        "details": {"forced": True, "after": 0.3},
    }
    (requested,) = of_type(engine.history(run.run_id, tenant="acme"), "CancelRequested")
    assert requested.data == {"reason": "over http", "grace": 0.3}


def test_many_runs_paused_cancelled_and_resumed_at_once_all_end_cancelled(
    make_engine: Any,
) -> None:
    # Resuming drops the engine's cached instance of the run while the workflow task the
    # cancel request claimed may be holding it: that task must replay, not decide from
    # the dropped instance (which, cleared, once left runs `waiting` on nothing).
    engine = make_engine(waits_for_ack, cancel_grace=0.3)

    def one(_: int) -> str:
        run = engine.start(waits_for_ack, None)
        eventually(lambda: engine.get(run.run_id).waiting_for, "the run to wait")
        engine.pause(run.run_id, "look first")
        engine.cancel(run.run_id, "then stop")
        engine.resume(run.run_id, "go on")
        try:
            engine.result(run.run_id, timeout=30)
        except wp.WorkflowCancelled:
            return "cancelled"
        return engine.get(run.run_id).status.value

    with engine.running(), ThreadPoolExecutor(8) as pool:
        ends = Counter(pool.map(one, range(200)))
    assert ends == {"cancelled": 200}
