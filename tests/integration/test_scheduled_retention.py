"""Scheduled retention on both stores: each tenant's `retention_days`, applied by every
engine's retention job in bounded batches, once however many engines run it."""

from __future__ import annotations

import time
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually
from waypost.engine.faults import NoFaults
from waypost.engine.settings import Settings
from waypost.features import retention
from waypost.testing import TestClock

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)

DAY = 86400.0


@wp.workflow(name="sr_simple")
async def simple(ctx: wp.WorkflowContext, n: int) -> int:
    return n + 1


@wp.workflow(name="sr_waits")
async def waits(ctx: wp.WorkflowContext) -> Any:
    return await ctx.wait_signal("go")


@wp.workflow(name="sr_looper")
async def looper(ctx: wp.WorkflowContext, n: int) -> int:
    await ctx.wait_signal("next")
    ctx.continue_as_new(n + 1)


def _finished(engine: wp.Engine, tenant: str, prefix: str, count: int) -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(count)]
    for run_id in ids:
        engine.start(simple, 1, run_id=run_id, tenant=tenant)
    for run_id in ids:
        assert engine.result(run_id, tenant=tenant, timeout=20) == 2
    return ids


def _exists(engine: wp.Engine, run_id: str, tenant: str) -> bool:
    try:
        engine.get(run_id, tenant=tenant)
    except wp.RunNotFound:
        return False
    return True


def test_each_tenants_retention_purges_its_old_finished_runs_in_batches(
    make_engine: Any, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "RETENTION_BATCH", 3)  # 7 old runs: three transactions
    clock = TestClock()
    make = make_engine
    engine = make(simple, waits, looper, clock=clock, retention_every=None)
    for tenant in ("acme", "keep", "short"):
        engine.create_tenant(tenant)
    engine.set_quotas("acme", {"retention_days": 30})
    engine.set_quotas("short", {"retention_days": 1})
    with engine.running():
        old = _finished(engine, "acme", "old", 7)
        kept = _finished(engine, "keep", "kept", 2)  # no retention: kept for ever
        short = _finished(engine, "short", "s", 1)
        engine.start(waits, tenant="acme", run_id="live")
        loop = engine.start(looper, 0, tenant="acme", run_id="loop")
        loop.signal("next")
        eventually(lambda: loop.history()[0].data.get("generation") == 2, "a generation ended")
        clock.advance(10 * DAY)
        recent = _finished(engine, "acme", "recent", 2)
        clock.advance(21 * DAY)  # 31 days on
    # The job of an engine that runs it (this one's is off: a second engine does it).
    job = make(simple, waits, looper, clock=clock, retention_every=0.05)
    with job.running():
        eventually(lambda: not any(_exists(job, r, "acme") for r in old), "old runs purged")
        eventually(lambda: not _exists(job, short[0], "short"), "the 1-day tenant purged")
    for run_id in [*recent, "live", "loop"]:
        assert _exists(job, run_id, "acme")  # recent and unfinished runs stay
    for run_id in kept:
        assert _exists(job, run_id, "keep")
    summary = job.purged_run(old[0], tenant="acme")
    assert summary.status == "completed" and summary.purged_by == "waypost:retention"
    assert "30 days" in summary.reason
    assert len(job.purged_runs(tenant="acme")) == 7
    mark = "?" if db_url.startswith("sqlite") else "%s"
    rows = db_query(db_url, f"SELECT count(*) FROM events WHERE tenant = {mark}", ("acme",))
    assert rows[0][0] == sum(len(job.history(r, tenant="acme")) for r in [*recent, "live", "loop"])


def test_two_engines_running_retention_purge_each_run_once(make_engine: Any) -> None:
    clock = TestClock()
    first = make_engine(
        simple, clock=clock, retention_every=None, quotas=wp.Quotas(retention_days=2)
    )
    with first.running():
        old = _finished(first, "default", "old", 12)
    clock.advance(3 * DAY)
    a = make_engine(simple, clock=clock, retention_every=0.02, quotas=wp.Quotas(retention_days=2))
    b = make_engine(simple, clock=clock, retention_every=0.02, quotas=wp.Quotas(retention_days=2))
    with a.running(), b.running():
        eventually(lambda: not any(_exists(a, r, "default") for r in old), "old runs purged")
        fresh = _finished(a, "default", "fresh", 2)
    summaries = a.purged_runs()
    assert sorted(s.run_id for s in summaries) == sorted(old)
    assert all(_exists(b, r, "default") for r in fresh)


