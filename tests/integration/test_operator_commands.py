"""Operator commands on both stores: terminate, pause and resume, through every door."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type, until_event
from tests.helpers.approvals import credential_statuses
from tests.helpers.calls import calls_of, record
from tests.helpers.cli import waypost_on
from tests.helpers.gates import gate, pass_gate
from tests.helpers.store import fire_far_in_the_future, open_tasks
from waypost.features.senders import FileSender
from waypost.model.chain import verify_chain

from .server_fixtures import run_commanders, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="op_waiter")
async def waiter(ctx: wp.WorkflowContext, _: Any) -> list[Any]:
    got, _slept = await asyncio.gather(ctx.wait_signal("go"), ctx.sleep(timedelta(seconds=1)))
    return [got, "slept"]


@wp.workflow(name="op_long_waiter")
async def long_waiter(ctx: wp.WorkflowContext, _: Any) -> str:
    await asyncio.gather(ctx.wait_signal("never"), ctx.sleep(timedelta(hours=1)))
    return "woke"


@wp.activity(retry=wp.Retry(max_attempts=1))
def gated(ctx: wp.ActivityContext, label: str) -> str:
    record(label, f"gated {ctx.attempt}")
    pass_gate(label)
    return "done"


@wp.activity(retry=wp.Retry(max_attempts=1))
def compensate(ctx: wp.ActivityContext, label: str) -> str:
    record(label, "compensate")
    return "undone"


@wp.activity(retry=wp.Retry(max_attempts=1))
def after(ctx: wp.ActivityContext, label: str) -> str:
    record(label, "after")
    return "after"


@wp.workflow(name="op_two_steps")
async def two_steps(ctx: wp.WorkflowContext, label: str) -> list[str]:
    try:
        first = await ctx.run(gated, label)
    except asyncio.CancelledError:
        await ctx.run(compensate, label)
        raise
    second = await ctx.run(after, label)
    return [first, second]


@wp.workflow(name="op_approval")
async def approval_flow(ctx: wp.WorkflowContext) -> str:
    decision = await ctx.approval("boss", approvers=wp.AnyOf(users=["ann"]))
    return decision.outcome


def status_of(engine: wp.Engine, run_id: str) -> str:
    return str(engine.get(run_id).status)


def wait_status(engine: wp.Engine, run_id: str, status: str) -> None:
    eventually(lambda: status_of(engine, run_id) == status, f"the run to be {status}")


# == pause and resume ============================================================


def test_a_paused_run_holds_a_signal_and_a_timer_until_resumed(make_engine: Any) -> None:
    engine = make_engine(waiter)
    with engine.running():
        run = engine.start(waiter, None)
        wait_status(engine, run.run_id, "waiting")
        engine.pause(run.run_id, "investigating")
        info = engine.get(run.run_id)
        assert info.status == wp.RunStatus.PAUSED
        assert info.next_action is not None and info.next_action["kind"] == "paused"
        assert info.waiting_for[0]["kind"] == "paused"
        engine.signal(run.run_id, "go", {"n": 1})
        history = eventually(
            lambda: (h := engine.history(run.run_id)) and of_type(h, "TimerFired") and h,
            "the timer to fire while paused",
        )
        assert of_type(history, "SignalReceived")
        # Both are recorded, and held: the code took in neither.
        assert status_of(engine, run.run_id) == "paused"
        assert engine.get(run.run_id).waiting_for[0]["kind"] == "paused"
        assert not of_type(engine.history(run.run_id), "RunCompleted")

        with pytest.raises(wp.InvalidState):
            engine.pause(run.run_id, "again")
        engine.resume(run.run_id, "all clear")
        assert engine.result(run.run_id, timeout=10) == [{"n": 1}, "slept"]
        with pytest.raises(wp.RunNotActive):
            engine.resume(run.run_id, "late")
    history = engine.history(run.run_id)
    (paused,) = of_type(history, "RunPaused")
    (resumed,) = of_type(history, "RunResumed")
    assert paused.data == {
        "by": paused.data["by"],
        "reason": "investigating",
        "status_before": "waiting",
        "status_after": "paused",
    }
    assert paused.data["by"]  # the local principal: the OS user
    assert resumed.data["reason"] == "all clear"
    assert (resumed.data["status_before"], resumed.data["status_after"]) == ("paused", "running")
    types = [e.type for e in history]
    assert types.index("RunPaused") < types.index("TimerFired") < types.index("RunResumed")
    assert verify_chain(history, run=("default", run.run_id)) == []


def test_resume_and_pause_refusals(make_engine: Any) -> None:
    engine = make_engine(long_waiter)
    with engine.running():
        run = engine.start(long_waiter, None)
        wait_status(engine, run.run_id, "waiting")
        with pytest.raises(wp.InvalidState, match="neither paused nor suspended"):
            engine.resume(run.run_id, "nothing to resume")
        with pytest.raises(wp.RunNotFound):
            engine.pause("no-such-run", "x")
        with pytest.raises(wp.RunNotFound):
            engine.pause(run.run_id, "other tenant", tenant="elsewhere")
        with pytest.raises(wp.InvalidRequest):
            engine.pause(run.run_id, "")
        with pytest.raises(wp.InvalidRequest):
            engine.terminate(run.run_id, "x" * 100_000)
        # Refusals wrote nothing.
        assert not of_type(engine.history(run.run_id), "RunResumed")
        assert not of_type(engine.history(run.run_id), "RunPaused")
        engine.cancel(run.run_id, "done with it")
        with pytest.raises(wp.WorkflowCancelled):
            engine.result(run.run_id, timeout=10)
        for command in (engine.pause, engine.resume, engine.terminate):
            with pytest.raises(wp.RunNotActive):
                command(run.run_id, "too late")


@contextmanager
def inside_the_first_step(make_engine: Any, label: str) -> Iterator[tuple[Any, Any]]:
    """A running engine and a run of `two_steps` whose first step's attempt has begun."""
    engine = make_engine(two_steps, gated, compensate, after)
    with engine.running():
        run = engine.start(two_steps, label)
        assert gate(label + "-started").wait(20)
        yield engine, run


