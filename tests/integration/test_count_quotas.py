"""How many schedules, webhook sources, queues, console users and API keys a tenant may
have, and how often its schedules may fire: quotas with finite defaults, settable per
tenant, counted in the transaction that creates (both stores)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import waypost as wp
from tests.integration.server_fixtures import Api, make_key, serve  # noqa: F401

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="cq_noop")
async def cq_noop(ctx: wp.WorkflowContext, x: Any = None) -> Any:
    return x


def _schedule(engine: wp.Engine, n: int, tenant: str) -> None:
    engine.schedule(cq_noop, id=f"s{n}", every=3600, input=n, tenant=tenant)


def _source(engine: wp.Engine, n: int, tenant: str) -> None:
    engine.create_webhook_source(
        f"{tenant}-src{n}", signal="paid", key="order", path="data.id", tenant=tenant
    )


def _queue(engine: wp.Engine, n: int, tenant: str) -> None:
    engine.configure_queue(f"q{n}", concurrency=5, tenant=tenant)


def _user(engine: wp.Engine, n: int, tenant: str) -> None:
    engine.create_user(f"user{n}", ["viewer"], "a long enough password", tenant=tenant)


def _key(engine: wp.Engine, n: int, tenant: str) -> None:
    engine.create_key(f"svc{n}", ["viewer"], tenant=tenant)


def _drop_schedule(engine: wp.Engine, n: int, tenant: str) -> None:
    engine.delete_schedule(f"s{n}", tenant=tenant)


def _drop_source(engine: wp.Engine, n: int, tenant: str) -> None:
    engine.delete_webhook_source(f"{tenant}-src{n}", tenant=tenant)


def _drop_user(engine: wp.Engine, n: int, tenant: str) -> None:
    engine.disable_user(f"user{n}", tenant=tenant)


def _drop_key(engine: wp.Engine, n: int, tenant: str) -> None:
    key_id = next(k.key_id for k in engine.list_keys(tenant=tenant) if k.principal == f"svc{n}")
    engine.revoke_key(key_id, tenant=tenant)


Make = Callable[[wp.Engine, int, str], None]
KINDS: dict[str, tuple[Make, Make | None, str]] = {
    "max_schedules": (_schedule, _drop_schedule, "schedules"),
    "max_webhook_sources": (_source, _drop_source, "webhook_sources"),
    "max_queues": (_queue, None, "queues"),  # a configured queue stays
    "max_users": (_user, _drop_user, "users"),
    "max_api_keys": (_key, _drop_key, "api_keys"),
}


def test_the_count_quotas_have_finite_defaults() -> None:
    quotas = wp.Quotas()
    for quota in (*KINDS, "min_schedule_interval", "max_run_bytes"):
        value = getattr(quotas, quota)
        assert isinstance(value, int) and value > 0, quota
    assert quotas.min_schedule_interval == 60


@pytest.mark.parametrize("quota", sorted(KINDS))
def test_one_more_than_the_quota_is_refused_and_nothing_is_written(
    make_engine: Any, quota: str
) -> None:
    make, drop, usage = KINDS[quota]
    engine = make_engine(cq_noop)
    engine.create_tenant("acme")
    engine.create_tenant("globex")
    engine.set_quotas("acme", {quota: 2})
    make(engine, 1, "acme")
    make(engine, 2, "acme")
    with pytest.raises(wp.QuotaExceeded) as refused:
        make(engine, 3, "acme")
    assert refused.value.quota == quota
    assert "has 2 " in str(refused.value) and quota in str(refused.value)
    assert engine.get_tenant(tenant="acme").usage[usage] == 2  # the refused one is not there
    # Another tenant has its own count.
    for n in (1, 2, 3):
        make(engine, n, "globex")
    assert engine.get_tenant(tenant="globex").usage[usage] == 3
    if drop is not None:  # one fewer makes room again
        drop(engine, 1, "acme")
        make(engine, 3, "acme")
    else:  # reconfiguring a queue the tenant has is not a new one
        make(engine, 2, "acme")
    engine.set_quotas("acme", {quota: "unlimited"})
    make(engine, 4, "acme")


@pytest.mark.parametrize("quota", ["max_schedules", "max_users", "max_api_keys", "max_queues"])
def test_concurrent_creations_never_pass_the_quota(make_engine: Any, quota: str) -> None:
    make, _, usage = KINDS[quota]
    engine = make_engine(cq_noop)
    engine.create_tenant("acme")
    engine.set_quotas("acme", {quota: 3})

    async def one(n: int) -> bool:
        try:
            await asyncio.to_thread(make, engine, n, "acme")
        except wp.QuotaExceeded:
            return False
        return True

    async def all_at_once() -> list[bool]:
        return await asyncio.gather(*(one(n) for n in range(12)))

    made = asyncio.run(all_at_once())
    assert sum(made) == 3
    assert engine.get_tenant(tenant="acme").usage[usage] == 3


def test_a_schedule_may_not_fire_more_often_than_the_tenants_minimum(make_engine: Any) -> None:
    engine = make_engine(cq_noop)
    engine.create_tenant("acme")
    with pytest.raises(wp.InvalidRequest) as refused:
        engine.schedule(cq_noop, id="fast", every=1, tenant="acme")
    assert "min_schedule_interval" in str(refused.value) and refused.value.field == "every"
    assert "every 60s" in str(refused.value)
    engine.schedule(cq_noop, id="minutely", every=60, tenant="acme")
    engine.schedule(cq_noop, id="cron", cron="* * * * *", tenant="acme")  # a minute apart

    engine.set_quotas("acme", {"min_schedule_interval": 3600})
    for cron in ("*/5 * * * *", "0,30 9 * * *", "0,59 0,23 * * *"):  # the last: 23:59, 00:00
        with pytest.raises(wp.InvalidRequest) as refused:
            engine.schedule(cq_noop, id="c", cron=cron, tenant="acme")
        assert refused.value.field == "cron", cron
    with pytest.raises(wp.InvalidRequest):
        engine.schedule(cq_noop, id="e", every=3599, tenant="acme")
    engine.schedule(cq_noop, id="daily", cron="0 9 * * *", tenant="acme")
    engine.schedule(cq_noop, id="hourly", cron="0 * * * *", tenant="acme")
    engine.schedule(cq_noop, id="every-hour", every=3600, tenant="acme")
    assert len(engine.schedules(tenant="acme")) == 5

    engine.set_quotas("acme", {"min_schedule_interval": 1})
    engine.schedule(cq_noop, id="fast", every=1, tenant="acme")
    engine.set_quotas("acme", {"min_schedule_interval": "unlimited"})  # no minimum
    engine.schedule(cq_noop, id="faster", every=1.0, tenant="acme")


def test_the_http_api_answers_429_naming_the_quota(
    make_engine: Any,
    serve: Callable[..., str],  # noqa: F811
) -> None:
    engine = make_engine(cq_noop)
    key = make_key(engine, "acme", "ada", "admin")
    engine.set_quotas("acme", {"max_webhook_sources": 1, "max_queues": 0})
    with engine.running(), Api(serve(engine), key) as api:
        body = {"signal": "paid", "correlate_key": "order", "correlate_path": "data.id"}
        assert api.post("/v1/webhook-sources", json={**body, "source": "a"}).status_code == 201
        answer = api.post("/v1/webhook-sources", json={**body, "source": "b"})
        assert answer.status_code == 429
        error = answer.json()["error"]
        assert error["code"] == "quota_exceeded" and error["details"]["quota"] == (
            "max_webhook_sources"
        )
        answer = api.put("/v1/queues/emails", json={"concurrency": 2})
        assert answer.status_code == 429, answer.text
        assert answer.json()["error"]["details"]["quota"] == "max_queues"
