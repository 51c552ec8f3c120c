"""Child runs on both stores: a parent starts children, waits for them, and closes them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, eventually_async, of_type
from tests.helpers.workers import signalled_at_the_end, worker_process
from waypost.testing.invariants import check_invariants

from .console_fixtures import Browser
from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)


@wp.activity
def double(ctx: wp.ActivityContext, n: int) -> int:
    return n * 2


@wp.workflow(name="kid")
async def kid(ctx: wp.WorkflowContext, n: int) -> int:
    if n < 0:
        raise wp.Failure(f"no negative numbers: {n}")
    return int(await ctx.run(double, n))


@wp.workflow(name="waiting_kid")
async def waiting_kid(ctx: wp.WorkflowContext, n: int) -> str:
    try:
        return str(await ctx.wait_signal("go"))
    except asyncio.CancelledError:
        await ctx.run(double, n)  # cleanup the parent's cancellation lets run
        raise


@wp.workflow(name="parent")
async def parent(ctx: wp.WorkflowContext, n: int) -> dict[str, Any]:
    first = await ctx.child(kid, n)
    try:
        await ctx.child("kid", -n)
        caught = None
    except wp.ChildFailed as exc:
        caught = {"status": exc.status, "message": exc.message, "run_id": exc.run_id}
    return {"first": first, "caught": caught}


@wp.workflow(name="holder")
async def holder(ctx: wp.WorkflowContext, spec: dict[str, Any]) -> str:
    handle = await ctx.start_child(waiting_kid, 1, close=spec["close"])
    if spec.get("wait"):
        return str(await handle.result())
    await ctx.wait_signal("end")
    return handle.run_id


def _status(engine: wp.Engine, run_id: str, tenant: str = "default") -> str | None:
    try:
        return engine.get(run_id, tenant=tenant).status.value
    except wp.RunNotFound:
        return None  # not started yet


def _links(engine: wp.Engine, run_id: str) -> dict[str, Any]:
    info = engine.get(run_id)
    return {"parent": info.parent, "children": info.children}


def test_a_parent_waits_for_its_child_and_catches_a_childs_failure(make_engine: Any) -> None:
    engine = make_engine(parent, kid, double)
    with engine.running():
        run = engine.start(parent, 4)
        result = engine.result(run.run_id, timeout=30)
    assert result["first"] == 8
    assert result["caught"]["status"] == "failed"
    assert "no negative numbers: -4" in result["caught"]["message"]
    history = engine.history(run.run_id)
    started = of_type(history, "ChildStarted")
    assert [e.data["run_id"] for e in started] == [f"{run.run_id}-1", f"{run.run_id}-2"]
    done = of_type(history, "ChildCompleted")
    failed = of_type(history, "ChildFailed")
    assert [e.data["result"] for e in done] == [8]
    assert failed[0].data["error"]["message"].endswith("no negative numbers: -4")
    # The histories link both ways: the child's RunStarted names its parent and step.
    child = engine.history(f"{run.run_id}-1")
    assert child[0].data["parent"] == {"run_id": run.run_id, "step": "1", "depth": 1}
    links = _links(engine, run.run_id)
    assert links["parent"] is None
    assert [(c["run_id"], c["status"]) for c in links["children"]] == [
        (f"{run.run_id}-1", "completed"),
        (f"{run.run_id}-2", "failed"),
    ]
    assert _links(engine, f"{run.run_id}-2")["parent"] == {
        "run_id": run.run_id,
        "step": "2",
        "close": "cancel",
    }
    assert engine._call(check_invariants(engine.aio.store)) == []


@pytest.mark.parametrize("close", ["cancel", "terminate", "abandon"])
def test_a_parent_that_ends_applies_its_close_policy_to_its_open_child(
    make_engine: Any, close: str
) -> None:
    engine = make_engine(holder, waiting_kid, double)
    with engine.running():
        run = engine.start(holder, {"close": close})
        child_id = f"{run.run_id}-1"
        eventually(lambda: _status(engine, child_id) == "waiting", "the child waits")
        waits = engine.get(run.run_id).waiting_for
        assert {"kind": "child", "step": "1", "workflow": "waiting_kid", "run_id": child_id} in (
            waits
        )
        engine.cancel(run.run_id, reason="no longer needed")
        eventually(lambda: engine.get(run.run_id).status == "cancelled", "parent cancelled")
        expected = {"cancel": "cancelled", "terminate": "terminated", "abandon": "waiting"}
        info = eventually(
            lambda: (i := engine.get(child_id)).status == expected[close] and i, expected[close]
        )
        if close == "abandon":
            engine.signal(child_id, "go", "alone")
            assert engine.result(child_id, timeout=30) == "alone"
        child = [e.type for e in engine.history(child_id)]
        if close == "cancel":
            # Its cleanup ran: the parent's cancel reached its code.
            assert "CancelRequested" in child and "ActivityCompleted" in child
        if close == "terminate":
            assert child[-1] == "RunTerminated" and "ActivityScheduled" not in child
        assert info.status == expected[close] or close == "abandon"
        parent_events = [e.type for e in engine.history(run.run_id)]
        # Nothing reaches a parent that has ended.
        assert "ChildFailed" not in parent_events and "ChildCompleted" not in parent_events
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_a_childs_end_reaches_its_parent_in_the_commit_that_ends_the_child(
    make_engine: Any, db_url: str
) -> None:
    # The child's last event and the parent's ChildCompleted are one transaction: a
    # parent whose engine is stopped still has it recorded when the child has ended.
    engine = make_engine(holder, waiting_kid, double)
    with engine.running():
        run = engine.start(holder, {"close": "cancel", "wait": True})
        child_id = f"{run.run_id}-1"
        eventually(lambda: _status(engine, child_id) == "waiting", "the child waits")
        action = engine.get(run.run_id).next_action
        assert action is not None and action["kind"] == "child"
        assert action["run_id"] == child_id and "waiting for child run" in action["detail"]
        engine.signal(child_id, "go", "hello")
        assert engine.result(run.run_id, timeout=30) == "hello"
    rows = db_query(
        db_url,
        "SELECT run_id, parent_run_id, parent_step, parent_close FROM runs ORDER BY run_id",
    )
    assert (child_id, run.run_id, "1", "cancel") in [tuple(r) for r in rows]
    done = of_type(engine.history(run.run_id), "ChildCompleted")
    child_end = engine.history(child_id)[-1]
    assert len(done) == 1 and done[0].data["result"] == "hello"
    assert child_end.type == "RunCompleted"


@wp.workflow(name="parent_of_two")
async def parent_of_two(ctx: wp.WorkflowContext, n: int) -> list[str]:
    a, b = await asyncio.gather(
        ctx.child(waiting_kid, n), ctx.child(waiting_kid, n + 1, run_id=f"mine-{n}")
    )
    return [a, b]


def test_a_parent_replayed_by_another_engine_after_a_crash_never_starts_its_child_twice(
    db_url: str,
) -> None:
    async def engine(name: str) -> wp.AsyncEngine:
        e = wp.AsyncEngine(db_url, lease=1.0, poll_interval=0.05, worker_id=name)
        e.register(parent_of_two, waiting_kid, double)
        await e.start_serving()
        return e

    async def scenario() -> tuple[Any, list[wp.Event], wp.RunInfo, list[Any]]:
        first = await engine(f"first-{time.monotonic_ns()}")
        run = await first.start(parent_of_two, 5)
        kids = [f"{run.run_id}-1", "mine-5"]
        for kid_id in kids:
            await async_eventually(first, kid_id, "waiting")
        await first.abandon()  # as SIGKILL would: the parent's instance is lost
        second = await engine(f"second-{time.monotonic_ns()}")
        try:
            for i, kid_id in enumerate(kids):
                await second.signal(kid_id, "go", f"k{i}")
            result = await run.result(timeout=30)
            history = await second.history(run.run_id)
            info = await second.get(run.run_id)
            violations = await check_invariants(second.store)
        finally:
            await second.close()
        return result, history, info, violations

    result, history, info, violations = asyncio.run(scenario())
    assert result == ["k0", "k1"]
    assert [e.data["run_id"] for e in of_type(history, "ChildStarted")] == [
        f"{info.run_id}-1",
        "mine-5",
    ]
    assert len(of_type(history, "ChildCompleted")) == 2
    assert info.children is not None and len(info.children) == 2
    assert violations == []


def test_a_parent_whose_worker_was_killed_is_replayed_elsewhere_without_a_second_child(
    make_engine: Any, db_url: str, tmp_path: Path
) -> None:
    engine = make_engine(parent_of_two, waiting_kid, double)
    run = engine.start(parent_of_two, 7)
    kids = [f"{run.run_id}-1", "mine-7"]
    with (tmp_path / "worker.log").open("w") as log:
        worker = worker_process(db_url, __name__, log)
        with signalled_at_the_end(worker):  # the parent's engine dies holding its run
            for kid_id in kids:
                eventually(lambda k=kid_id: _status(engine, k) == "waiting", kid_id, timeout=30)
    with engine.running():
        for i, kid_id in enumerate(kids):
            engine.signal(kid_id, "go", f"k{i}")
        assert engine.result(run.run_id, timeout=30) == ["k0", "k1"]
    history = engine.history(run.run_id)
    assert [e.data["run_id"] for e in of_type(history, "ChildStarted")] == kids
    assert len(of_type(history, "ChildCompleted")) == 2
    assert len(engine.list_runs()) == 3
    assert engine._call(check_invariants(engine.aio.store)) == []


async def async_eventually(engine: wp.AsyncEngine, run_id: str, status: str) -> None:
    async def reached() -> bool:
        try:
            return (await engine.get(run_id)).status == status
        except wp.RunNotFound:
            return False

    await eventually_async(reached, f"run {run_id} to be {status}", interval=0.02)


# == edges: an operator ends a child; the tenant's quotas; another tenant ================


def test_a_child_terminated_by_an_operator_fails_its_parents_wait(make_engine: Any) -> None:
    engine = make_engine(holder, waiting_kid, double)
    with engine.running():
        run = engine.start(holder, {"close": "cancel", "wait": True}, tenant="acme")
        child_id = f"{run.run_id}-1"
        eventually(lambda: _status(engine, child_id, "acme") == "waiting", "the child waits")
        engine.terminate(child_id, reason="stuck", tenant="acme")
        with pytest.raises(wp.WorkflowFailed) as failed:
            engine.result(run.run_id, timeout=30, tenant="acme")
    assert "ChildFailed" in str(failed.value) and "terminated" in str(failed.value)
    ended = of_type(engine.history(run.run_id, tenant="acme"), "ChildFailed")
    assert [e.data["status"] for e in ended] == ["terminated"]
    # Children run in their parent's tenant, and only there.
    with pytest.raises(wp.RunNotFound):
        engine.get(child_id)
    assert engine._call(check_invariants(engine.aio.store)) == []


flaky_once: set[str] = set()


@wp.activity(retry=wp.Retry(max_attempts=1))
def fails_first(ctx: wp.ActivityContext, label: str) -> str:
    if label not in flaky_once:
        flaky_once.add(label)
        raise RuntimeError("not yet")
    return f"done {label}"


@wp.workflow(name="retried_kid")
async def retried_kid(ctx: wp.WorkflowContext, label: str) -> str:
    return str(await ctx.run(fails_first, label))


@wp.workflow(name="patient")
async def patient(ctx: wp.WorkflowContext, label: str) -> str:
    try:
        return str(await ctx.child(retried_kid, label))
    except wp.ChildFailed as exc:
        await ctx.wait_signal("end")
        return f"gave up: {exc.status}"


def test_a_child_repaired_after_its_parent_heard_of_its_failure_is_not_told_twice(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(patient, retried_kid, fails_first)
    label = f"once-{time.monotonic_ns()}"
    with engine.running():
        run = engine.start(patient, label)
        child_id = f"{run.run_id}-1"
        eventually(lambda: _status(engine, child_id) == "failed", "the child failed")
        eventually(lambda: _status(engine, run.run_id) == "waiting", "the parent took it in")
        engine.retry(child_id, reason="fixed")
        assert engine.result(child_id, timeout=30) == f"done {label}"
        engine.signal(run.run_id, "end", None)
        assert engine.result(run.run_id, timeout=30) == "gave up: failed"
    ends = [e.type for e in engine.history(run.run_id) if e.type.startswith("Child")]
    assert ends == ["ChildStarted", "ChildFailed"]
    assert engine._call(check_invariants(engine.aio.store)) == []


@wp.workflow(name="crowd")
async def crowd(ctx: wp.WorkflowContext, n: int) -> str:
    first = await ctx.start_child(waiting_kid, 1)
    try:
        await ctx.child(kid, 2)
    except wp.ChildFailed as exc:
        await ctx.wait_signal("end")
        return f"{exc.status}: {exc.type} ({first.run_id} still waits)"
    return "started both"


def test_a_child_over_the_tenants_run_quota_fails_to_start_and_the_parent_goes_on(
    make_engine: Any,
) -> None:
    engine = make_engine(crowd, waiting_kid, kid, double)
    engine.create_tenant("acme")
    engine.set_quotas("acme", {"max_concurrent_runs": 2})
    with engine.running():
        run = engine.start(crowd, 0, tenant="acme")
        eventually(
            lambda: of_type(engine.history(run.run_id, tenant="acme"), "ChildFailed"),
            "the second child refused",
        )
        engine.signal(run.run_id, "end", None, tenant="acme")
        result = engine.result(run.run_id, timeout=30, tenant="acme")
    assert result.startswith("not_started: QuotaExceeded")
    # Nothing of the refused child was written.
    with pytest.raises(wp.RunNotFound):
        engine.get(f"{run.run_id}-2", tenant="acme")
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_over_http_and_the_cli_a_run_shows_its_parent_and_children(
    make_engine: Any, serve: Any, db_url: str
) -> None:
    engine = make_engine(parent, kid, double)
    with engine.running():
        run = engine.start(parent, 3, tenant="acme")
        engine.result(run.run_id, timeout=30, tenant="acme")
        base = serve(engine)
        reader = Api(base, make_key(engine, "acme", "rita", "viewer"))
        outsider = Api(base, make_key(engine, "other", "oscar", "operator"))
        with reader, outsider:
            body = reader.get(f"/v1/runs/{run.run_id}").json()
            child = reader.get(f"/v1/runs/{run.run_id}-1").json()
            hidden = outsider.get(f"/v1/runs/{run.run_id}-1")
        # The remote client reads the same links.
        client = wp.Client(base, make_key(engine, "acme", "carl", "viewer"))
        try:
            remote = client.get(f"{run.run_id}-2")
        finally:
            client.close()
    assert remote.parent == {"run_id": run.run_id, "step": "2", "close": "cancel"}
    assert remote.children == []
    assert body["parent"] is None
    assert [(c["run_id"], c["step"], c["status"]) for c in body["children"]] == [
        (f"{run.run_id}-1", "1", "completed"),
        (f"{run.run_id}-2", "2", "failed"),
    ]
    assert child["parent"] == {"run_id": run.run_id, "step": "1", "close": "cancel"}
    assert child["children"] == []
    assert hidden.status_code == 404
    waypost = str(Path(sys.executable).with_name("waypost"))
    shown = subprocess.run(
        [waypost, "runs", "show", f"{run.run_id}-2", "--db", db_url, "--tenant", "acme"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"{run.run_id} (step 2)" in shown.stdout
    listed = subprocess.run(
        [waypost, "runs", "show", run.run_id, "--db", db_url, "--tenant", "acme", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert [c["status"] for c in json.loads(listed.stdout)["children"]] == [
        "completed",
        "failed",
    ]


def test_the_consoles_run_page_links_a_parent_and_its_children(
    make_engine: Any, serve: Any
) -> None:
    engine = make_engine(parent, kid, double)
    with engine.running():
        run = engine.start(parent, 3, tenant="acme", run_id="console-parent")
        engine.result(run.run_id, timeout=30, tenant="acme")
        b = Browser(serve(engine))
        assert b.sign_in_key(make_key(engine, "acme", "vic", "viewer")).status_code == 303
        page = b.get("/runs/console-parent").text
        child = b.get("/runs/console-parent-2").text
    assert '<a href="/runs/console-parent-1">console-parent-1</a> (kid, step 1' in page
    assert '<a href="/runs/console-parent-2">console-parent-2</a> (kid, step 2' in page
    assert 'Parent</dt><dd><a href="/runs/console-parent">console-parent</a> (step 2)' in child


def test_the_example_runs(tmp_path: Path) -> None:
    script = Path(__file__).parents[2] / "examples" / "child_workflows.py"
    url = f"sqlite:///{tmp_path / 'children.db'}"
    proc = subprocess.run(
        [sys.executable, str(script), url], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "'tracking': ['trk-p1', 'trk-p3']" in proc.stdout
    assert "no courier takes 40 kg" in proc.stdout
    assert "(receipt) -> completed" in proc.stdout
    assert "-2 -> parent {'run_id':" in proc.stdout


# == a definition's call step =============================================================

PRICE = """
name: price
start: quote
steps:
  quote:
    type: activity
    activity: price.double
    input: {n: amount}
    output: $.doubled
    next: done
  done:
    type: succeed
    output: doubled