def test_a_paused_run_records_a_running_attempt_but_starts_nothing_new(
    make_engine: Any, label: str
) -> None:
    with inside_the_first_step(make_engine, label) as (engine, run):
        engine.pause(run.run_id, "hold on")
        gate(label).set()
        until_event(
            engine, run.run_id, "ActivityCompleted", "the running attempt's result to be recorded"
        )
        # The result is recorded but not acted on: no next step is scheduled.
        assert status_of(engine, run.run_id) == "paused"
        assert len(of_type(engine.history(run.run_id), "ActivityScheduled")) == 1
        assert "after" not in calls_of(label)
        engine.resume(run.run_id, "go on")
        assert engine.result(run.run_id, timeout=10) == ["done", "after"]
    assert calls_of(label) == ["gated 1", "after"]


# == terminate ===================================================================


def test_terminate_ends_at_once_without_compensation_and_keeps_a_late_result(
    make_engine: Any, db_url: str, label: str
) -> None:
    with inside_the_first_step(make_engine, label) as (engine, run):
        engine.terminate(run.run_id, "runaway")
        info = engine.get(run.run_id)
        assert info.status == wp.RunStatus.TERMINATED
        assert info.error == {"type": "Terminated", "message": "runaway"}
        assert info.finished_at is not None
        with pytest.raises(wp.WorkflowTerminated, match="runaway"):
            engine.result(run.run_id, timeout=5)
        gate(label).set()
        late = until_event(engine, run.run_id, "LateResultIgnored", "the late result to be kept")
        assert late[0].data["outcome"] == "completed"
        with pytest.raises(wp.RunNotActive):
            engine.terminate(run.run_id, "twice")
    assert status_of(engine, run.run_id) == "terminated"
    assert calls_of(label) == ["gated 1"]  # no compensation, nothing after
    history = engine.history(run.run_id)
    (ended,) = of_type(history, "RunTerminated")
    assert {k: ended.data[k] for k in ("reason", "status_before", "status_after")} == {
        "reason": "runaway",
        "status_before": "running",
        "status_after": "terminated",
    }
    assert ended.data["by"]
    assert not of_type(history, "ActivityCompleted")
    assert open_tasks(db_url, run.run_id) == []


