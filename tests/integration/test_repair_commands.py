"""Repair commands on both stores: retry, skip and update-input, through every door.

After each command the run is carried on by a fresh engine that keeps nothing in
memory (`cache_size=0`), so what it does next comes from replaying the history the
command left; the history's chain and the store's invariants are checked at the end.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type, until_event
from tests.helpers.breakage import broken_label, is_broken, mend
from tests.helpers.calls import calls_of, record
from tests.helpers.cli import waypost_on
from tests.helpers.flows import each_in_turn
from tests.helpers.gates import gate, pass_gate
from tests.helpers.store import open_tasks, violations
from tests.helpers.threads import in_threads
from waypost.model import operations as ops
from waypost.model.chain import verify_chain
from waypost.model.identity import Principal, Role
from waypost.testing import replay_history

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)

FAST = timedelta(milliseconds=10)


@pytest.fixture
def label() -> str:
    """A label whose `flaky` activity fails until the test mends it."""
    return broken_label()


@wp.activity(retry=wp.Retry(max_attempts=1))
def first(ctx: wp.ActivityContext, label: str) -> str:
    record(label, "first")
    return "one"


@wp.activity(retry=wp.Retry(max_attempts=2, initial_interval=FAST))
def flaky(ctx: wp.ActivityContext, label: str) -> dict[str, Any]:
    record(label, f"flaky {ctx.attempt}")
    if is_broken(label):
        raise RuntimeError("downstream is down")
    return {"attempt": ctx.attempt}


@wp.activity(retry=wp.Retry(max_attempts=1))
def gated(ctx: wp.ActivityContext, label: str) -> str:
    record(label, "gated")
    pass_gate(label)
    return "from the attempt"


@wp.activity(retry=wp.Retry(max_attempts=1))
def undo(ctx: wp.ActivityContext, label: str) -> str:
    record(label, "undo")
    return "undone"


@wp.workflow(name="rp_two_steps")
async def two_steps(ctx: wp.WorkflowContext, label: str) -> list[Any]:
    return await each_in_turn(ctx, (first, flaky), label)


@wp.workflow(name="rp_compensating")
async def compensating(ctx: wp.WorkflowContext, label: str) -> Any:
    await ctx.run(first, label)
    try:
        return await ctx.run(flaky, label)
    except wp.ActivityError:
        await ctx.run(undo, label)
        raise


@wp.workflow(name="rp_gated")
async def gated_flow(ctx: wp.WorkflowContext, label: str) -> list[Any]:
    return await each_in_turn(ctx, (gated, first), label)


@wp.workflow(name="rp_waiter")
async def waiter(ctx: wp.WorkflowContext, label: str) -> Any:
    return await ctx.wait_signal("go")


@wp.workflow(name="rp_parallel")
async def parallel(ctx: wp.WorkflowContext, label: str) -> list[Any]:
    # One branch fails while the other's attempt still runs and a timer is pending.
    got = await asyncio.gather(ctx.run(flaky, label), ctx.run(gated, label), ctx.sleep(0.3))
    return list(got)


CODE = (two_steps, compensating, gated_flow, waiter, parallel, first, flaky, gated, undo)

ORDER = """
name: rp_order
input:
  type: object
  required: [label, amount]
  properties:
    label: {type: string}
    amount: {type: number, minimum: 0}
    note: {type: string}
start: check
steps:
  check:
    type: activity
    activity: first
    input: {label: label}
    output: $.checked
    next: pay
  pay:
    type: activity
    activity: flaky
    input: {label: label}
    output: $.paid
    skippable: true
    next: done
  done:
    type: succeed
    output: "{checked: checked, paid: paid}"
"""

COMPENSATED = """
name: rp_compensated
start: check
steps:
  check:
    type: activity
    activity: first
    input: {label: label}
    compensate: {activity: undo, input: {label: label}}
    next: pay
  pay:
    type: activity
    activity: flaky
    input: {label: label}
"""

GIVE_UP = """
name: rp_give_up
start: check
steps:
  check:
    type: activity
    activity: first
    input: {label: label}
    next: stop
  stop:
    type: fail
    error: given_up
"""

SKIP_THEN_FAIL = """
name: rp_skip_then_fail
start: pay
steps:
  pay:
    type: activity
    activity: flaky
    input: {label: label}
    skippable: true
    compensate: {activity: undo, input: {label: label}}
    next: stop
  stop:
    type: fail
    error: stopped
