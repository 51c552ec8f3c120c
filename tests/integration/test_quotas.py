"""Tenant quotas and fair claiming, on both stores, with real engines.

Each quota is enforced and visible (`get_tenant`, a run's `waiting_for` and
`next_action`); a refused start writes nothing; starts from two engines at once
share one count and one token bucket; activities over their quota wait and all
complete; a tenant's long queue does not delay another tenant; priorities order
work within a tenant; the HTTP API answers 429 with `Retry-After` and the quota.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, of_type
from tests.helpers.clocks import FrozenClock
from tests.helpers.flows import sum_of_steps
from tests.helpers.gates import Gate
from tests.helpers.tenants import NO_USAGE, with_acme_quotas
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(240)


@wp.workflow(name="q_wait")
async def q_wait(ctx: wp.WorkflowContext) -> str:
    await ctx.wait_signal("go")
    return "done"


@wp.activity()
async def q_noop(ctx: wp.ActivityContext, n: int) -> int:
    return n


@wp.workflow(name="q_steps")
async def q_steps(ctx: wp.WorkflowContext, steps: int) -> int:
    return await sum_of_steps(ctx, q_noop, steps)


@wp.workflow(name="q_one")
async def q_one(ctx: wp.WorkflowContext, n: int) -> int:
    return int(await ctx.run(q_noop, n))


@wp.workflow(name="q_sleepy")
async def q_sleepy(ctx: wp.WorkflowContext) -> str:
    """Holds a pending timer until signalled (the timeout of its wait)."""
    from datetime import timedelta

    await ctx.wait_signal("go", timeout=timedelta(hours=1))
    return "woke"


@wp.workflow(name="q_napper")
async def q_napper(ctx: wp.WorkflowContext) -> str:
    await ctx.sleep(0.05)
    return "slept"


GATE = Gate()


@wp.activity()
def q_gated(ctx: wp.ActivityContext, n: int) -> int:
    return GATE.hold(n)


@wp.workflow(name="q_fan")
async def q_fan(ctx: wp.WorkflowContext, n: int) -> list[int]:
    return list(await asyncio.gather(*(ctx.run(q_gated, i) for i in range(n))))


def _count(db_url: str, sql: str, *params: Any) -> int:
    return int(db_query(db_url, sql, params)[0][0])


# == configured and visible =========================================================
def test_get_tenant_shows_the_effective_quotas_the_overrides_and_the_usage(
    make_engine: Any,
) -> None:
    engine = make_engine(q_wait, q_sleepy, quotas=wp.Quotas(max_concurrent_runs=100))
    engine.create_tenant("acme")
    with engine.running():
        engine.start(q_wait, tenant="acme")
        sleepy = engine.start(q_sleepy, tenant="acme")
        eventually(lambda: engine.get(sleepy.run_id, tenant="acme").status == "waiting")
        engine.publish(
            {"name": "flow", "start": "s", "steps": {"s": {"type": "succeed"}}}, tenant="acme"
        )
        info = engine.set_quotas("acme", {"max_concurrent_runs": 5, "starts_per_second": 2.5})
        assert info.quotas["max_concurrent_runs"] == 5
        assert info.quotas["starts_per_second"] == 2.5
        assert info.quotas["max_definitions"] == wp.Quotas().max_definitions  # the default
        assert info.quotas["max_payload_bytes"] == wp.Limits().max_payload_bytes  # one setting
        assert info.overrides == {"max_concurrent_runs": 5, "starts_per_second": 2.5}
        assert info.usage == {
            "running_runs": 2,
            "activities_in_flight": 0,
            "pending_timers": 1,
            "definitions": 1,
            "schedules": 0,
            "webhook_sources": 0,
            "queues": 0,
            "users": 0,
            "api_keys": 0,
        }
        # Back to the engine's default, and another tenant sees only its own.
        again = engine.set_quotas("acme", {"max_concurrent_runs": "default"})
        assert again.quotas["max_concurrent_runs"] == 100 and again.overrides == {
            "starts_per_second": 2.5
        }
        other = engine.get_tenant(tenant="globex")
        assert other.created_at is None and other.usage == NO_USAGE
        assert other.quotas["max_concurrent_runs"] == 100


def test_any_role_reads_its_own_tenant_and_only_the_platform_sets_quotas(
    make_engine: Any,
) -> None:
    engine = make_engine()
    engine.create_tenant("acme")
    viewer = Principal("acme", "vic", frozenset({Role.VIEWER}), local=False)
    admin = Principal("acme", "root", frozenset({Role.ADMIN}), local=False)
    assert engine.execute(ops.GetTenant(), viewer).tenant == "acme"
    with pytest.raises(wp.PermissionDenied):
        engine.execute(ops.SetQuotas(tenant="acme", quotas={"max_concurrent_runs": 1}), admin)
    bad: list[Any] = [
        {"nope": 1},
        {"max_concurrent_runs": -1},
        {"max_concurrent_runs": 1.5},
        {"max_concurrent_runs": True},
        {"starts_per_second": 0},
        {"starts_per_second": float("inf")},
        {"start_burst": "unlimited"},
        {"max_events_per_run": 0},
        {"max_concurrent_runs": "lots"},
        {"max_concurrent_runs\x00": 1},
        {},
        ["max_concurrent_runs"],
    ]
    for quotas in bad:
        with pytest.raises(wp.InvalidRequest):
            engine.set_quotas("acme", quotas)
    assert engine.get_tenant(tenant="acme").overrides == {}  # nothing was written
    with pytest.raises(wp.TenantNotFound):
        engine.set_quotas("nobody", {"max_concurrent_runs": 1})
    unlimited = engine.set_quotas("acme", {"max_events_per_run": "unlimited"})
    assert unlimited.quotas["max_events_per_run"] is None


# == admission =========================================================================
def test_a_start_over_max_concurrent_runs_is_refused_and_writes_nothing(
    make_engine: Any, db_url: str
) -> None:
    engine = with_acme_quotas(make_engine(q_wait), {"max_concurrent_runs": 2})
    with engine.running():
        first = engine.start(q_wait, tenant="acme", run_id="r1")
        engine.start(q_wait, tenant="acme", run_id="r2")
        with pytest.raises(wp.QuotaExceeded) as refused:
            engine.start(q_wait, tenant="acme", run_id="r3")
        assert refused.value.quota == "max_concurrent_runs"
        assert refused.value.retry_after is not None and refused.value.retry_after > 0
        for table in ("runs", "events", "tasks"):
            assert _count(db_url, f"SELECT count(*) FROM {table} WHERE run_id = ?", "r3") == 0
        # Finding a run again is not a new run; another tenant is not limited.
        assert not engine.start_run(q_wait, tenant="acme", run_id="r1").created
        engine.start(q_wait, tenant="globex", run_id="r3")
        first.signal("go")
        assert first.result(timeout=10) == "done"
        engine.start(q_wait, tenant="acme", run_id="r3")  # a place freed up
        assert engine.get_tenant(tenant="acme").usage["running_runs"] == 2  # type: ignore[index]


def test_concurrent_starts_on_two_engines_never_exceed_max_concurrent_runs(
    make_engine: Any, db_url: str
) -> None:
    engines = [make_engine(q_wait), make_engine(q_wait)]
    engines[0].create_tenant("acme")
    engines[0].set_quotas("acme", {"max_concurrent_runs": 5})

    def start(i: int) -> str:
        try:
            engines[i % 2].start(q_wait, tenant="acme", run_id=f"c{i}")
            return "started"
        except wp.QuotaExceeded as exc:
            return f"refused: {exc.quota}"

    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(start, range(24)))
    assert outcomes.count("started") == 5
    assert outcomes.count("refused: max_concurrent_runs") == 19
    assert _count(db_url, "SELECT count(*) FROM runs WHERE tenant = ?", "acme") == 5
    started = {f"c{i}" for i, o in enumerate(outcomes) if o == "started"}
    found = {r[0] for r in db_query(db_url, "SELECT DISTINCT run_id FROM events")}
    assert found == started  # the refused ones left no event


def test_the_token_bucket_is_shared_by_two_engines(make_engine: Any, db_url: str) -> None:
    clock = FrozenClock()
    quotas = wp.Quotas(starts_per_second=0.5, start_burst=3)
    a = make_engine(q_wait, quotas=quotas, clock=clock)
    b = make_engine(q_wait, quotas=quotas, clock=clock)
    a.start(q_wait, run_id="t1")
    b.start(q_wait, run_id="t2")
    a.start(q_wait, run_id="t3")
    for engine, run_id in ((b, "t4"), (a, "t4")):
        with pytest.raises(wp.QuotaExceeded) as refused:
            engine.start(q_wait, run_id=run_id)
        assert refused.value.quota == "starts_per_second"
        assert refused.value.retry_after == pytest.approx(2.0, abs=0.01)  # 1 token at 0.5/s
    assert _count(db_url, "SELECT count(*) FROM runs WHERE run_id = ?", "t4") == 0
    clock.now += 2.0  # one token has come back, for whichever engine asks first
    b.start(q_wait, run_id="t4")
    with pytest.raises(wp.QuotaExceeded):
        a.start(q_wait, run_id="t5")
    clock.now += 3600.0  # the bucket holds no more than its burst
    for i in range(3):
        (a, b)[i % 2].start(q_wait, run_id=f"u{i}")
    with pytest.raises(wp.QuotaExceeded):
        a.start(q_wait, run_id="u3")


def test_publishing_over_max_definitions_is_refused(make_engine: Any, db_url: str) -> None:
    engine = make_engine(quotas=wp.Quotas(max_definitions=2))
    flow = {"name": "flow", "start": "s", "steps": {"s": {"type": "succeed"}}}
    engine.publish(flow)
    engine.publish({**flow, "description": "two"})
    assert not engine.publish(flow).created  # the same content again: the same version
    with pytest.raises(wp.QuotaExceeded) as refused:
        engine.publish({**flow, "name": "other"})
    assert refused.value.quota == "max_definitions"
    assert _count(db_url, "SELECT count(*) FROM definitions") == 2


def test_max_payload_bytes_is_one_setting_with_limits(make_engine: Any) -> None:
    engine = make_engine(q_wait, limits=wp.Limits(max_payload_bytes=100))
    engine.create_tenant("acme")
    assert engine.get_tenant(tenant="acme").quotas["max_payload_bytes"] == 100
    with engine.running():
        run = engine.start(q_wait, tenant="acme")
        run.signal("other", "x" * 80)  # within the limits' 100 bytes
        engine.set_quotas("acme", {"max_payload_bytes": 50})  # the quota, set, wins
        assert engine.get_tenant(tenant="acme").quotas["max_payload_bytes"] == 50
        with pytest.raises(wp.QuotaExceeded) as refused:
            run.signal("other", "x" * 60)
        assert refused.value.quota == "max_payload_bytes"


# == work already admitted waits ===========================================================
def test_activities_over_the_limit_wait_visibly_and_all_complete(make_engine: Any) -> None:
    GATE.reset()
    quotas = wp.Quotas(max_concurrent_activities=2)
    a = make_engine(q_fan, q_gated, quotas=quotas)
    b = make_engine(q_fan, q_gated, quotas=quotas)
    with a.running(), b.running():
        runs = [a.start(q_fan, 3), b.start(q_fan, 3)]

        def quota_shown() -> bool:
            infos = [r.get() for r in runs]
            return any(
                any(w.get("kind") == "quota" for w in i.waiting_for)
                and (i.next_action or {}).get("kind") == "quota"
                for i in infos
            )

        eventually(lambda: GATE.now() == 2, "two activities running")
        info = eventually(quota_shown, "a run showing that it waits for the quota")
        assert info
        assert a.get_tenant().usage["activities_in_flight"] == 2  # type: ignore[index]
        waiting = next(w for r in runs for w in r.get().waiting_for if w.get("kind") == "quota")
        assert waiting["quota"] == "max_concurrent_activities"
        assert "max_concurrent_activities" in waiting["detail"]
        GATE.open.set()
        assert [r.result(timeout=30) for r in runs] == [[0, 1, 2], [0, 1, 2]]
    assert GATE.highest() == 2  # never more than the quota, across both engines


def test_a_run_over_max_events_per_run_is_suspended_and_a_full_history_refuses_signals(
    make_engine: Any,
) -> None:
    engine = make_engine(q_steps, q_noop, q_wait, quotas=wp.Quotas(max_events_per_run=12))
    engine.create_tenant("acme")
    with engine.running():
        run = engine.start(q_steps, 20, tenant="acme")
        info = eventually(
            lambda: (i := run.get()).status == "suspended" and i, "the run is suspended"
        )
        assert info.error is not None
        assert info.error["type"] == "QuotaExceeded"
        assert info.error["quota"] == "max_events_per_run"
        assert "continue_as_new" in info.error["message"]
        (why,) = info.waiting_for
        assert why["kind"] == "operator" and "continue_as_new" in why["detail"]
        # The decision that would pass it is not recorded: what it took in and RunSuspended are.
        history = run.history()
        assert len(history) <= 14
        assert history[-1].type == "RunSuspended"
        assert not of_type(history, "RunFailed")
        short = engine.start(q_steps, 3, tenant="acme")
        assert short.result(timeout=10) == 3  # a run within the limit is not touched
        waiting = engine.start(q_wait, tenant="acme")
        eventually(lambda: waiting.get().status == "waiting")
        with pytest.raises(wp.QuotaExceeded) as refused:  # noqa: PT012
            for i in range(20):
                waiting.signal("other", i)
        assert refused.value.quota == "max_events_per_run"
        assert len(waiting.history()) == 12
        # Nothing was lost: with a higher quota, `resume` replays the code, which decides
        # again, and it completes.
        engine.set_quotas("acme", {"max_events_per_run": 1000})
        engine.resume(run.run_id, "the quota is raised", tenant="acme")
        assert run.result(timeout=20) == sum(range(20))
        assert of_type(run.history(), "RunResumed")


def test_timers_over_max_pending_timers_wait_visibly_then_go_on(make_engine: Any) -> None:
    engine = make_engine(q_sleepy, q_napper, quotas=wp.Quotas(max_pending_timers=1))
    with engine.running():
        holder = engine.start(q_sleepy)
        eventually(lambda: holder.get().status == "waiting")
        napper = engine.start(q_napper)

        def deferred() -> dict[str, Any] | None:
            info = napper.get()
            quota = [w for w in info.waiting_for if w.get("kind") == "quota"]
            if quota and (info.next_action or {}).get("kind") == "quota":
                return quota[0]
            return None

        entry = eventually(deferred, "the second run waiting for the timer quota")
        assert entry["quota"] == "max_pending_timers"
        assert napper.get().status == "waiting"
        holder.signal("go")  # its timer is cancelled: the other run's timer may start
        assert holder.result(timeout=10) == "woke"
        assert napper.result(timeout=20) == "slept"
        assert engine.get_tenant().usage["pending_timers"] == 0  # type: ignore[index]


# == fairness and priority ===================================================================
BACKLOG = 2_000


def test_a_tenants_backlog_does_not_delay_another_tenant(make_engine: Any, db_url: str) -> None:
    queuer = make_engine(q_one, q_noop)  # not serving: every start is queued
    for i in range(BACKLOG):
        queuer.start(q_one, i, tenant="a-hot", run_id=f"a{i:05d}")
    quiet = queuer.start(q_one, 7, tenant="b-quiet", run_id="b")  # queued behind all of them
    worker = make_engine(q_one, q_noop, max_workflows=4, max_activities=4)
    with worker.running():
        assert quiet.result(timeout=60) == 7
    done_at = db_query(db_url, "SELECT finished_at FROM runs WHERE run_id = ?", ("b",))[0][0]
    before = _count(
        db_url,
        "SELECT count(*) FROM runs WHERE tenant = ? AND finished_at IS NOT NULL "
        "AND finished_at <= ?",
        "a-hot",
        done_at,
    )
    unfinished = _count(
        db_url, "SELECT count(*) FROM runs WHERE tenant = ? AND finished_at IS NULL", "a-hot"
    )
    assert before < 100, f"{before} of the busy tenant's runs finished before the quiet one's"
    assert unfinished > BACKLOG // 2  # most of the backlog was still queued


def test_priorities_order_work_within_a_tenant(make_engine: Any, db_url: str) -> None:
    queuer = make_engine(q_one, q_noop)
    for i in range(30):
        queuer.start(q_one, i, run_id=f"low{i:02d}")
    queuer.start(q_one, 99, run_id="high", priority=5)
    queuer.start(q_one, 98, run_id="mid", priority=1)
    assert db_query(db_url, "SELECT priority FROM tasks WHERE run_id = ?", ("high",)) == [(5,)]
    assert queuer.get("high").priority == 5
    with pytest.raises(wp.InvalidRequest):
        queuer.start(q_one, 1, priority=10**6)
    worker = make_engine(q_one, q_noop, max_workflows=1, max_activities=1)
    with worker.running():
        assert worker.result("low29", timeout=60) == 29
    order = [r[0] for r in db_query(db_url, "SELECT run_id FROM runs ORDER BY finished_at, run_id")]
    assert order[:2] == ["high", "mid"]
    assert order[2:] == sorted(order[2:])  # then the oldest first


# == over HTTP ===============================================================================
@pytest.fixture
def api(make_engine: Any, serve: Any) -> Iterator[dict[str, Any]]:
    engine = make_engine(q_wait)
    running = engine.running()
    running.__enter__()
    base = serve(engine)
    starter = Api(base, make_key(engine, "acme", "sam", "starter", "viewer"))
    yield {"engine": engine, "starter": starter}
    starter.http.close()
    running.__exit__(None, None, None)


def test_http_answers_429_with_retry_after_and_the_quota(api: dict[str, Any]) -> None:
    engine, starter = api["engine"], api["starter"]
    engine.set_quotas("acme", {"max_concurrent_runs": 1})
    assert starter.post("/v1/runs", json={"workflow": "q_wait"}).status_code == 201
    refused = starter.post("/v1/runs", json={"workflow": "q_wait"})
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == "quota_exceeded" and error["details"]["quota"] == "max_concurrent_runs"

    engine.set_quotas(
        "acme", {"max_concurrent_runs": "default", "starts_per_second": 0.01, "start_burst": 1}
    )
    assert starter.post("/v1/runs", json={"workflow": "q_wait"}).status_code == 201
    limited = starter.post("/v1/runs", json={"workflow": "q_wait", "priority": 3})
    assert limited.status_code == 429
    assert limited.json()["error"]["details"]["quota"] == "starts_per_second"
    assert int(limited.headers["Retry-After"]) > 60  # a token every 100 s

    tenant = starter.get("/v1/tenant")
    assert tenant.status_code == 200
    body = tenant.json()
    assert body["tenant"] == "acme" and body["usage"]["running_runs"] == 2
    assert body["quotas"]["starts_per_second"] == 0.01
    assert body["overrides"] == {"starts_per_second": 0.01, "start_burst": 1}
    anonymous = Api(starter.base, None)
    assert anonymous.get("/v1/tenant").status_code == 401
    anonymous.http.close()