def test_terminate_kills_timers_and_a_paused_run_can_be_terminated(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(long_waiter)
    with engine.running():
        run = engine.start(long_waiter, None)
        wait_status(engine, run.run_id, "waiting")
        engine.pause(run.run_id, "first look")
        engine.terminate(run.run_id, "give up")
        with pytest.raises(wp.WorkflowTerminated):
            engine.result(run.run_id, timeout=5)
    (ended,) = of_type(engine.history(run.run_id), "RunTerminated")
    assert (ended.data["status_before"], ended.data["status_after"]) == ("paused", "terminated")
    assert open_tasks(db_url, run.run_id) == []
    assert fire_far_in_the_future(db_url) == []


def test_terminate_kills_approval_credentials(make_engine: Any, tmp_path: Path) -> None:
    path = tmp_path / "notifications.jsonl"
    engine = make_engine(approval_flow, notifier=FileSender(path))
    with engine.running():
        run = engine.start(approval_flow)
        approval = eventually(lambda: engine.approvals(run_id=run.run_id), "the approval")[0]

        def note() -> Any:
            import json

            if not path.exists():
                return None
            lines = [json.loads(x) for x in path.read_text().splitlines()]
            return next((n for n in lines if n["approval_id"] == approval.approval_id), None)

        ann = eventually(note, "ann's notification")
        engine.terminate(run.run_id, "order withdrawn")
        with pytest.raises(wp.InvalidCredential):
            engine.decide(approval.approval_id, ann["approve_token"], "ann", "approve")
        assert engine.approval(approval.approval_id).status == "cancelled"
    assert credential_statuses(engine, approval.approval_id) == [("revoked",)]


# == HTTP and the CLI =============================================================


def test_over_http_an_operator_may_and_a_starter_may_not(make_engine: Any, serve: Any) -> None:
    engine = make_engine(long_waiter)
    with engine.running():
        base = serve(engine)
        with run_commanders(engine, base, "operator") as (operator, starter, outsider):
            run = engine.start(long_waiter, None, tenant="acme")
            wait_status_t = lambda s: eventually(  # noqa: E731
                lambda: str(engine.get(run.run_id, tenant="acme").status) == s, s
            )
            wait_status_t("waiting")
            for command in ("pause", "resume", "terminate"):
                refused = starter.post(f"/v1/runs/{run.run_id}/{command}", json={"reason": "x"})
                assert refused.status_code == 403, refused.text
                hidden = outsider.post(f"/v1/runs/{run.run_id}/{command}", json={"reason": "x"})
                assert hidden.status_code == 404, hidden.text
                missing = operator.post(f"/v1/runs/nope/{command}", json={"reason": "x"})
                assert missing.status_code == 404
                assert hidden.json()["error"]["code"] == missing.json()["error"]["code"]
            wrong = operator.post(f"/v1/runs/{run.run_id}/resume", json={"reason": "x"})
            assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "invalid_state"
            no_reason = operator.post(f"/v1/runs/{run.run_id}/pause", json={})
            assert no_reason.status_code == 422
            ok = operator.post(f"/v1/runs/{run.run_id}/pause", json={"reason": "look"})
            assert ok.status_code == 202 and ok.json() == {"run_id": run.run_id, "accepted": True}
            wait_status_t("paused")
            assert (
                operator.post(f"/v1/runs/{run.run_id}/pause", json={"reason": "x"}).status_code
                == 409
            )
            ok = operator.post(f"/v1/runs/{run.run_id}/resume", json={"reason": "fine"})
            assert ok.status_code == 202
            wait_status_t("waiting")
            ok = operator.post(f"/v1/runs/{run.run_id}/terminate", json={"reason": "stop"})
            assert ok.status_code == 202
            wait_status_t("terminated")
            gone = operator.post(f"/v1/runs/{run.run_id}/terminate", json={"reason": "again"})
            assert gone.status_code == 409 and gone.json()["error"]["code"] == "run_not_active"
    history = engine.history(run.run_id, tenant="acme")
    assert [e.data["by"] for e in history if e.type in ("RunPaused", "RunTerminated")] == [
        "olga",
        "olga",
    ]


def test_the_cli_pauses_resumes_and_terminates(make_engine: Any, db_url: str) -> None:
    engine = make_engine(long_waiter)
    run = engine.start(long_waiter, None)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return waypost_on(db_url, "runs", *args)

    done = cli("pause", run.run_id, "--reason", "by hand")
    assert done.returncode == 0, done.stderr
    assert status_of(engine, run.run_id) == "paused"
    again = cli("pause", run.run_id, "--reason", "by hand")
    assert again.returncode != 0 and "already paused" in again.stderr
    assert cli("resume", run.run_id, "--reason", "ok").returncode == 0
    missing = cli("terminate", run.run_id)
    assert missing.returncode != 0  # --reason is required
    assert cli("terminate", run.run_id, "--reason", "stop").returncode == 0
    assert status_of(engine, run.run_id) == "terminated"
    types = [e.type for e in engine.history(run.run_id)]
    assert types[-3:] == ["RunPaused", "RunResumed", "RunTerminated"]