"""

HOLD = """
name: rp_hold
input:
  type: object
  required: [label, amount]
  properties:
    label: {type: string}
    amount: {type: number, minimum: 0}
    note: {type: string}
  additionalProperties: false
start: wait
steps:
  wait:
    type: wait
    signal: go
    output: $.go
    next: done
  done:
    type: succeed
    output: "{amount: amount, note: note}"
"""


def replays(engine: wp.Engine, run_id: str, tenant: str = "default") -> None:
    """The run's history replays against the code, and its chain is intact."""
    history = engine.history(run_id, tenant=tenant)
    assert verify_chain(history, run=(tenant, run_id)) == []
    assert engine.verify(run_id, tenant=tenant) == []
    if "definition" not in history[0].data:
        result = replay_history(list(CODE), history, run_id=run_id, tenant=tenant)
        assert result.ok, result


def failed(engine: wp.Engine, run_id: str, tenant: str = "default") -> dict[str, Any]:
    with pytest.raises(wp.WorkflowFailed) as info:
        engine.result(run_id, timeout=20, tenant=tenant)
    return dict(info.value.error or {})


def as_operator(engine: wp.Engine, request: Any, tenant: str = "default") -> Any:
    return engine.execute(request, Principal(tenant, "olga", frozenset({Role.OPERATOR})))


# == retry =======================================================================


def test_retry_reruns_only_the_failed_step_and_a_fresh_engine_carries_it_on(
    make_engine: Any, db_url: str, label: str
) -> None:
    engine = make_engine(*CODE)
    with engine.running():
        run = engine.start(two_steps, label)
        error = failed(engine, run.run_id)
    assert "downstream is down" in error["message"]
    assert calls_of(label) == ["first", "flaky 1", "flaky 2"]

    mend(label)
    fresh = make_engine(*CODE, cache_size=0)
    fresh.retry(run.run_id, "the downstream is fixed")
    assert fresh.get(run.run_id).status == wp.RunStatus.RUNNING
    with fresh.running():
        assert fresh.result(run.run_id, timeout=20) == ["one", {"attempt": 3}]
    # The first step was not run again; the failed one got attempt 3 (numbering goes on).
    assert calls_of(label) == ["first", "flaky 1", "flaky 2", "flaky 3"]
    history = fresh.history(run.run_id)
    (retried,) = of_type(history, "RunRetried")
    final_failure = of_type(history, "ActivityFailed")[-1]
    (run_failed,) = of_type(history, "RunFailed")
    assert retried.data == {
        "by": retried.data["by"],
        "reason": "the downstream is fixed",
        "status_before": "failed",
        "status_after": "running",
        "step": "2",
        "attempt": 3,
        "voids": [final_failure.seq, run_failed.seq],
    }
    assert retried.data["by"]
    # Nothing was deleted: the voided failure and RunFailed are still in the chain.
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
    assert history[-1].type == "RunCompleted"
    replays(fresh, run.run_id)
    assert violations(db_url) == []


def test_a_retried_step_that_fails_again_fails_the_run_again_and_can_be_retried_again(
    make_engine: Any, db_url: str, label: str
) -> None:
    engine = make_engine(*CODE)
    with engine.running():
        run = engine.start(two_steps, label)
        failed(engine, run.run_id)
        engine.retry(run.run_id, "try once more", step="2")
        eventually(lambda: len(of_type(engine.history(run.run_id), "RunFailed")) == 2, "again")
        assert engine.get(run.run_id).status == wp.RunStatus.FAILED
        mend(label)
        engine.retry(run.run_id, "fixed now")
        assert engine.result(run.run_id, timeout=20) == ["one", {"attempt": 5}]
    assert calls_of(label).count("first") == 1
    assert [e.data["attempt"] for e in of_type(engine.history(run.run_id), "RunRetried")] == [3, 5]
    replays(engine, run.run_id)
    assert violations(db_url) == []


