"""`fork` on both stores: a new, linked run from a run's history up to a step, its copied
steps' results reused (not executed again), through every door."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type, until_event
from tests.helpers.cli import waypost_on
from tests.helpers.gates import gate
from waypost.features.senders import FileSender
from waypost.model import operations as ops
from waypost.model.chain import verify_chain
from waypost.testing.invariants import check_invariants

from .server_fixtures import run_commanders, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)

WAYPOST = Path(sys.executable).with_name("waypost")
_lock = threading.Lock()
calls: dict[str, list[int]] = {}
bugs: set[str] = set()  # labels whose step 3 still has its bug


def executions(label: str) -> list[int]:
    with _lock:
        return list(calls.get(label, []))


@wp.activity(name="fork.count", retry=wp.Retry(max_attempts=1))
def count(ctx: wp.ActivityContext, label: str, n: int) -> int:
    with _lock:
        calls.setdefault(label, []).append(n)
        buggy = n == 3 and label in bugs
    if buggy:
        raise RuntimeError(f"bug in step {n}")
    return n * 10


@wp.activity(name="fork.gated", retry=wp.Retry(max_attempts=1))
def gated(ctx: wp.ActivityContext, label: str) -> str:
    with _lock:
        calls.setdefault(label, []).append(0)
    gate(label).wait(30)
    return "opened"


@wp.workflow(name="fork_three")
async def three(ctx: wp.WorkflowContext, label: str) -> list[int]:
    return [await ctx.run(count, label, n) for n in (1, 2, 3)]


@wp.workflow(name="fork_waiter")
async def waiter(ctx: wp.WorkflowContext, label: str) -> list[Any]:
    first = await ctx.run(count, label, 1)
    got = await ctx.wait_signal("go")
    return [first, got, await ctx.run(count, label, 2)]


@wp.workflow(name="fork_approval")
async def with_approval(ctx: wp.WorkflowContext, label: str) -> str:
    await ctx.run(count, label, 1)
    decision = await ctx.approval("boss", approvers=wp.AnyOf(users=["ann"]))
    await ctx.run(count, label, 2)
    return decision.outcome


@wp.workflow(name="fork_busy")
async def busy(ctx: wp.WorkflowContext, label: str) -> str:
    return await ctx.run(gated, label)


def failed_source(engine: wp.Engine, label: str) -> str:
    """A run of `three` whose step 3 failed (a bug), then the bug fixed."""
    bugs.add(label)
    run = engine.start(three, label)
    with pytest.raises(wp.WorkflowFailed, match="bug in step 3"):
        engine.result(run.run_id, timeout=20)
    bugs.discard(label)
    assert executions(label) == [1, 2, 3]
    return run.run_id


def local_verify(engine: wp.Engine, run_id: str, tenant: str = "default") -> None:
    assert engine.verify(run_id, tenant=tenant) == []
    assert verify_chain(engine.history(run_id, tenant=tenant), run=(tenant, run_id)) == []


# == what a fork copies and runs =================================================


def test_a_fork_of_a_failed_run_reuses_the_finished_steps_and_runs_the_cut_step_again(
    make_engine: Any, label: str
) -> None:
    engine = make_engine(three, count)
    with engine.running():
        source = failed_source(engine, label)
        forked = engine.fork(source, reason="bug fixed in step 3", at_step="3")
        assert forked.created
        assert engine.result(forked.run_id, timeout=20) == [10, 20, 30]
    # Steps 1 and 2 were not executed again; step 3 ran once more, in the fork.
    assert executions(label) == [1, 2, 3, 3]
    history = engine.history(forked.run_id)
    started = history[0]
    assert started.type == "RunStarted"
    assert started.data["input"] == label
    link = started.data["forked_from"]
    assert link == forked.forked_from
    assert {k: link[k] for k in ("run_id", "step", "reason", "copied")} == {
        "run_id": source,
        "step": "3",
        "reason": "bug fixed in step 3",
        "copied": 4,
    }
    assert link["by"]  # the local principal: the OS user
    types = [e.type for e in history]
    assert types == [
        "RunStarted",
        *["ActivityScheduled", "ActivityCompleted"] * 3,
        "RunCompleted",
    ]
    # The copies keep the source's data; the new step carries the fork's own key.
    src = engine.history(source)
    assert history[1].data == src[1].data and history[2].data == src[2].data
    keys = [e.data["key"] for e in of_type(history, "ActivityScheduled")]
    src_keys = [e.data["key"] for e in of_type(src, "ActivityScheduled")]
    assert keys[:2] == src_keys[:2] and keys[2] != src_keys[2]
    # A finished source's history is closed: no RunForked in it.
    assert not of_type(src, "RunForked")
    assert engine.get(source).status == wp.RunStatus.FAILED
    local_verify(engine, source)
    local_verify(engine, forked.run_id)
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_a_retried_run_is_forked_as_it_counts_without_what_the_retry_voided(
    make_engine: Any, label: str
) -> None:
    engine = make_engine(three, count)
    with engine.running():
        source = failed_source(engine, label)
        engine.retry(source, reason="bug fixed in step 3")
        assert engine.result(source, timeout=20) == [10, 20, 30]
        assert executions(label) == [1, 2, 3, 3]
        whole = engine.fork(source, reason="a copy of the repaired run")
        assert engine.result(whole.run_id, timeout=20) == [10, 20, 30]
        assert executions(label) == [1, 2, 3, 3]  # every step reused, the retried one too
        again = engine.fork(source, reason="redo step 3", at_step="3")
        assert engine.result(again.run_id, timeout=20) == [10, 20, 30]
    assert executions(label) == [1, 2, 3, 3, 3]
    copied = engine.history(whole.run_id)
    assert not of_type(copied, "ActivityFailed") and not of_type(copied, "RunFailed")
    # the retry is copied with its step (its attempt numbering), voiding nothing here
    assert [e.data["voids"] for e in of_type(copied, "RunRetried")] == [[]]
    for run_id in (source, whole.run_id, again.run_id):
        local_verify(engine, run_id)
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_a_fork_by_event_number_and_without_a_cut(make_engine: Any, label: str) -> None:
    engine = make_engine(three, count)
    with engine.running():
        source = failed_source(engine, label)
        by_seq = engine.fork(source, reason="from event 3", up_to_seq=3)
        assert engine.result(by_seq.run_id, timeout=20) == [10, 20, 30]
        assert executions(label) == [1, 2, 3, 2, 3]  # step 2 finished after event 3
        whole = engine.fork(source, reason="everything")
        # The failed step is copied too: the fork fails the same way, running nothing.
        with pytest.raises(wp.WorkflowFailed, match="bug in step 3"):
            engine.result(whole.run_id, timeout=20)
        assert whole.forked_from["copied"] == 6
    assert executions(label) == [1, 2, 3, 2, 3]
    local_verify(engine, by_seq.run_id)
    local_verify(engine, whole.run_id)


def test_a_waiting_source_records_the_fork_and_both_go_on(make_engine: Any, label: str) -> None:
    engine = make_engine(waiter, count)
    with engine.running():
        run = engine.start(waiter, label)
        eventually(lambda: engine.get(run.run_id).status == wp.RunStatus.WAITING, "the wait")
        forked = engine.fork(run.run_id, reason="try it again", new_run_id=f"{label}-fork")
        assert forked.run_id == f"{label}-fork"
        eventually(lambda: engine.get(forked.run_id).status == wp.RunStatus.WAITING, "its wait")
        (link,) = of_type(engine.history(run.run_id), "RunForked")
        assert link.data == {
            "to_run_id": forked.run_id,
            "seq": forked.forked_from["seq"],
            "step": None,
            "by": forked.forked_from["by"],
            "reason": "try it again",
        }
        # The same fork again is the same run, and the source records it once.
        again = engine.fork(run.run_id, reason="asked twice", new_run_id=f"{label}-fork")
        assert (again.run_id, again.created) == (forked.run_id, False)
        assert again.forked_from == forked.forked_from  # as the fork recorded it
        assert len(of_type(engine.history(run.run_id), "RunForked")) == 1
        engine.signal(forked.run_id, "go", "fork")
        assert engine.result(forked.run_id, timeout=20) == [10, "fork", 20]
        engine.signal(run.run_id, "go", "source")  # the code never saw RunForked
        assert engine.result(run.run_id, timeout=20) == [10, "source", 20]
    assert sorted(executions(label)) == [1, 2, 2]  # step 1 once, for both runs
    local_verify(engine, run.run_id)
    local_verify(engine, forked.run_id)
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_a_fork_asks_an_approval_again_and_copies_nothing_past_it(
    make_engine: Any, label: str, tmp_path: Path
) -> None:
    engine = make_engine(with_approval, count, notifier=FileSender(tmp_path / "n.jsonl"))
    with engine.running():
        run = engine.start(with_approval, label)
        first = eventually(lambda: engine.approvals(run_id=run.run_id), "the approval")[0]
        approval_seq = of_type(engine.history(run.run_id), "ApprovalRequested")[0].seq
        with pytest.raises(wp.InvalidRequest, match="an approval"):
            engine.fork(run.run_id, reason="past it", up_to_seq=approval_seq)
        forked = engine.fork(run.run_id, reason="ask again")
        assert forked.forked_from["seq"] == approval_seq - 1
        asked = eventually(lambda: engine.approvals(run_id=forked.run_id), "a new approval")[0]
        assert asked.approval_id != first.approval_id
        assert engine.approval(first.approval_id).status == "pending"
    assert executions(label) == [1]
    local_verify(engine, forked.run_id)


def test_a_definition_run_forks_at_a_named_step_and_stays_on_its_version(
    make_engine: Any, label: str
) -> None:
    body = """