"""

CHECKOUT = """
name: checkout
start: price_it
steps:
  price_it:
    type: call
    definition: price
    input: {amount: amount}
    output: $.price
    next: done
  done:
    type: succeed
"""

LOOP = """
name: loop
start: again
steps:
  again:
    type: call
    definition: loop
    next: done
  done:
    type: succeed
"""


@wp.activity(name="price.double")
def double_by_name(ctx: wp.ActivityContext, n: int) -> int:
    if n < 0:
        raise wp.NonRetryableError(f"negative: {n}")
    return n * 2


def test_a_definition_calls_another_as_a_child_run(make_engine: Any) -> None:
    engine = make_engine(double_by_name)
    engine.publish(PRICE, tenant="acme")
    engine.publish(CHECKOUT, tenant="acme")
    with engine.running():
        run = engine.start("checkout", {"amount": 21}, tenant="acme")
        assert engine.result(run.run_id, timeout=30, tenant="acme") == {
            "amount": 21,
            "price": 42,
        }
        bad = engine.start("checkout", {"amount": -1}, tenant="acme")
        with pytest.raises(wp.WorkflowFailed) as failed:
            engine.result(bad.run_id, timeout=30, tenant="acme")
    assert failed.value.type == "call_failed"
    assert "definition 'price'" in failed.value.message and "negative: -1" in failed.value.message
    info = engine.get(run.run_id, tenant="acme")
    child = engine.history((info.children or [{}])[0]["run_id"], tenant="acme")
    assert child[0].data["definition"]["name"] == "price"
    assert child[0].data["definition"]["version"] == 1
    assert child[0].data["parent"]["run_id"] == run.run_id
    assert [(c["workflow"], c["status"]) for c in info.children or []] == [("price", "completed")]
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_a_definition_that_calls_itself_stops_at_the_depth_bound(make_engine: Any) -> None:
    engine = make_engine(double_by_name)
    engine.publish(LOOP)
    with engine.running():
        run = engine.start("loop", {})
        with pytest.raises(wp.WorkflowFailed) as failed:
            engine.result(run.run_id, timeout=30)
    assert failed.value.type == "call_failed"
    # Five levels of children below the run, each failed by the one below it.
    chain = [engine.get(run.run_id)]
    while chain[-1].children:
        (only,) = chain[-1].children
        chain.append(engine.get(only["run_id"]))
    assert len(chain) == 6 and len(engine.list_runs()) == 6
    assert [i.status.value for i in chain] == ["failed"] * 6
    assert chain[-1].error is not None and "TooDeep" in chain[-1].error["message"]
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_calling_a_definition_the_tenant_has_not_published_fails_the_step(
    make_engine: Any,
) -> None:
    engine = make_engine(double_by_name)
    engine.publish(CHECKOUT, tenant="acme")  # price is published in another tenant only
    engine.publish(PRICE, tenant="other")
    with engine.running():
        run = engine.start("checkout", {"amount": 1}, tenant="acme")
        with pytest.raises(wp.WorkflowFailed) as failed:
            engine.result(run.run_id, timeout=30, tenant="acme")
    assert "not_started: DefinitionNotFound" in failed.value.message
    assert len(engine.list_runs(tenant="acme")) == 1


@pytest.mark.parametrize(
    ("step", "where"),
    [
        ({"type": "call"}, "steps.c"),
        ({"type": "call", "definition": "price", "version": 0}, "steps.c.version"),
        ({"type": "call", "definition": "price", "close": "kill"}, "steps.c.close"),
        ({"type": "call", "definition": "price", "input": {"a": "$.("}}, "steps.c.input.a"),
        ({"type": "call", "definition": "price", "extra": 1}, "steps.c"),
    ],
)
def test_a_call_step_is_validated_with_located_errors(
    make_engine: Any, step: dict[str, Any], where: str
) -> None:
    engine = make_engine()
    definition = {
        "name": "bad",
        "start": "c",
        "steps": {"c": {**step, "next": "d"}, "d": {"type": "succeed"}},
    }
    with pytest.raises(wp.DefinitionError) as info:
        engine.publish(definition)
    assert any(p.path.startswith(where) for p in info.value.problems), info.value.problems


@wp.workflow(name="broken_kid")
async def broken_kid(ctx: wp.WorkflowContext, n: int) -> int:
    raise RuntimeError(f"a bug in the child's code ({n})")  # not a Failure: suspends the run


@wp.workflow(name="broken_holder")
async def broken_holder(ctx: wp.WorkflowContext, close: str) -> str:
    await ctx.start_child(broken_kid, 1, close=close)
    await ctx.wait_signal("end")
    return "ended"


@pytest.mark.parametrize("close", ["cancel", "terminate"])
def test_a_suspended_child_ends_as_its_close_policy_says_when_its_parent_ends(
    make_engine: Any, close: str
) -> None:
    """A suspended child's code cannot run, so it cannot take in a cancel request: the
    parent's ending commit ends it at once (cancelled, or terminated), never leaving it
    suspended for ever."""
    engine = make_engine(broken_holder, broken_kid)
    with engine.running():
        run = engine.start(broken_holder, close)
        child_id = f"{run.run_id}-1"
        eventually(lambda: _status(engine, child_id) == "suspended", "the child is suspended")
        engine.cancel(run.run_id, reason="no longer needed")
        eventually(lambda: engine.get(run.run_id).status == "cancelled", "parent cancelled")
        expected = {"cancel": "cancelled", "terminate": "terminated"}[close]
        eventually(lambda: _status(engine, child_id) == expected, f"the child {expected}")
        last = engine.history(child_id)[-1]
        assert last.type == ("RunCancelled" if close == "cancel" else "RunTerminated")
        assert last.data["by"] == {"parent_run_id": run.run_id, "close": close}
    assert engine._call(check_invariants(engine.aio.store)) == []