def test_retry_makes_again_what_the_failed_run_still_waited_for(
    make_engine: Any, db_url: str, label: str
) -> None:
    engine = make_engine(*CODE)
    with engine.running():
        run = engine.start(parallel, label)
        assert gate(label + "-started").wait(10)
        failed(engine, run.run_id)
        assert open_tasks(db_url, run.run_id) == []  # its end removed every task
    mend(label)
    fresh = make_engine(*CODE, cache_size=0)
    fresh.retry(run.run_id, "fixed")
    # The failed step and the branch whose attempt the failure cut off both get a task.
    assert sorted(t.step for t in open_tasks(db_url, run.run_id)) == ["", "1", "2"]
    gate(label).set()
    with fresh.running():
        assert fresh.result(run.run_id, timeout=20) == [{"attempt": 3}, "from the attempt", None]
    replays(fresh, run.run_id)
    assert violations(db_url) == []


def test_of_concurrent_retries_on_two_engines_one_is_recorded(
    make_engine: Any, db_url: str, label: str
) -> None:
    engine = make_engine(*CODE)
    with engine.running():
        run = engine.start(two_steps, label)
        failed(engine, run.run_id)
    engines = [make_engine(*CODE, cache_size=0) for _ in range(2)]
    outcomes: list[str] = []
    start = threading.Barrier(2)

    def retry(e: wp.Engine) -> None:
        start.wait(10)
        try:
            e.retry(run.run_id, "at once")
            outcomes.append("retried")
        except wp.InvalidState as exc:
            outcomes.append(str(exc))

    in_threads([partial(retry, e) for e in engines], timeout=30)
    assert len(outcomes) == 2 and outcomes.count("retried") == 1, outcomes
    assert "has not failed" in next(o for o in outcomes if o != "retried")
    assert len(of_type(engines[0].history(run.run_id), "RunRetried")) == 1
    assert violations(db_url) == []


def test_retry_refusals(make_engine: Any, label: str) -> None:
    engine = make_engine(*CODE)
    engine.publish(GIVE_UP)
    with engine.running():
        bug = engine.start("rp_give_up", {"label": label})
        failed(engine, bug.run_id)
        with pytest.raises(wp.InvalidState, match="not a step's failure"):
            engine.retry(bug.run_id, "x")

        comp = engine.start(compensating, label)
        failed(engine, comp.run_id)
        with pytest.raises(wp.InvalidState, match="fork it instead"):
            engine.retry(comp.run_id, "x")

        live = engine.start(waiter, label)
        eventually(lambda: engine.get(live.run_id).status == wp.RunStatus.WAITING, "waiting")
        with pytest.raises(wp.InvalidState, match="has not failed"):
            engine.retry(live.run_id, "x")

        run = engine.start(two_steps, label)
        failed(engine, run.run_id)
        with pytest.raises(wp.InvalidState, match="the step that failed the run is"):
            engine.retry(run.run_id, "x", step="1")
        with pytest.raises(wp.RunNotFound):
            engine.retry(run.run_id, "x", tenant="elsewhere")
        with pytest.raises(wp.RunNotFound):
            engine.retry("no-such-run", "x")
        for reason in ("", "x" * 100_000):
            with pytest.raises(wp.InvalidRequest):
                engine.retry(run.run_id, reason)
        with pytest.raises(wp.InvalidRequest):
            engine.retry(run.run_id, "x", step="2\x00")
        starter = Principal("default", "sam", frozenset({Role.STARTER}))
        with pytest.raises(wp.PermissionDenied):
            engine.execute(ops.Retry(run_id=run.run_id, reason="x"), starter)

        mend(label)
        as_operator(engine, ops.Retry(run_id=run.run_id, reason="operator may"))
        assert engine.result(run.run_id, timeout=20) == ["one", {"attempt": 3}]
        with pytest.raises(wp.RunNotActive):
            engine.retry(run.run_id, "it completed")
    # Refusals wrote nothing.
    assert not of_type(engine.history(bug.run_id), "RunRetried")
    assert not of_type(engine.history(comp.run_id), "RunRetried")
    assert len(of_type(engine.history(run.run_id), "RunRetried")) == 1


