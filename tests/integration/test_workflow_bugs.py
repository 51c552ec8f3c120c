"""Workflow-code errors on both stores: a bug suspends the run, a fix and `resume`
complete it; a business failure (wp.Failure, a declared type, an uncaught activity
error) fails it; a workflow task that keeps killing its engine is suspended as poison.

The code fix is played as a deploy is: a second engine on the same database with the
fixed workflow (same name and version), then an operator's `resume`.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, of_type, until_event
from tests.helpers.cli import waypost_on
from waypost.testing import Crash, NoFaults, TestClock

from .server_fixtures import run_commanders, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)

HERE = os.path.basename(__file__)


def line_of(fn: Any, text: str) -> str:
    source, first = inspect.getsourcelines(fn)
    (n,) = [first + i for i, line in enumerate(source) if text in line]
    return f"{HERE}:{n}"


@wp.activity
def fetch_order(ctx: wp.ActivityContext, order_id: str) -> dict[str, str]:
    fetched.append(order_id)
    return {"id": order_id, "sku": "red-shoes"}


fetched: list[str] = []


@wp.activity
def ship(ctx: wp.ActivityContext, sku: str) -> str:
    return f"shipped {sku}"


@wp.workflow(name="bug_order")
async def buggy(ctx: wp.WorkflowContext, order_id: str) -> str:
    order = await ctx.run(fetch_order, order_id)
    return await ctx.run(ship, order["product"])  # the bug: the field is "sku"


@wp.workflow(name="bug_order")
async def still_buggy(ctx: wp.WorkflowContext, order_id: str) -> str:
    order = await ctx.run(fetch_order, order_id)
    return await ctx.run(ship, order["sku"] + 1)  # a different bug


@wp.workflow(name="bug_order")
async def fixed(ctx: wp.WorkflowContext, order_id: str) -> str:
    order = await ctx.run(fetch_order, order_id)
    return await ctx.run(ship, order["sku"])


def status(engine: wp.Engine, run_id: str, tenant: str | None = None) -> str:
    kw = {} if tenant is None else {"tenant": tenant}
    return str(engine.get(run_id, **kw).status)


def suspended_by_bug(make_engine: Any, run_id: str, tenant: str = "default") -> wp.Engine:
    """Run `buggy` until it is suspended; the engine is stopped (as before a deploy)."""
    engine = make_engine(buggy, fetch_order, ship)
    with engine.running():
        engine.start(buggy, run_id, run_id=run_id, tenant=tenant)
        eventually(lambda: status(engine, run_id, tenant) == "suspended", "the suspension")
    return engine


def test_a_bug_suspends_the_run_and_a_fix_and_resume_complete_it(
    make_engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    run_id = f"bug-{uuid.uuid4().hex[:8]}"
    first = suspended_by_bug(make_engine, run_id)
    info = first.get(run_id)
    assert info.error is not None
    assert info.error["type"] == "KeyError" and info.error["bug"] is True
    assert info.error["message"] == "'product'"
    assert info.error["site"] == line_of(buggy, 'order["product"]')
    assert info.error["file"] == HERE
    assert "Traceback" in info.error["traceback"]
    (wait,) = info.waiting_for
    assert wait["kind"] == "operator"
    assert "KeyError" in wait["detail"] and "resume" in wait["detail"]
    types = [e.type for e in first.history(run_id)]
    assert types == ["RunStarted", "ActivityScheduled", "ActivityCompleted", "RunSuspended"]
    # result() keeps waiting for a suspended run, as for any run not ended.
    with pytest.raises(wp.ResultTimeout, match="still suspended") as waited:
        first.result(run_id, timeout=0.3)
    assert "KeyError at " + line_of(buggy, 'order["product"]') in str(waited.value)
    (said,) = [r.getMessage() for r in caplog.records if "suspending run" in r.getMessage()]
    assert said.endswith("KeyError at " + line_of(buggy, 'order["product"]') + ": 'product'")
    assert "resume it" in str(waited.value)
    assert [r.run_id for r in first.list_runs(status="suspended")] == [run_id]

    # A deploy that is still wrong: resumed, the run is suspended again with the new error.
    second = make_engine(still_buggy, fetch_order, ship)
    with second.running():
        second.resume(run_id, "deployed a fix")
        eventually(
            lambda: len(of_type(second.history(run_id), "RunSuspended")) == 2,
            "the second suspension",
        )
    info = second.get(run_id)
    assert info.error is not None and info.error["type"] == "TypeError"
    assert info.error["site"] == line_of(still_buggy, 'order["sku"] + 1')

    # The real fix: resumed, the run goes on from its last recorded step.
    third = make_engine(fixed, fetch_order, ship)
    with third.running():
        third.resume(run_id, "deployed the real fix")
        assert third.result(run_id, timeout=10) == "shipped red-shoes"
    history = third.history(run_id)
    assert fetched.count(run_id) == 1  # the step before the bug ran once
    resumed = of_type(history, "RunResumed")
    assert [e.data["status_before"] for e in resumed] == ["suspended", "suspended"]
    assert [e.data["reason"] for e in resumed] == ["deployed a fix", "deployed the real fix"]
    assert all(e.data["status_after"] == "running" for e in resumed)
    assert history[-1].type == "RunCompleted"
    assert third.verify(run_id) == []
    assert third.get(run_id).error is None


class OutOfStock(Exception):
    pass


@wp.activity(retry=wp.Retry(max_attempts=1))
def declined(ctx: wp.ActivityContext) -> None:
    raise RuntimeError("card declined")


@wp.workflow(name="bug_failing", failure_types=(OutOfStock,))
async def failing(ctx: wp.WorkflowContext, how: str) -> None:
    if how == "failure":
        raise wp.Failure("no stock", type="NoStock", details={"sku": "red-shoes"})
    if how == "declared":
        raise OutOfStock("red shoes")
    await ctx.run(declined)


@pytest.mark.parametrize(
    ("how", "kind", "details"),
    [
        ("failure", "NoStock", {"sku": "red-shoes"}),
        ("declared", "OutOfStock", None),
        ("activity", "ActivityError", None),
    ],
)
def test_a_business_failure_fails_the_run(
    make_engine: Any, how: str, kind: str, details: Any
) -> None:
    engine = make_engine(failing, declined)
    with engine.running():
        run = engine.start(failing, how)
        with pytest.raises(wp.WorkflowFailed) as err:
            run.result(timeout=10)
    assert err.value.type == kind
    assert err.value.error.get("details") == details
    assert of_type(engine.history(run.run_id), "RunSuspended") == []


def test_resume_of_a_suspended_run_refusals(make_engine: Any) -> None:
    run_id = "bug-refused"
    engine = suspended_by_bug(make_engine, run_id)
    for bad in ("", "x" * 100_000, "a\x00b"):
        with pytest.raises(wp.InvalidRequest):
            engine.resume(run_id, bad)
    with pytest.raises(wp.RunNotFound):
        engine.resume(run_id, "not yours", tenant="elsewhere")
    with pytest.raises(wp.InvalidState, match="suspended"):
        engine.pause(run_id, "cannot hold what does not run")
    assert of_type(engine.history(run_id), "RunResumed") == []  # refusals wrote nothing
    assert status(engine, run_id) == "suspended"
    engine.terminate(run_id, "giving up")
    with pytest.raises(wp.RunNotActive):
        engine.resume(run_id, "too late")


def test_over_http_an_operator_resumes_a_suspended_run(make_engine: Any, serve: Any) -> None:
    run_id = "bug-http"
    suspended_by_bug(make_engine, run_id, tenant="acme")
    engine = make_engine(fixed, fetch_order, ship)
    with engine.running():
        base = serve(engine)
        with run_commanders(engine, base, "admin") as (operator, starter, outsider):
            url = f"/v1/runs/{run_id}/resume"
            assert starter.post(url, json={"reason": "x"}).status_code == 403
            assert outsider.post(url, json={"reason": "x"}).status_code == 404
            assert operator.post(url, json={}).status_code == 422
            assert status(engine, run_id, "acme") == "suspended"
            ok = operator.post(url, json={"reason": "fixed in 1.2.1"})
            assert ok.status_code == 202, ok.text
            assert engine.result(run_id, timeout=10, tenant="acme") == "shipped red-shoes"
            again = operator.post(url, json={"reason": "again"})
            assert again.status_code == 409 and again.json()["error"]["code"] == "run_not_active"
    (resumed,) = of_type(engine.history(run_id, tenant="acme"), "RunResumed")
    assert resumed.data["by"] == "olga" and resumed.data["status_before"] == "suspended"


def test_the_cli_lists_suspended_runs_and_resumes_one(make_engine: Any, db_url: str) -> None:
    run_id = "bug-cli"
    suspended_by_bug(make_engine, run_id)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return waypost_on(db_url, "runs", *args)

    listed = cli("list", "--status", "suspended")
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout
    engine = make_engine(fixed, fetch_order, ship)
    with engine.running():
        done = cli("resume", run_id, "--reason", "fixed the field name")
        assert done.returncode == 0, done.stderr
        assert engine.result(run_id, timeout=10) == "shipped red-shoes"
    assert cli("list", "--status", "suspended").stdout.count(run_id) == 0
    again = cli("resume", run_id, "--reason", "again")
    assert again.returncode != 0


# == poison runs: a workflow task that keeps killing its engine =====================


class DiesWhileDeciding(NoFaults):
    """A fault plan: while armed, every decision commit of a workflow task crashes the
    engine first (as a process killed while running the workflow code would)."""

    def __init__(self) -> None:
        self.armed = True
        self.crashes = 0

    def hit(self, point: str) -> None:
        if point != "commit:before" or not self.armed:
            return
        if sys._getframe(2).f_code.co_name == "commit_decisions":
            self.crashes += 1
            raise Crash("injected: the engine dies while the workflow code runs")


@wp.workflow(name="bug_poison")
async def poison(ctx: wp.WorkflowContext) -> str:
    await ctx.sleep(timedelta(seconds=1))
    return "survived"


def test_a_workflow_task_whose_lease_keeps_lapsing_is_suspended_as_poison(
    make_engine: Any, db_url: str
) -> None:
    clock = TestClock()
    faults = DiesWhileDeciding()
    engine = make_engine(poison, clock=clock, faults=faults, max_lapses=3, lease=1.0)
    with engine.running():
        run = engine.start(poison)
        for crashes in (1, 2, 3):  # the first processing, then two claims of the lapsed task
            eventually(lambda n=crashes: faults.crashes == n, f"crash {crashes}")
            clock.advance(70)  # past the lease and the back-off of a lapsed task
        eventually(lambda: status(engine, run.run_id) == "suspended", "the suspension")
        assert faults.crashes == 3
        info = engine.get(run.run_id)
        assert info.error is not None and info.error["type"] == "PoisonRun"
        assert info.error["lapses"] == 3 and info.error["step"] == "workflow task"
        assert "lost its engine 3 times" in info.error["message"]
        assert [r.run_id for r in engine.list_runs(status="suspended")] == [run.run_id]
        # Nothing is dropped: the run keeps its workflow task, idle until resumed.
        query = "SELECT state FROM tasks WHERE run_id = ? AND kind = 'workflow'"
        assert db_query(db_url, query, (run.run_id,)) == [("idle",)]
        history = engine.history(run.run_id)
        assert [e.type for e in history] == ["RunStarted", "RunSuspended"]
        assert history[-1].data["error"]["lapses"] == 3
        faults.armed = False  # the cause is found and removed
        engine.resume(run.run_id, "the worker's memory limit is raised")
        until_event(engine, run.run_id, "TimerStarted", "the timer")
        clock.advance(2)
        assert engine.result(run.run_id, timeout=10) == "survived"


# == poison runs: an activity step whose attempts keep losing their engine ============


class StallsAttempts(NoFaults):
    """A fault plan: the first `times` attempts stop (no lease renewals) for `seconds`,
    as a worker frozen or dying under them; their lease lapses."""

    def __init__(self, times: int, seconds: float) -> None:
        self.times = times
        self.seconds = seconds

    def pause(self, fault: str) -> float:
        if fault != "activity:stall" or self.times <= 0:
            return 0.0
        self.times -= 1
        return self.seconds


@wp.activity(retry=wp.Retry(max_attempts=10, initial_interval=timedelta(milliseconds=10)))
def stalled(ctx: wp.ActivityContext) -> int:
    return ctx.attempt


@wp.workflow(name="bug_poison_step")
async def poison_step(ctx: wp.WorkflowContext) -> int:
    return int(await ctx.run(stalled))


def test_an_activity_step_that_keeps_losing_its_engine_is_held_and_resumed(
    make_engine: Any,
) -> None:
    faults = StallsAttempts(times=2, seconds=3.0)
    engine = make_engine(poison_step, stalled, faults=faults, max_lapses=2, lease=0.5)
    with engine.running():
        run = engine.start(poison_step)
        eventually(lambda: status(engine, run.run_id) == "suspended", "the suspension")
        info = engine.get(run.run_id)
        assert info.error is not None and info.error["type"] == "PoisonRun"
        assert info.error["step"] == "1" and info.error["lapses"] == 2
        history = engine.history(run.run_id)
        lost = of_type(history, "ActivityFailed")
        assert [e.data["attempt"] for e in lost] == [1, 2]
        assert all(e.data["retrying"] for e in lost)  # the step is not failed
        assert history[-1].type == "RunSuspended"
        engine.resume(run.run_id, "the worker pool is healthy again")
        assert engine.result(run.run_id, timeout=15) == 3  # the step ran on
    history = engine.history(run.run_id)
    assert of_type(history, "RunFailed") == []
    assert engine.verify(run.run_id) == []
