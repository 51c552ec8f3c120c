"""Retention on both stores: finished runs purged after N days, leaving a summary.

The engines run on a clock the test moves, so "old" and "recent" are exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually
from tests.helpers.clocks import FrozenClock
from waypost.errors import InvalidRequest, PermissionDenied, RunNotFound
from waypost.features.senders import FileSender
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role

pytestmark = pytest.mark.timeout(120)

DAY = 86400.0
WAYPOST = Path(sys.executable).with_name("waypost")


@wp.workflow(name="ret_simple")
async def simple(ctx: wp.WorkflowContext, n: int) -> int:
    return n + 1


@wp.workflow(name="ret_waits")
async def waits(ctx: wp.WorkflowContext) -> Any:
    return await ctx.wait_signal("go")


@wp.workflow(name="ret_approval")
async def approved(ctx: wp.WorkflowContext) -> str:
    decision = await ctx.approval("ok", approvers=wp.AnyOf(users=["ann"]))
    return decision.outcome


def notification(path: Path, approval_id: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        if not path.exists():
            return None
        notes = [json.loads(line) for line in path.read_text().splitlines()]
        mine = [n for n in notes if n["approval_id"] == approval_id]
        return mine[-1] if mine else None

    found: dict[str, Any] = eventually(find, "the approval's notification")
    return found


def head(engine: Any, run_id: str, tenant: str = "default") -> tuple[int, str]:
    events = engine.history(run_id, tenant=tenant)
    return events[-1].seq, events[-1].hash


def count(db_url: str, table: str, run_id: str) -> int:
    return int(
        db_query(
            db_url,
            f"SELECT count(*) FROM {table} WHERE run_id = ? AND tenant = 'default'",
            (run_id,),
        )[0][0]
    )


def test_old_finished_runs_are_purged_and_leave_their_summary(
    make_engine: Any, db_url: str, tmp_path: Path
) -> None:
    clock = FrozenClock()
    mail = tmp_path / "mail.jsonl"
    engine = make_engine(simple, waits, approved, clock=clock, notifier=FileSender(mail))
    with engine.running():
        done = engine.start(simple, 1, run_id="old-done")
        assert done.result(timeout=30) == 2
        asked = engine.start(approved, run_id="old-approved")
        approval = eventually(lambda: (engine.approvals(run_id="old-approved") or [None])[0])
        note = notification(mail, approval.approval_id)
        engine.decide(approval.approval_id, note["approve_token"], "ann", "approve")
        assert asked.result(timeout=30) == "approved"
        cancelled = engine.start(waits, run_id="old-cancelled")
        eventually(lambda: engine.get("old-cancelled").status == wp.RunStatus.WAITING)
        cancelled.cancel("not needed")
        eventually(lambda: engine.get("old-cancelled").status.finished)
        engine.start(waits, run_id="old-waiting")  # old, but not finished: kept
        other = engine.start(simple, 5, run_id="old-done", tenant="other")
        assert other.result(timeout=30) == 6
        eventually(lambda: engine.get("old-waiting").status == wp.RunStatus.WAITING)

        clock.now += 40 * DAY
        recent = engine.start(simple, 2, run_id="recent-done")
        assert recent.result(timeout=30) == 3

        old = ("old-done", "old-approved", "old-cancelled")
        heads = {r: head(engine, r) for r in old}
        assert db_query(db_url, "SELECT count(*) FROM approval_credentials")[0][0] > 0
        events_before = int(db_query(db_url, "SELECT count(*) FROM events")[0][0])

        dry = engine.purge_runs(30 * DAY, dry_run=True)
        assert dry.dry_run and dry.runs == 3
        assert dry.events == sum(seq for seq, _ in heads.values())
        assert int(db_query(db_url, "SELECT count(*) FROM events")[0][0]) == events_before
        assert db_query(db_url, "SELECT count(*) FROM purged_runs")[0][0] == 0

        report = engine.purge_runs(30 * DAY, reason="retention policy")
        assert (report.runs, report.events, report.approvals) == (3, dry.events, 1)
        assert report.outbox >= 1 and report.batches == 1 and not report.dry_run

        for run_id in old:
            with pytest.raises(RunNotFound):
                engine.get(run_id)
            with pytest.raises(RunNotFound):
                engine.history(run_id)
            for table in ("events", "tasks", "timers", "approvals", "correlations"):
                assert count(db_url, table, run_id) == 0, table
            summary = engine.purged_run(run_id)
            assert (summary.last_seq, summary.last_hash) == heads[run_id]
            assert summary.reason == "retention policy" and summary.workflow.startswith("ret_")
        assert engine.purged_run("old-cancelled").status == wp.RunStatus.CANCELLED
        assert engine.purged_run("old-approved").status == wp.RunStatus.COMPLETED
        assert db_query(db_url, "SELECT count(*) FROM approval_credentials")[0][0] == 0
        assert db_query(db_url, "SELECT count(*) FROM approval_votes")[0][0] == 0
        assert db_query(db_url, "SELECT count(*) FROM outbox")[0][0] == 0
        assert {p.run_id for p in engine.purged_runs()} == set(old)

        # recent, unfinished and the other tenant's runs are untouched
        assert engine.get("recent-done").result == 3
        assert engine.get("old-waiting").status == wp.RunStatus.WAITING
        assert engine.get("old-done", tenant="other").result == 6
        with pytest.raises(RunNotFound):
            engine.purged_run("old-done", tenant="other")
        assert engine.purged_runs(tenant="other") == []
        assert engine.verify("old-done", tenant="other") == []

        again = engine.purge_runs(30 * DAY)
        assert again.runs == 0
        engine.signal("old-waiting", "go", 1)
        assert engine.get("old-waiting").status != wp.RunStatus.FAILED


def test_limits_purge_the_oldest_first(make_engine: Any, db_url: str) -> None:
    clock = FrozenClock()
    engine = make_engine(simple, clock=clock)
    with engine.running():
        for i in range(5):
            assert engine.start(simple, i, run_id=f"r{i}").result(timeout=30) == i + 1
            clock.now += 60
        clock.now += DAY
        first = engine.purge_runs(DAY, limit=2)
        assert first.runs == 2
        assert {p.run_id for p in engine.purged_runs()} == {"r0", "r1"}
        rest = engine.purge_runs(DAY)
        assert rest.runs == 3
        assert engine.purge_runs(0).runs == 0
        for i in range(3):
            engine.start(simple, i, run_id=f"s{i}").result(timeout=30)
        clock.now += 1
        small = engine.execute(
            ops.PurgeRuns(older_than_seconds=0, batch=2), engine.aio.local("default")
        )
        assert (small.runs, small.batches) == (3, 2)


@pytest.mark.parametrize(
    ("older_than", "options"),
    [
        (-1, {}),
        (float("nan"), {}),
        (float("inf"), {}),
        (True, {}),
        ("30d", {}),
        (1e12, {}),
        (DAY, {"limit": 0}),
        (DAY, {"limit": True}),
        (DAY, {"limit": 10**9}),
        (DAY, {"reason": "bad\x00reason"}),
        (DAY, {"reason": "x" * 100_000}),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    make_engine: Any, sqlite_url: str, older_than: Any, options: dict[str, Any]
) -> None:
    clock = FrozenClock()
    engine = make_engine(simple, url=sqlite_url, clock=clock)
    with engine.running():
        engine.start(simple, 1, run_id="kept").result(timeout=30)
    clock.now += 10 * DAY
    with pytest.raises(InvalidRequest):
        engine.purge_runs(older_than, **options)
    assert engine.get("kept").result == 2
    assert db_query(sqlite_url, "SELECT count(*) FROM purged_runs")[0][0] == 0


def test_only_operators_and_admins_purge(make_engine: Any, sqlite_url: str) -> None:
    engine = make_engine(url=sqlite_url)
    viewer = Principal("default", "vic", frozenset({Role.VIEWER}))
    with pytest.raises(PermissionDenied):
        engine.execute(ops.PurgeRuns(older_than_seconds=0), viewer)


def waypost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WAYPOST), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )


def test_the_command_purges_with_progress_and_shows_summaries(
    make_engine: Any, sqlite_url: str
) -> None:
    engine = make_engine(simple, url=sqlite_url)
    with engine.running():
        for i in range(3):
            engine.start(simple, i, run_id=f"c{i}").result(timeout=30)
    engine.close()
    bad = waypost("runs", "purge", "--older-than", "30x", "--db", sqlite_url)
    assert bad.returncode != 0 and "--older-than" in bad.stderr and "30d" in bad.stderr
    dry = waypost("runs", "purge", "--older-than", "0s", "--dry-run", "--db", sqlite_url)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would purge 3 runs")
    old = waypost("runs", "purge", "--older-than", "30d", "--db", sqlite_url)
    assert old.returncode == 0, old.stderr
    assert old.stdout.startswith("purged 0 runs")
    done = waypost("runs", "purge", "--older-than", "0s", "--reason", "cleanup", "--db", sqlite_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("purged 3 runs")
    assert "batch 1: 3 runs" in done.stderr
    shown = waypost("runs", "purged", "c1", "--db", sqlite_url)
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert summary["run_id"] == "c1" and summary["reason"] == "cleanup"
    assert summary["status"] == "completed"
    listed = json.loads(waypost("runs", "purged", "--db", sqlite_url).stdout)
    assert {s["run_id"] for s in listed} == {"c0", "c1", "c2"}
    gone = waypost("runs", "show", "c1", "--db", sqlite_url)
    assert gone.returncode == 1 and "c1" in gone.stderr