def test_retention_days_is_a_whole_number_of_days_from_one(make_engine: Any) -> None:
    engine = make_engine(simple, retention_every=None)
    engine.create_tenant("acme")
    for bad in (0, -1, 1.5, "soon", True):
        with pytest.raises(wp.InvalidRequest):
            engine.set_quotas("acme", {"retention_days": bad})
    info = engine.set_quotas("acme", {"retention_days": 7})
    assert info.quotas["retention_days"] == 7
    assert engine.get_tenant(tenant="acme").quotas["retention_days"] == 7
    info = engine.set_quotas("acme", {"retention_days": "unlimited"})
    assert info.quotas["retention_days"] is None  # kept until purged by hand
    with pytest.raises(ValueError, match="retention_days"):
        wp.Quotas(retention_days=0)
    with pytest.raises(wp.ConfigurationError, match="retention_every"):
        Settings(owner="o", clock=time.time, faults=NoFaults(), retention_every=0)


def test_purge_over_http_by_role_and_tenant(make_engine: Any, serve: Any) -> None:
    clock = TestClock()
    engine = make_engine(simple, clock=clock, retention_every=None)
    with engine.running():
        base = serve(engine)
        admin = Api(base, make_key(engine, "acme", "ada", "admin"))
        operator = Api(base, make_key(engine, "acme", "olga", "operator"))
        auditor = Api(base, make_key(engine, "acme", "aud", "auditor"))
        starter = Api(base, make_key(engine, "acme", "sam", "starter"))
        outsider = Api(base, make_key(engine, "other", "oscar", "admin"))
        old = _finished(engine, "acme", "old", 3)
        theirs = _finished(engine, "other", "theirs", 1)
        clock.advance(40 * DAY)

        # Dry run: counts, writes nothing; a starter may not purge.
        counted = admin.post("/v1/runs/purge", json={"older_than": "30d", "dry_run": True})
        assert counted.status_code == 200, counted.text
        assert counted.json()["dry_run"] is True and counted.json()["runs"] == 3
        refused = starter.post("/v1/runs/purge", json={"older_than": "30d"})
        assert refused.status_code == 403
        assert auditor.post("/v1/runs/purge", json={"older_than": "30d"}).status_code == 403
        for bad in ("", "30 days", "1d\n", "x" * 5000, -5, "99999999999d", None):
            answer = admin.post("/v1/runs/purge", json={"older_than": bad})
            assert answer.status_code == 422, (bad, answer.text)
        no_age = admin.post("/v1/runs/purge", json={"dry_run": True})
        assert no_age.status_code == 422
        bad_reason = admin.post("/v1/runs/purge", json={"older_than": 60, "reason": "a\x00b"})
        assert bad_reason.status_code == 422
        assert all(_exists(engine, r, "acme") for r in old)  # nothing was written

        done = operator.post(
            "/v1/runs/purge", json={"older_than": 30 * DAY, "reason": "tidy", "limit": 2}
        )
        assert done.status_code == 200 and done.json()["runs"] == 2
        done = admin.post("/v1/runs/purge", json={"older_than": "4w"})
        assert done.json()["runs"] == 1
        assert not any(_exists(engine, r, "acme") for r in old)
        assert _exists(engine, theirs[0], "other")  # another tenant's run is not touched

        listed = auditor.get("/v1/purged-runs")
        assert listed.status_code == 200
        assert sorted(p["run_id"] for p in listed.json()["purged_runs"]) == sorted(old)
        one = auditor.get(f"/v1/purged-runs/{old[0]}")
        assert one.status_code == 200 and one.json()["status"] == "completed"
        assert one.json()["last_hash"] and one.json()["purged_by"] in ("ada", "olga")
        assert outsider.get(f"/v1/purged-runs/{old[0]}").status_code == 404
        assert outsider.get("/v1/purged-runs").json() == {"purged_runs": []}
        assert auditor.get("/v1/purged-runs/nope").status_code == 404
        assert auditor.get("/v1/purged-runs?limit=0").status_code == 422
        approver = Api(base, make_key(engine, "acme", "ann", "approver"))
        assert approver.get("/v1/purged-runs").status_code == 403  # not a reader of runs
        assert approver.get(f"/v1/purged-runs/{old[0]}").status_code == 403
        for client in (admin, operator, auditor, starter, outsider, approver):
            client.close()