def test_retry_of_a_definition_run_by_step_name(make_engine: Any, db_url: str, label: str) -> None:
    engine = make_engine(*CODE)
    engine.publish(ORDER)
    engine.publish(COMPENSATED)
    with engine.running():
        run = engine.start("rp_order", {"label": label, "amount": 5})
        error = failed(engine, run.run_id)
        assert error["type"] == "activity_failed"
        with pytest.raises(wp.InvalidState, match="'pay'"):
            engine.retry(run.run_id, "x", step="check")

        undone = engine.start("rp_compensated", {"label": label})
        failed(engine, undone.run_id)
        with pytest.raises(wp.InvalidState, match="compensations ran"):
            engine.retry(undone.run_id, "x")
    mend(label)
    fresh = make_engine(*CODE, cache_size=0)
    fresh.retry(run.run_id, "card fixed", step="pay")
    (retried,) = of_type(fresh.history(run.run_id), "RunRetried")
    voided = [e.type for e in fresh.history(run.run_id) if e.seq in retried.data["voids"]]
    # The run's time limit, cancelled as the failure unwound it, runs again.
    assert sorted(voided) == ["ActivityFailed", "RunFailed", "TimerCancelled"]
    with fresh.running():
        assert fresh.result(run.run_id, timeout=20) == {"checked": "one", "paid": {"attempt": 3}}
    assert calls_of(label).count("first") == 2  # once per run, never again
    replays(fresh, run.run_id)
    assert violations(db_url) == []


# == skip ========================================================================


def test_skip_a_failed_step_needs_admin_for_code_and_the_run_goes_on(
    make_engine: Any, db_url: str, label: str
) -> None:
    engine = make_engine(*CODE)
    with engine.running():
        run = engine.start(two_steps, label)
        failed(engine, run.run_id)
    with pytest.raises(wp.PermissionDenied, match="admin"):
        as_operator(engine, ops.Skip(run_id=run.run_id, step="2", reason="x", output={}))
    with pytest.raises(wp.InvalidState, match="the step that failed the run is"):
        engine.skip(run.run_id, "1", "x", output={})
    fresh = make_engine(*CODE, cache_size=0)
    fresh.skip(run.run_id, "2", "paid by hand", output={"attempt": "manual"})
    with fresh.running():
        assert fresh.result(run.run_id, timeout=20) == ["one", {"attempt": "manual"}]
    assert calls_of(label) == ["first", "flaky 1", "flaky 2"]  # nothing ran again
    history = fresh.history(run.run_id)
    (skipped,) = of_type(history, "StepSkipped")
    assert skipped.data["output"] == {"attempt": "manual"}
    assert (skipped.data["status_before"], skipped.data["status_after"]) == ("failed", "running")
    assert skipped.data["reason"] == "paid by hand" and skipped.data["by"]
    assert len(skipped.data["voids"]) == 2
    replays(fresh, run.run_id)
    assert violations(db_url) == []


def test_skip_a_running_step_keeps_its_late_result_as_audit(
    make_engine: Any, db_url: str, label: str
) -> None:
    engine = make_engine(*CODE)
    with engine.running():
        run = engine.start(gated_flow, label)
        assert gate(label + "-started").wait(10)
        engine.skip(run.run_id, "1", "the attempt hangs", output="given")
        assert engine.result(run.run_id, timeout=20) == ["given", "one"]
        gate(label).set()
        until_event(engine, run.run_id, "LateResultIgnored", "the late result")
    history = engine.history(run.run_id)
    (skipped,) = of_type(history, "StepSkipped")
    assert (skipped.data["status_before"], skipped.data["status_after"]) == ("running", "running")
    assert "voids" not in skipped.data
    assert [e.data["step"] for e in of_type(history, "ActivityCompleted")] == ["2"]
    replays(engine, run.run_id)
    assert violations(db_url) == []


def test_skip_refusals(make_engine: Any, label: str) -> None:
    engine = make_engine(*CODE)
    with engine.running():
        run = engine.start(waiter, label)
        eventually(lambda: engine.get(run.run_id).status == wp.RunStatus.WAITING, "waiting")
        with pytest.raises(wp.InvalidState, match="not an activity step waiting"):
            engine.skip(run.run_id, "1", "x")
        with pytest.raises(wp.RunNotFound):
            engine.skip(run.run_id, "1", "x", tenant="elsewhere")
        with pytest.raises(wp.InvalidRequest):
            engine.skip(run.run_id, "1", "")
        with pytest.raises(wp.InvalidRequest):
            engine.skip(run.run_id, "", "x")
        with pytest.raises(wp.InvalidRequest):
            engine.skip(run.run_id, "1", "x", output="bad \x00 text")
        deep: Any = 1
        for _ in range(100):
            deep = [deep]
        with pytest.raises(wp.InvalidRequest, match="nested"):
            engine.skip(run.run_id, "1", "x", output=deep)
        with pytest.raises(wp.QuotaExceeded):
            engine.skip(run.run_id, "1", "x", output="y" * 2_000_000)
        engine.signal(run.run_id, "go", "now")
        assert engine.result(run.run_id, timeout=10) == "now"
        with pytest.raises(wp.RunNotActive):
            engine.skip(run.run_id, "1", "x")
    assert not of_type(engine.history(run.run_id), "StepSkipped")