name: fork_definition
start: first
steps:
  first:
    type: activity
    activity: fork.count
    input: {label: label, n: "`1`"}
    next: second
  second:
    type: activity
    activity: fork.count
    input: {label: label, n: "`3`"}
    next: done
  done:
    type: succeed
"""
    engine = make_engine(count)
    with engine.running():
        engine.publish(body)
        bugs.add(label)
        run = engine.start("fork_definition", {"label": label})
        with pytest.raises(wp.WorkflowFailed):
            engine.result(run.run_id, timeout=20)
        bugs.discard(label)
        engine.publish(body.replace("type: succeed", "type: fail\n    error: changed"))
        forked = engine.fork(run.run_id, reason="fixed", at_step="second")
        engine.result(forked.run_id, timeout=20)
        info = engine.get(forked.run_id)
        assert (info.workflow, info.version, info.status) == (
            "fork_definition",
            "1",
            wp.RunStatus.COMPLETED,
        )
    assert executions(label) == [1, 3, 3]
    assert engine.history(forked.run_id)[0].data["definition"]["version"] == 1
    local_verify(engine, forked.run_id)


@wp.workflow(name="fork_three")
async def three_cut_short(ctx: wp.WorkflowContext, label: str) -> list[int]:
    """`three` changed so that it no longer reaches step 2 (a different code, same name)."""
    return [await ctx.run(count, label, 1)]


def test_a_fork_whose_code_no_longer_issues_a_copied_step_is_suspended_not_advanced(
    make_engine: Any, label: str
) -> None:
    first = make_engine(three, count)
    with first.running():
        source = failed_source(first, label)
    first.close()
    changed = make_engine(three_cut_short, count)
    with changed.running():
        forked = changed.fork(source, reason="with the new code", at_step="3")
        eventually(
            lambda: changed.get(forked.run_id).status == wp.RunStatus.SUSPENDED,
            "the fork to be suspended",
        )
        info = changed.get(forked.run_id)
        assert info.error is not None and info.error["type"] == "NondeterminismError"
        history = changed.history(forked.run_id)
        assert not of_type(history, "RunCompleted")
        assert executions(label) == [1, 2, 3]  # nothing ran again
        # A suspended run may be forked too: before step 2, the new code completes.
        again = changed.fork(forked.run_id, reason="before the change", at_step="2")
        assert changed.result(again.run_id, timeout=20) == [10]
        (link,) = of_type(changed.history(forked.run_id), "RunForked")
        assert link.data["to_run_id"] == again.run_id and link.data["step"] == "2"
        assert changed.get(forked.run_id).status == wp.RunStatus.SUSPENDED
    assert executions(label) == [1, 2, 3]
    local_verify(changed, forked.run_id)
    local_verify(changed, again.run_id)


# == refusals ====================================================================


def test_fork_refusals_write_nothing(make_engine: Any, label: str) -> None:
    engine = make_engine(three, busy, count, gated)
    with engine.running():
        source = failed_source(engine, label)
        other = engine.start(three, f"{label}-other")
        engine.result(other.run_id, timeout=20)
        before = {r.run_id for r in engine.list_runs()}

        def refused(error: type[Exception], match: str | None = None, **kwargs: Any) -> None:
            kwargs.setdefault("reason", "r")
            with pytest.raises(error, match=match):
                engine.fork(kwargs.pop("run_id", source), **kwargs)

        refused(wp.RunNotFound, run_id="no-such-run")
        refused(wp.RunNotFound, tenant="elsewhere")  # another tenant's run is not found
        refused(wp.InvalidRequest, "no step", at_step="9")
        refused(wp.InvalidRequest, "events", up_to_seq=999)
        refused(wp.InvalidRequest, "not both", at_step="3", up_to_seq=2)
        refused(wp.InvalidRequest, reason="")
        refused(wp.InvalidRequest, reason="x" * 100_000)
        refused(wp.InvalidRequest, reason="a\x00b")
        refused(wp.InvalidRequest, at_step="")
        refused(wp.InvalidRequest, at_step="3\x1b[2J")
        refused(wp.InvalidRequest, at_step="s" * 10_000)
        refused(wp.InvalidRequest, up_to_seq=0)
        refused(wp.InvalidRequest, new_run_id="bad\nid")
        refused(wp.RunIdConflict, new_run_id=other.run_id)  # another run has that id
        refused(wp.RunIdConflict, new_run_id=source)
        # Roles: an operator (or admin) may fork; a starter or viewer may not.
        for role in (wp.Role.STARTER, wp.Role.VIEWER, wp.Role.APPROVER):
            who = wp.Principal("default", "sam", frozenset({role}))
            with pytest.raises(wp.PermissionDenied):
                engine.execute(ops.Fork(run_id=source, reason="r"), who)
        # A step in flight would run in both runs: refused while running, and while
        # paused (the attempt goes on); once it has finished, the fork reuses it.
        running = engine.start(busy, f"{label}-busy")
        eventually(lambda: executions(f"{label}-busy") == [0], "the attempt to start")
        refused(wp.InvalidState, "has not finished", run_id=running.run_id)
        engine.pause(running.run_id, "to fork it")
        refused(wp.InvalidState, "has not finished", run_id=running.run_id)
        gate(f"{label}-busy").set()
        until_event(
            engine, running.run_id, "ActivityCompleted", "the result to be recorded while paused"
        )
        paused_fork = engine.fork(running.run_id, reason="paused first")
        assert paused_fork.forked_from["copied"] == 2
        assert engine.result(paused_fork.run_id, timeout=20) == "opened"
        assert executions(f"{label}-busy") == [0]  # reused, not run again
        assert engine.get(running.run_id).status == wp.RunStatus.PAUSED
        after = {r.run_id for r in engine.list_runs()}
        assert after - before == {running.run_id, paused_fork.run_id}
    assert of_type(engine.history(source), "RunForked") == []
    admin = wp.Principal("default", "ada", frozenset({wp.Role.ADMIN}))
    made = engine.execute(ops.Fork(run_id=source, reason="admin may", at_step="3"), admin)
    assert made.forked_from["by"] == "ada"


def test_a_fork_is_a_start_under_the_tenants_quotas(make_engine: Any, label: str) -> None:
    engine = make_engine(waiter, count, quotas=wp.Quotas(max_concurrent_runs=1))
    with engine.running():
        run = engine.start(waiter, label)
        eventually(lambda: engine.get(run.run_id).status == wp.RunStatus.WAITING, "the wait")
        with pytest.raises(wp.QuotaExceeded):
            engine.fork(run.run_id, reason="one too many")
        assert len(engine.list_runs()) == 1
        assert not of_type(engine.history(run.run_id), "RunForked")


# == HTTP and the CLI ============================================================


def test_over_http_an_operator_forks_and_others_may_not(
    make_engine: Any, serve: Any, label: str
) -> None:
    engine = make_engine(three, count)
    with engine.running():
        bugs.add(label)
        run = engine.start(three, label, tenant="acme")
        with pytest.raises(wp.WorkflowFailed):
            engine.result(run.run_id, timeout=20, tenant="acme")
        bugs.discard(label)
        base = serve(engine)
        with run_commanders(engine, base, "operator") as (operator, starter, outsider):
            url = f"/v1/runs/{run.run_id}/fork"
            body = {"reason": "fixed", "step": "3", "run_id": f"{label}-f"}
            assert starter.post(url, json=body).status_code == 403
            hidden = outsider.post(url, json=body)
            missing = operator.post("/v1/runs/nope/fork", json=body)
            assert hidden.status_code == missing.status_code == 404
            assert hidden.json()["error"]["code"] == missing.json()["error"]["code"]
            assert operator.post(url, json={"step": "3"}).status_code == 422  # no reason
            bad = operator.post(url, json={"reason": "x", "step": "nope"})
            assert bad.status_code == 422 and bad.json()["error"]["details"]["field"] == "step"
            made = operator.post(url, json=body)
            assert made.status_code == 201, made.text
            answer = made.json()
            assert answer["run_id"] == f"{label}-f" and answer["created"] is True
            assert answer["forked_from"]["run_id"] == run.run_id
            assert answer["forked_from"]["by"] == "olga"
            again = operator.post(url, json=body)
            assert again.status_code == 200 and again.json()["run_id"] == f"{label}-f"
            clash = operator.post(url, json={**body, "step": "2"})
            assert clash.status_code == 409
        assert engine.result(f"{label}-f", timeout=20, tenant="acme") == [10, 20, 30]
    assert executions(label) == [1, 2, 3, 3]


def test_the_cli_forks_a_run(make_engine: Any, db_url: str, label: str) -> None:
    engine = make_engine(three, count)
    with engine.running():
        source = failed_source(engine, label)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return waypost_on(db_url, "runs", "fork", *args)

    done = cli(source, "--reason", "fixed", "--at", "3", "--new-id", f"{label}-cli")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{label}-cli"
    as_json = cli(source, "--reason", "fixed", "--at", "3", "--new-id", f"{label}-cli", "--json")
    assert as_json.returncode == 0, as_json.stderr
    import json

    answer = json.loads(as_json.stdout)
    assert answer["run_id"] == f"{label}-cli" and answer["created"] is False
    assert cli(source, "--at", "3").returncode != 0  # --reason is required
    wrong = cli(source, "--reason", "x", "--at", "9")
    assert wrong.returncode != 0 and "no step" in wrong.stderr
    both = cli(source, "--reason", "x", "--at", "3", "--seq", "2")
    assert both.returncode != 0
    with engine.running():
        assert engine.result(f"{label}-cli", timeout=20) == [10, 20, 30]
    assert executions(label) == [1, 2, 3, 3]
    shown = subprocess.run(
        [str(WAYPOST), "runs", "show", f"{label}-cli", "--db", db_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"forked from {source}" in shown.stdout


def test_an_async_engine_forks_too(db_url: str, label: str) -> None:
    async def body() -> None:
        engine = wp.AsyncEngine(db_url, poll_interval=0.05, lease=2.0)
        engine.register(three, count)
        try:
            async with engine.running():
                bugs.add(label)
                run = await engine.start(three, label)
                with pytest.raises(wp.WorkflowFailed):
                    await engine.result(run.run_id, timeout=20)
                bugs.discard(label)
                forked = await engine.fork(run.run_id, reason="async", at_step="3")
                assert await engine.result(forked.run_id, timeout=20) == [10, 20, 30]
        finally:
            await engine.close()

    asyncio.run(body())
    assert executions(label) == [1, 2, 3, 3]


def test_identical_forks_at_once_make_one_run_and_one_link(make_engine: Any, label: str) -> None:
    engine = make_engine(waiter, count)
    with engine.running():
        run = engine.start(waiter, label)
        eventually(lambda: engine.get(run.run_id).status == wp.RunStatus.WAITING, "the wait")

        async def at_once() -> list[wp.Forked]:
            fork = engine.aio.fork
            same = [fork(run.run_id, reason="at once", new_run_id=f"{label}-f") for _ in range(5)]
            return list(await asyncio.gather(*same))

        answers = engine._call(at_once())
        assert {a.run_id for a in answers} == {f"{label}-f"}
        assert sum(a.created for a in answers) == 1
        links = of_type(engine.history(run.run_id), "RunForked")
        assert [e.data["to_run_id"] for e in links] == [f"{label}-f"]
        engine.signal(f"{label}-f", "go", 1)
        assert engine.result(f"{label}-f", timeout=20) == [10, 1, 20]
    assert executions(label) == [1, 2]
