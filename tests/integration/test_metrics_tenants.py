"""GET /metrics names tenants only to the holder of the metrics token, on both stores.

Without a token the endpoint is open, and every series comes without its tenant,
workflow and queue labels, added up over them; with one, a scrape that brings it sees
the series by tenant.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

import waypost as wp
from tests.helpers import eventually
from waypost.observability import Metrics
from waypost.observability.metrics import WithoutTenantLabels

from .server_fixtures import serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)

SECRET_NAMES = ("acme-secret-co", "globex-hidden", "payroll_for_acme", "vip-queue")


@wp.activity(queue="vip-queue")
async def pay_tm(ctx: wp.ActivityContext) -> str:
    return "paid"


@wp.workflow(name="payroll_for_acme")
async def payroll(ctx: wp.WorkflowContext) -> str:
    return str(await ctx.run(pay_tm))


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _run_for_two_tenants(make_engine: Any, serve: Any, **options: Any) -> tuple[Any, str]:
    metrics = Metrics()
    engine = make_engine(payroll, pay_tm, observer=metrics)
    metrics.watch_store(engine.aio.store, engine.aio.clock, ttl=0.0)
    base = serve(engine, metrics=metrics, **options)
    for tenant in ("acme-secret-co", "globex-hidden"):
        for n in range(2 if tenant == "acme-secret-co" else 1):
            engine.start(payroll, tenant=tenant, run_id=f"{tenant}-{n}")
    with engine.running():
        for run_id in ("acme-secret-co-0", "acme-secret-co-1", "globex-hidden-0"):
            tenant = run_id.rsplit("-", 1)[0]
            assert engine.result(run_id, tenant=tenant, timeout=30) == "paid"
    return engine, base


def test_an_open_metrics_endpoint_names_no_tenant_workflow_or_queue(
    make_engine: Any, serve: Any
) -> None:
    engine, base = _run_for_two_tenants(make_engine, serve)

    def scraped() -> str | None:
        answer = httpx.get(f"{base}/metrics", timeout=10)
        assert answer.status_code == 200
        samples = _samples(answer.text)
        completed = samples.get(("waypost_runs_completed_total", ()))
        return answer.text if completed == 3 else None

    text = eventually(scraped, "the three completed runs counted")
    for name in SECRET_NAMES:
        assert name not in text, name
    samples = _samples(text)
    assert samples[("waypost_runs_started_total", ())] == 3  # added up over the tenants
    assert samples[("waypost_runs", (("status", "completed"),))] == 3
    assert samples[("waypost_activity_steps_total", (("activity", "pay_tm"),))] == 3
    assert not any(
        {"tenant", "workflow", "queue"} & {k for k, _ in labels} for _, labels in samples
    )


def test_with_a_metrics_token_its_holder_sees_the_series_by_tenant(
    make_engine: Any, serve: Any
) -> None:
    engine, base = _run_for_two_tenants(make_engine, serve, metrics_token="scrape-secret")
    assert httpx.get(f"{base}/metrics", timeout=10).status_code == 401
    headers = {"Authorization": "Bearer scrape-secret"}

    def scraped() -> dict[Any, float] | None:
        samples = _samples(httpx.get(f"{base}/metrics", timeout=10, headers=headers).text)
        key = (
            "waypost_runs_completed_total",
            (("tenant", "acme-secret-co"), ("workflow", "payroll_for_acme")),
        )
        return samples if samples.get(key) == 2 else None

    samples = eventually(scraped, "acme's two completed runs counted")
    key = (("tenant", "globex-hidden"), ("workflow", "payroll_for_acme"))
    assert samples[("waypost_runs_completed_total", key)] == 1


def test_series_without_tenant_labels_add_up_and_keep_the_rest() -> None:
    registry = CollectorRegistry()
    runs = Counter("t_runs", "Runs.", ["tenant", "workflow", "outcome"], registry=registry)
    runs.labels("a", "w1", "ok").inc(2)
    runs.labels("b", "w2", "ok").inc(3)
    runs.labels("b", "w2", "failed").inc()
    age = Gauge("t_oldest_age_seconds", "Age.", ["tenant", "queue"], registry=registry)
    age.labels("a", "q1").set(5)
    age.labels("b", "q2").set(9)
    lag = Histogram("t_lag", "Lag.", ["tenant"], buckets=(1, 10), registry=registry)
    lag.labels("a").observe(0.5)
    lag.labels("b").observe(5)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for metric in WithoutTenantLabels(registry).collect()
        for s in metric.samples
    }
    assert samples[("t_runs_total", (("outcome", "ok"),))] == 5
    assert samples[("t_runs_total", (("outcome", "failed"),))] == 1
    assert samples[("t_oldest_age_seconds", ())] == 9  # the oldest, not a sum
    assert samples[("t_lag_bucket", (("le", "1.0"),))] == 1
    assert samples[("t_lag_bucket", (("le", "10.0"),))] == 2
    assert samples[("t_lag_count", ())] == 2
    assert samples[("t_lag_sum", ())] == 5.5
    created = [v for (name, _), v in samples.items() if name == "t_runs_created"]
    assert len(created) == 2  # one per outcome: the earliest of the tenants'