def test_an_operator_may_skip_a_skippable_definition_step(
    make_engine: Any, db_url: str, label: str
) -> None:
    engine = make_engine(*CODE)
    engine.publish(ORDER)
    with engine.running():
        run = engine.start("rp_order", {"label": label, "amount": 5})
        failed(engine, run.run_id)
        with pytest.raises(wp.InvalidState):
            as_operator(engine, ops.Skip(run_id=run.run_id, step="check", reason="x"))
        with pytest.raises(wp.InvalidRequest, match="not a result of activity"):
            engine.skip(run.run_id, "pay", "x", output="not an object")
        skip = ops.Skip(run_id=run.run_id, step="pay", reason="paid by hand", output={"by": "cash"})
        as_operator(engine, skip)
        assert engine.result(run.run_id, timeout=20) == {"checked": "one", "paid": {"by": "cash"}}
    (skipped,) = of_type(engine.history(run.run_id), "StepSkipped")
    assert skipped.data["by"] == "olga"
    replays(engine, run.run_id)
    assert violations(db_url) == []


def test_a_skipped_step_is_not_compensated(make_engine: Any, db_url: str, label: str) -> None:
    engine = make_engine(*CODE)
    engine.publish(SKIP_THEN_FAIL)
    with engine.running():
        run = engine.start("rp_skip_then_fail", {"label": label})
        failed(engine, run.run_id)
        engine.skip(run.run_id, "pay", "paid by hand", output={"attempt": 0})
        error = eventually(
            lambda: (
                engine.get(run.run_id).status == wp.RunStatus.FAILED
                and engine.get(run.run_id).error
            ),
            "the run to fail at its fail step",
        )
    assert error["type"] == "stopped" and "compensated" not in error.get("details", {})
    assert "undo" not in calls_of(label)
    replays(engine, run.run_id)
    assert violations(db_url) == []


# == update-input ================================================================


def test_update_input_of_a_waiting_definition_run(
    make_engine: Any, db_url: str, label: str
) -> None:
    engine = make_engine(*CODE)
    engine.publish(HOLD)
    run = engine.start("rp_hold", {"label": label, "amount": 5})
    with engine.running():
        eventually(lambda: engine.get(run.run_id).status == wp.RunStatus.WAITING, "waiting")
        engine.update_input(run.run_id, {"amount": 7, "note": "corrected"}, "typo in the amount")
    fresh = make_engine(*CODE, cache_size=0)
    with fresh.running():
        fresh.signal(run.run_id, "go", {})
        assert fresh.result(run.run_id, timeout=20) == {"amount": 7, "note": "corrected"}
    (updated,) = of_type(fresh.history(run.run_id), "InputUpdated")
    assert updated.data == {
        "by": updated.data["by"],
        "reason": "typo in the amount",
        "status_before": "waiting",
        "status_after": "waiting",
        "step": "wait",
        "old": {"amount": 5},
        "new": {"amount": 7, "note": "corrected"},
    }
    replays(fresh, run.run_id)
    assert violations(db_url) == []


