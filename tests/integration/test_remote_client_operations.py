"""The HTTP client's operator calls on both stores, against a real server: terminate,
pause, resume, retry, skip, update-input, fork, purge, purged runs and verify.

Each call is made the embedded way (`engine.x(..., tenant=)`) and the remote way
(`client.x(...)`, the API key deciding the tenant) on runs in the same state, and
must answer the same value or refuse with the same error class: code moves between
`wp.Engine` and `wp.Client` unchanged.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type, pg_connect
from tests.helpers.breakage import break_label, broken_label, is_broken, mend
from tests.helpers.definitions import amount_hold
from tests.helpers.flows import each_in_turn
from tests.helpers.gates import gate, pass_gate
from waypost.model.definitions import InputError
from waypost.model.records import PurgedRun, PurgeReport

from .server_fixtures import make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def label() -> str:
    """A label whose `rc_flaky` activity fails until the test mends it."""
    return broken_label()


@wp.activity(name="rc_first", retry=wp.Retry(max_attempts=1))
def first(ctx: wp.ActivityContext, label: str) -> str:
    return "one"


@wp.activity(name="rc_flaky", retry=wp.Retry(max_attempts=1))
def flaky(ctx: wp.ActivityContext, label: str) -> dict[str, Any]:
    if is_broken(label):
        raise RuntimeError("downstream is down")
    return {"attempt": ctx.attempt}


@wp.activity(name="rc_gated", retry=wp.Retry(max_attempts=1))
def gated(ctx: wp.ActivityContext, label: str) -> str:
    pass_gate(label)
    return "done"


@wp.workflow(name="rc_two_steps")
async def two_steps(ctx: wp.WorkflowContext, label: str) -> list[Any]:
    return await each_in_turn(ctx, (first, flaky), label)


@wp.workflow(name="rc_gated_flow")
async def gated_flow(ctx: wp.WorkflowContext, label: str) -> str:
    return await ctx.run(gated, label)


@wp.workflow(name="rc_waiter")
async def waiter(ctx: wp.WorkflowContext, _: Any) -> str:
    await asyncio.gather(ctx.wait_signal("never"), ctx.sleep(timedelta(hours=1)))
    return "woke"


CODE = (two_steps, gated_flow, waiter, first, flaky, gated)

HOLD = amount_hold("rc_hold")

BAD_IDS = ["", "x" * 201, "bad\x07id"]


def refusal(call: Callable[[], Any]) -> type[BaseException] | None:
    """The class of the error `call` raises (None if it answers)."""
    try:
        call()
    except wp.WaypostError as exc:
        return type(exc)
    return None


class Sides:
    """One server, an engine and clients of tenant `acme` (operator, starter) and of
    tenant `other` (an operator there)."""

    def __init__(self, engine: wp.Engine, base: str) -> None:
        self.engine = engine
        self.operator = wp.Client(base, make_key(engine, "acme", "olga", "operator"))
        self.starter = wp.Client(base, make_key(engine, "acme", "sam", "starter"))
        self.outsider = wp.Client(base, make_key(engine, "other", "oscar", "operator"))

    def close(self) -> None:
        for client in (self.operator, self.starter, self.outsider):
            client.close()

    def start(self, workflow: Any, input: Any) -> str:
        return self.engine.start(workflow, input, tenant="acme").run_id

    def status(self, run_id: str) -> wp.RunStatus:
        return self.engine.get(run_id, tenant="acme").status

    def same_refusal(
        self, name: str, *args: Any, expected: type[BaseException], **kwargs: Any
    ) -> None:
        """`name` refused the same way, embedded and remote (as the tenant's operator)."""
        embedded = refusal(lambda: getattr(self.engine, name)(*args, tenant="acme", **kwargs))
        remote = refusal(lambda: getattr(self.operator, name)(*args, **kwargs))
        assert (embedded, remote) == (expected, expected), name

    def refused_to_others(self, name: str, *args: Any, **kwargs: Any) -> None:
        """A starter may not; the other tenant's operator does not see the run."""
        with pytest.raises(wp.PermissionDenied):
            getattr(self.starter, name)(*args, **kwargs)
        with pytest.raises(wp.RunNotFound):
            getattr(self.outsider, name)(*args, **kwargs)


@pytest.fixture
def sides(make_engine: Any, serve: Any) -> Any:
    engine = make_engine(*CODE)
    engine.publish(HOLD, tenant="acme")
    with engine.running():
        made = Sides(engine, serve(engine))
        try:
            yield made
        finally:
            made.close()


def test_terminate_pause_and_resume_as_embedded(sides: Sides) -> None:
    run_id = sides.start(waiter, None)
    eventually(lambda: sides.status(run_id) is wp.RunStatus.WAITING, "the run to wait")
    for name in ("pause", "resume", "terminate"):
        sides.refused_to_others(name, run_id, "x")
        for bad in BAD_IDS:
            sides.same_refusal(name, bad, "x", expected=wp.InvalidRequest)
        for reason in ("", "r\x00", "r" * 5000):
            sides.same_refusal(name, run_id, reason, expected=wp.InvalidRequest)
    sides.same_refusal("resume", run_id, "not paused", expected=wp.InvalidState)

    assert sides.operator.pause(run_id, "maintenance") is None
    assert sides.status(run_id) is wp.RunStatus.PAUSED
    sides.same_refusal("pause", run_id, "twice", expected=wp.InvalidState)
    sides.operator.resume(run_id, "done")
    assert sides.status(run_id) is not wp.RunStatus.PAUSED
    eventually(lambda: sides.status(run_id) is wp.RunStatus.WAITING, "the run to wait again")
    sides.operator.terminate(run_id, "not wanted")
    assert sides.status(run_id) is wp.RunStatus.TERMINATED
    for name in ("pause", "resume", "terminate"):
        sides.same_refusal(name, run_id, "again", expected=wp.RunNotActive)
    with pytest.raises(wp.WorkflowTerminated):
        sides.operator.result(run_id, timeout=10)

    history = sides.engine.history(run_id, tenant="acme")
    by = [(e.type, e.data["by"], e.data["reason"]) for e in history if "by" in e.data]
    assert by == [
        ("RunPaused", "olga", "maintenance"),
        ("RunResumed", "olga", "done"),
        ("RunTerminated", "olga", "not wanted"),
    ]


def test_retry_and_skip_as_embedded(sides: Sides, label: str) -> None:
    run_id = sides.start(two_steps, label)
    with pytest.raises(wp.WorkflowFailed):
        sides.operator.result(run_id, timeout=20)
    sides.refused_to_others("retry", run_id, "x")
    sides.refused_to_others("skip", run_id, "2", "x", output=1)
    for bad in BAD_IDS:
        sides.same_refusal("retry", bad, "x", expected=wp.InvalidRequest)
        sides.same_refusal("skip", run_id, bad, "x", expected=wp.InvalidRequest)
    sides.same_refusal("retry", run_id, "", expected=wp.InvalidRequest)
    sides.same_refusal("retry", run_id, "x", step="1", expected=wp.InvalidState)
    sides.same_refusal("skip", run_id, "1", "x", expected=wp.InvalidState)
    sides.same_refusal("skip", run_id, "2", "x", output=float("nan"), expected=wp.PayloadError)

    mend(label)
    assert sides.operator.retry(run_id, "fixed", step="2") is None
    assert sides.operator.result(run_id, timeout=20) == ["one", {"attempt": 2}]
    sides.same_refusal("retry", run_id, "again", expected=wp.RunNotActive)

    break_label(label)
    skipped = sides.start(two_steps, label)
    with pytest.raises(wp.WorkflowFailed):
        sides.operator.result(skipped, timeout=20)
    with pytest.raises(wp.PermissionDenied, match="admin"):  # a step of code: admin only
        sides.operator.skip(skipped, "2", "by hand", output={"by": "hand"})
    base = sides.operator.aio.url
    with wp.Client(base, make_key(sides.engine, "acme", "ann", "admin")) as admin:
        admin.skip(skipped, "2", "by hand", output={"by": "hand"})
        assert admin.result(skipped, timeout=20) == ["one", {"by": "hand"}]
    (event,) = of_type(sides.engine.history(skipped, tenant="acme"), "StepSkipped")
    assert event.data["by"] == "ann" and event.data["reason"] == "by hand"


def test_update_input_as_embedded(sides: Sides) -> None:
    run_id = sides.start("rc_hold", {"amount": 5})
    eventually(lambda: sides.status(run_id) is wp.RunStatus.WAITING, "the run to wait")
    sides.refused_to_others("update_input", run_id, {"amount": 1}, "x")
    sides.same_refusal("update_input", run_id, {"amount": 1}, "", expected=wp.InvalidRequest)
    sides.same_refusal("update_input", "", {"amount": 1}, "x", expected=wp.InvalidRequest)
    sides.same_refusal("update_input", run_id, {"amount": -1}, "x", expected=InputError)
    sides.same_refusal(
        "update_input", run_id, {"amount": float("nan")}, "x", expected=wp.PayloadError
    )
    with pytest.raises(InputError) as remote:
        sides.operator.update_input(run_id, {"amount": -1}, "x")
    with pytest.raises(InputError) as embedded:
        sides.engine.update_input(run_id, {"amount": -1}, "x", tenant="acme")
    assert remote.value.problems == embedded.value.problems
    assert str(remote.value) == str(embedded.value)

    sides.operator.update_input(run_id, {"amount": 9}, "customer asked")
    sides.engine.signal(run_id, "go", {}, tenant="acme")
    assert sides.operator.result(run_id, timeout=20) == {"amount": 9}
    sides.same_refusal("update_input", run_id, {"amount": 1}, "x", expected=wp.RunNotActive)
    code_run = sides.start(waiter, None)
    eventually(lambda: sides.status(code_run) is wp.RunStatus.WAITING, "the run to wait")
    sides.same_refusal("update_input", code_run, {"amount": 1}, "x", expected=wp.InvalidState)


def test_fork_answers_forked_as_embedded(sides: Sides, label: str) -> None:
    mend(label)
    run_id = sides.start(two_steps, label)
    assert sides.operator.result(run_id, timeout=20) == ["one", {"attempt": 1}]
    with pytest.raises(wp.PermissionDenied):
        sides.starter.fork(run_id, reason="x")
    with pytest.raises(wp.RunNotFound):
        sides.outsider.fork(run_id, reason="x")
    sides.same_refusal("fork", run_id, reason="", expected=wp.InvalidRequest)
    sides.same_refusal("fork", "", reason="x", expected=wp.InvalidRequest)
    sides.same_refusal("fork", run_id, reason="x", at_step="99", expected=wp.InvalidRequest)
    sides.same_refusal("fork", run_id, reason="x", new_run_id="a\x00", expected=wp.InvalidRequest)
    for seq in (True, "2", 0, 2**31):  # the server's body would read true and "2" as numbers
        sides.same_refusal("fork", run_id, reason="x", up_to_seq=seq, expected=wp.InvalidRequest)

    forked = sides.operator.fork(run_id, reason="redo step 2", at_step="2", new_run_id="again")
    assert isinstance(forked, wp.Forked)
    assert forked.run_id == "again" and forked.created
    assert forked.forked_from["run_id"] == run_id
    assert forked.forked_from["by"] == "olga"
    assert sides.operator.result("again", timeout=20) == ["one", {"attempt": 1}]
    same = sides.operator.fork(run_id, reason="redo step 2", at_step="2", new_run_id="again")
    embedded = sides.engine.fork(
        run_id, reason="redo step 2", at_step="2", new_run_id="again", tenant="acme"
    )
    assert same == embedded and not same.created
    sides.same_refusal("fork", run_id, reason="x", new_run_id=run_id, expected=wp.RunIdConflict)

    in_flight = sides.start(gated_flow, label)
    assert gate(label + "-started").wait(20)
    sides.same_refusal("fork", in_flight, reason="x", expected=wp.InvalidState)
    gate(label).set()
    assert sides.operator.result(in_flight, timeout=20) == "done"


def test_purge_and_purged_runs_as_embedded(sides: Sides, label: str) -> None:
    mend(label)
    done = sides.start(two_steps, label)
    sides.operator.result(done, timeout=20)
    with pytest.raises(wp.PermissionDenied):
        sides.starter.purge_runs(0)
    sides.same_refusal("purge_runs", 0, dry_run="yes", expected=wp.InvalidRequest)
    for limit in (0, -1, True, "5"):
        sides.same_refusal("purge_runs", 0, limit=limit, expected=wp.InvalidRequest)
        sides.same_refusal("purged_runs", limit=limit, expected=wp.InvalidRequest)
    sides.same_refusal("purge_runs", 0, reason="r\x00", expected=wp.InvalidRequest)
    for age in (-1, float("nan"), float("inf"), "30d", True, timedelta(days=-1)):
        sides.same_refusal("purge_runs", age, expected=wp.InvalidRequest)

    counted = sides.operator.purge_runs(timedelta(0), dry_run=True)
    assert isinstance(counted, PurgeReport)
    assert (counted.tenant, counted.dry_run, counted.runs) == ("acme", True, 1)
    assert counted.events == len(sides.engine.history(done, tenant="acme"))
    assert counted.cutoff.tzinfo is not None
    assert sides.outsider.purge_runs(0).runs == 0  # its tenant has none
    report = sides.operator.purge_runs(0.0, reason="retention test")
    assert (report.runs, report.dry_run, report.events) == (1, False, counted.events)
    with pytest.raises(wp.RunNotFound):
        sides.operator.get(done)

    summary = sides.operator.purged_run(done)
    assert isinstance(summary, PurgedRun)
    assert summary == sides.engine.purged_run(done, tenant="acme")
    assert summary.status is wp.RunStatus.COMPLETED
    assert (summary.purged_by, summary.reason) == ("olga", "retention test")
    assert sides.starter.purged_runs() == [summary]  # a reader may read the summaries
    assert sides.operator.purged_runs(limit=1) == sides.engine.purged_runs(tenant="acme")
    with pytest.raises(wp.RunNotFound):
        sides.outsider.purged_run(done)
    assert sides.outsider.purged_runs() == []
    sides.same_refusal("purged_run", "never-was", expected=wp.RunNotFound)
    for bad in BAD_IDS:
        sides.same_refusal("purged_run", bad, expected=wp.InvalidRequest)


def test_verify_answers_the_problems_the_engine_finds(sides: Sides, db_url: str) -> None:
    run_id = sides.start(waiter, None)
    eventually(lambda: sides.status(run_id) is wp.RunStatus.WAITING, "the run to wait")
    assert sides.operator.verify(run_id) == [] == sides.engine.verify(run_id, tenant="acme")
    sides.refused_to_others("verify", run_id)  # a starter may not; a viewer may
    base = sides.operator.aio.url
    with wp.Client(base, make_key(sides.engine, "acme", "vera", "viewer")) as viewer:
        assert viewer.verify(run_id) == []
    for bad in BAD_IDS:
        sides.same_refusal("verify", bad, expected=wp.InvalidRequest)

    edit = "UPDATE events SET data = ? WHERE tenant = ? AND run_id = ? AND seq = ?"
    params = ('{"edited": true}', "acme", run_id, 1)
    if db_url.startswith("sqlite:///"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            conn.execute(edit, params)
        conn.close()
    else:
        with pg_connect(db_url) as pg:
            pg.execute(edit.replace("?", "%s"), params)
    problems = sides.operator.verify(run_id)
    assert problems and problems == sides.engine.verify(run_id, tenant="acme")
    assert problems[0].seq == 1


def test_the_async_client_has_the_same_calls(sides: Sides, label: str) -> None:
    base = sides.operator.aio.url
    key = make_key(sides.engine, "acme", "ada", "operator")
    run_id = sides.start(waiter, None)
    eventually(lambda: sides.status(run_id) is wp.RunStatus.WAITING, "the run to wait")

    async def operate() -> list[Any]:
        async with wp.AsyncClient(base, key) as client:
            await client.pause(run_id, "async")
            with pytest.raises(wp.InvalidState):
                await client.pause(run_id, "async again")
            paused = (await client.get(run_id)).status
            await client.terminate(run_id, "async end")
            return [paused, await client.verify(run_id), await client.purged_runs()]

    paused, problems, purged = asyncio.run(operate())
    assert (paused, problems, purged) == (wp.RunStatus.PAUSED, [], [])
    assert sides.status(run_id) is wp.RunStatus.TERMINATED