def test_update_input_refusals(make_engine: Any, label: str) -> None:
    engine = make_engine(*CODE)
    engine.publish(HOLD)
    engine.publish(ORDER)
    with engine.running():
        code = engine.start(waiter, label)
        run = engine.start("rp_hold", {"label": label, "amount": 5})
        for r in (code, run):
            eventually(lambda r=r: engine.get(r.run_id).status == wp.RunStatus.WAITING, "wait")
        with pytest.raises(wp.InvalidState, match="workflow code"):
            engine.update_input(code.run_id, {"amount": 1}, "x")
        with pytest.raises(wp.InputError):
            engine.update_input(run.run_id, {"amount": -1}, "x")
        with pytest.raises(wp.InputError):
            engine.update_input(run.run_id, {"unknown": 1}, "x")
        with pytest.raises(wp.InvalidRequest):
            engine.update_input(run.run_id, {}, "x")
        with pytest.raises(wp.InvalidRequest):
            engine.update_input(run.run_id, {"amount": 1}, "")
        with pytest.raises(wp.InvalidRequest):
            engine.update_input(run.run_id, {"bad\x07name": 1}, "x")
        with pytest.raises(wp.QuotaExceeded):
            engine.update_input(run.run_id, {"note": "y" * 2_000_000}, "x")
        with pytest.raises(wp.PayloadError):
            engine.update_input(run.run_id, {"amount": float("nan")}, "x")
        with pytest.raises(wp.RunNotFound):
            engine.update_input(run.run_id, {"amount": 1}, "x", tenant="elsewhere")
        starter = Principal("default", "sam", frozenset({Role.STARTER}))
        with pytest.raises(wp.PermissionDenied):
            engine.execute(ops.UpdateInput(run_id=run.run_id, reason="x", data={"a": 1}), starter)

        mend_later = engine.start("rp_order", {"label": label, "amount": 5})
        failed(engine, mend_later.run_id)
        with pytest.raises(wp.RunNotActive):
            engine.update_input(mend_later.run_id, {"amount": 1}, "x")
    assert not of_type(engine.history(run.run_id), "InputUpdated")


# == HTTP and the CLI ============================================================


def test_over_http_each_repair_is_a_route(make_engine: Any, serve: Any, label: str) -> None:
    engine = make_engine(*CODE)
    engine.publish(HOLD, tenant="acme")
    with engine.running():
        base = serve(engine)
        operator = Api(base, make_key(engine, "acme", "olga", "operator"))
        starter = Api(base, make_key(engine, "acme", "sam", "starter"))
        outsider = Api(base, make_key(engine, "other", "oscar", "operator"))
        run = engine.start(two_steps, label, tenant="acme")
        failed(engine, run.run_id, tenant="acme")
        bodies = {
            "retry": {"reason": "x"},
            "skip": {"reason": "x", "step": "2", "output": 1},
            "update-input": {"reason": "x", "data": {"amount": 1}},
        }
        for command, body in bodies.items():
            url = f"/v1/runs/{run.run_id}/{command}"
            assert starter.post(url, json=body).status_code == 403
            hidden = outsider.post(url, json=body)
            assert hidden.status_code == 404, hidden.text
            assert operator.post(url, json={}).status_code == 422
        not_skippable = operator.post(f"/v1/runs/{run.run_id}/skip", json=bodies["skip"])
        assert not_skippable.status_code == 403, not_skippable.text
        wrong = operator.post(f"/v1/runs/{run.run_id}/update-input", json=bodies["update-input"])
        assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "run_not_active"
        mend(label)
        ok = operator.post(f"/v1/runs/{run.run_id}/retry", json={"reason": "fixed", "step": "2"})
        assert ok.status_code == 202 and ok.json() == {"run_id": run.run_id, "accepted": True}
        assert engine.result(run.run_id, timeout=20, tenant="acme") == ["one", {"attempt": 3}]
        again = operator.post(f"/v1/runs/{run.run_id}/retry", json={"reason": "again"})
        assert again.status_code == 409

        hold = engine.start("rp_hold", {"label": label, "amount": 5}, tenant="acme")
        eventually(
            lambda: engine.get(hold.run_id, tenant="acme").status == wp.RunStatus.WAITING, "w"
        )
        url = f"/v1/runs/{hold.run_id}/update-input"
        assert operator.post(url, json={"reason": "x", "data": {"amount": -1}}).status_code == 422
        assert operator.post(url, json={"reason": "x", "data": {"amount": 9}}).status_code == 202
        engine.signal(hold.run_id, "go", {}, tenant="acme")
        assert engine.result(hold.run_id, timeout=20, tenant="acme") == {"amount": 9, "note": None}
    (retried,) = of_type(engine.history(run.run_id, tenant="acme"), "RunRetried")
    assert retried.data["by"] == "olga"


def test_the_cli_retries_skips_and_updates_input(make_engine: Any, db_url: str, label: str) -> None:
    engine = make_engine(*CODE)
    engine.publish(HOLD)
    with engine.running():
        run = engine.start(two_steps, label)
        failed(engine, run.run_id)
        hold = engine.start("rp_hold", {"label": label, "amount": 5})
        eventually(lambda: engine.get(hold.run_id).status == wp.RunStatus.WAITING, "waiting")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return waypost_on(db_url, "runs", *args)

    assert cli("retry", run.run_id).returncode != 0  # --reason is required
    refused = cli("retry", run.run_id, "--reason", "x", "--step", "1")
    assert refused.returncode != 0 and "the step that failed the run is" in refused.stderr
    bad = cli("skip", run.run_id, "--step", "2", "--reason", "x", "--output", "{nope")
    assert bad.returncode != 0 and "not JSON" in bad.stderr
    done = cli("skip", run.run_id, "--step", "2", "--reason", "by hand", "--output", '{"by": 1}')
    assert done.returncode == 0, done.stderr
    assert "skipped" in done.stdout
    updated = cli("update-input", hold.run_id, "--data", '{"amount": 8}', "--reason", "fix")
    assert updated.returncode == 0, updated.stderr
    not_object = cli("update-input", hold.run_id, "--data", "[1]", "--reason", "fix")
    assert not_object.returncode != 0
    fresh = make_engine(*CODE, cache_size=0)
    with fresh.running():
        assert fresh.result(run.run_id, timeout=20) == ["one", {"by": 1}]
        fresh.signal(hold.run_id, "go", {})
        assert fresh.result(hold.run_id, timeout=20) == {"amount": 8, "note": None}
    assert not of_type(fresh.history(run.run_id), "RunRetried")
    replays(fresh, run.run_id)
    assert violations(db_url) == []


# == quotas ======================================================================


def test_a_repair_of_a_run_whose_history_is_full_is_refused_and_writes_nothing(
    make_engine: Any, db_url: str, label: str
) -> None:
    # A repair appends an event as a signal does: a run with as many events as its
    # tenant's max_events_per_run allows refuses it with the same QuotaExceeded. The run
    # is not stranded: once the quota is raised the same repair goes through.
    engine = make_engine(*CODE)
    engine.create_tenant("acme")
    engine.publish(HOLD, tenant="acme")
    with engine.running():
        done = engine.start(two_steps, label, tenant="acme")
        failed(engine, done.run_id, tenant="acme")
        hung = engine.start(gated_flow, label, tenant="acme")
        assert gate(label + "-started").wait(10)
        held = engine.start("rp_hold", {"label": label, "amount": 5}, tenant="acme")
        eventually(
            lambda: engine.get(held.run_id, tenant="acme").status == wp.RunStatus.WAITING,
            "waiting",
        )
        runs = (done.run_id, hung.run_id, held.run_id)
        lengths = {r: len(engine.history(r, tenant="acme")) for r in runs}
        attempts = [
            (done, lambda: engine.retry(done.run_id, "downstream fixed", tenant="acme")),
            (done, lambda: engine.skip(done.run_id, "2", "no", output={}, tenant="acme")),
            (hung, lambda: engine.skip(hung.run_id, "1", "hangs", output="x", tenant="acme")),
            (held, lambda: engine.update_input(held.run_id, {"amount": 7}, "typo", tenant="acme")),
        ]
        for run, attempt in attempts:
            engine.set_quotas("acme", {"max_events_per_run": lengths[run.run_id]})
            with pytest.raises(wp.QuotaExceeded, match="max_events_per_run") as refused:
                attempt()
            assert refused.value.quota == "max_events_per_run"
            assert len(str(refused.value)) < 500
        # Nothing was written; the runs are as they were.
        assert {r: len(engine.history(r, tenant="acme")) for r in runs} == lengths
        assert engine.get(done.run_id, tenant="acme").status == wp.RunStatus.FAILED
        # Another tenant's runs are not limited by acme's quota.
        other = engine.start(two_steps, label)
        failed(engine, other.run_id)
        mend(label)
        engine.retry(other.run_id, "the downstream is fixed")
        assert engine.result(other.run_id, timeout=20) == ["one", {"attempt": 3}]
        # With room for the repair (the run's next decisions are then the runner's to
        # judge), the same repairs go through.
        engine.set_quotas("acme", {"max_events_per_run": "default"})
        engine.retry(done.run_id, "the downstream is fixed", tenant="acme")
        assert engine.result(done.run_id, timeout=20, tenant="acme") == ["one", {"attempt": 3}]
        engine.skip(hung.run_id, "1", "the attempt hangs", output="given", tenant="acme")
        assert engine.result(hung.run_id, timeout=20, tenant="acme") == ["given", "one"]
        gate(label).set()
    assert violations(db_url) == []
