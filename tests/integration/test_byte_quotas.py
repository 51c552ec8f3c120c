"""Bytes a run, and a tenant's live runs, may hold (both stores): `max_run_bytes` refuses a
signal that would take a run's history past it and suspends a run whose own decision
would; `max_live_run_bytes` refuses starts and signals once the tenant's unfinished runs
hold that much. Each refusal is `QuotaExceeded` naming the quota, with nothing written."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, of_type
from tests.helpers.tenants import with_acme_quotas
from tests.helpers.webhooks import webhook_headers
from tests.integration.server_fixtures import Api, make_key, serve  # noqa: F401

pytestmark = pytest.mark.timeout(120)

KB = "x" * 1000


@wp.workflow(name="bq_listener")
async def bq_listener(ctx: wp.WorkflowContext, n: int) -> int:
    for _ in range(n):
        await ctx.wait_signal("item")
    return n


@wp.activity(retry=wp.Retry(initial_interval=timedelta(0)))
def bq_blob(ctx: wp.ActivityContext, i: int) -> str:
    return f"{i}:" + "y" * 3000


@wp.workflow(name="bq_grower")
async def bq_grower(ctx: wp.WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += len(await ctx.run(bq_blob, i))
    return total


@wp.workflow(name="bq_again")
async def bq_again(ctx: wp.WorkflowContext, rounds: int) -> int:
    await ctx.wait_signal("item")
    if rounds > 1:
        ctx.continue_as_new(rounds - 1)
    return rounds


def stored_bytes(db_url: str, run_id: str) -> tuple[int, int]:
    """(the run's history_bytes, the bytes of its events' data as stored)."""
    [(counted,)] = db_query(db_url, "SELECT history_bytes FROM runs WHERE run_id = ?", (run_id,))
    rows = db_query(db_url, "SELECT data FROM events WHERE run_id = ?", (run_id,))
    return int(counted), sum(len(data.encode()) for (data,) in rows)


def test_a_runs_history_bytes_are_counted_as_it_grows(make_engine: Any, db_url: str) -> None:
    engine = make_engine(bq_grower, bq_blob, bq_again)
    with engine.running():
        run = engine.start(bq_grower, 3)
        assert engine.result(run.run_id, timeout=30) == 3 * 3002
        counted, actual = stored_bytes(db_url, run.run_id)
        assert counted == actual and counted > 9000
        again = engine.start(bq_again, 2)
        eventually(lambda: engine.get(again.run_id).status == "waiting")
        engine.signal(again.run_id, "item", KB)
        # The next generation's history starts afresh: its bytes too.
        eventually(
            lambda: (
                of_type(engine.history(again.run_id), "RunStarted")[0].data.get("generation") == 2
            )
        )
        counted, actual = stored_bytes(db_url, again.run_id)
        assert counted == actual and counted < 1000


def test_a_signal_past_the_runs_bytes_is_refused_and_nothing_is_written(
    make_engine: Any, db_url: str
) -> None:
    engine = with_acme_quotas(make_engine(bq_listener), {"max_run_bytes": 5000})
    run = engine.start(bq_listener, 10, tenant="acme")  # nobody serves it: signals pile up
    for _ in range(4):
        engine.signal(run.run_id, "item", KB, tenant="acme")
    before = stored_bytes(db_url, run.run_id)
    with pytest.raises(wp.QuotaExceeded, match="max_run_bytes") as refused:
        engine.signal(run.run_id, "item", KB, tenant="acme")
    assert refused.value.quota == "max_run_bytes"
    assert stored_bytes(db_url, run.run_id) == before  # nothing written
    assert len(of_type(engine.history(run.run_id, tenant="acme"), "SignalReceived")) == 4
    engine.signal(run.run_id, "item", "small", tenant="acme")  # what fits still gets in
    with pytest.raises(wp.QuotaExceeded, match="max_run_bytes"):
        engine.signal_with_start(
            bq_listener, 10, run_id=run.run_id, signal="item", payload=KB, tenant="acme"
        )


def test_a_run_whose_own_decision_would_pass_its_bytes_is_suspended(
    make_engine: Any, db_url: str
) -> None:
    engine = with_acme_quotas(make_engine(bq_grower, bq_blob), {"max_run_bytes": 12_000})
    with engine.running():
        run = engine.start(bq_grower, 10, tenant="acme")
        eventually(lambda: engine.get(run.run_id, tenant="acme").status == "suspended", timeout=30)
        info = engine.get(run.run_id, tenant="acme")
        assert info.error is not None and info.error["quota"] == "max_run_bytes"
        counted, actual = stored_bytes(db_url, run.run_id)
        # What the run scheduled came back and was kept; its next decision was not.
        assert counted == actual and 12_000 < counted < 12_000 + 3 * 3100
        history = engine.history(run.run_id, tenant="acme")
        assert history[-1].type == "RunSuspended"
        assert history[-2].type == "ActivityCompleted"
        engine.set_quotas("acme", {"max_run_bytes": "unlimited"})
        engine.resume(run.run_id, reason="more room", tenant="acme")
        assert engine.result(run.run_id, timeout=30, tenant="acme") == 10 * 3002


def test_the_tenants_live_runs_bytes_bound_starts_and_signals(make_engine: Any) -> None:
    engine = with_acme_quotas(make_engine(bq_listener), {"max_live_run_bytes": 6000})
    first = engine.start(bq_listener, 10, tenant="acme")
    for _ in range(3):
        engine.signal(first.run_id, "item", KB, tenant="acme")
    second = engine.start(bq_listener, 10, tenant="acme")
    engine.signal(second.run_id, "item", KB, tenant="acme")
    engine.signal(second.run_id, "item", KB, tenant="acme")
    with pytest.raises(wp.QuotaExceeded) as refused:
        engine.signal(second.run_id, "item", KB, tenant="acme")
    assert refused.value.quota == "max_live_run_bytes"
    with pytest.raises(wp.QuotaExceeded) as refused:
        engine.start(bq_listener, [KB], tenant="acme", run_id="third")
    assert refused.value.quota == "max_live_run_bytes"
    assert {r.run_id for r in engine.list_runs(tenant="acme")} == {first.run_id, second.run_id}
    # Another tenant is not held to acme's bytes.
    engine.start(bq_listener, [KB] * 8, tenant="globex")
    # A finished run holds nothing live: there is room again.
    engine.cancel(first.run_id, "done with it", tenant="acme")
    with engine.running():
        eventually(lambda: engine.get(first.run_id, tenant="acme").finished)
    engine.start(bq_listener, [KB], tenant="acme", run_id="third")
    engine.signal(second.run_id, "item", KB, tenant="acme")


def test_a_run_whose_first_events_pass_its_bytes_is_not_started(make_engine: Any) -> None:
    engine = with_acme_quotas(make_engine(bq_listener), {"max_run_bytes": 2000})
    with pytest.raises(wp.QuotaExceeded) as refused:
        engine.start(bq_listener, [KB, KB, KB], tenant="acme", run_id="big")
    assert refused.value.quota == "max_run_bytes"
    assert engine.list_runs(tenant="acme") == []


def test_the_http_api_answers_429_naming_the_byte_quota(
    make_engine: Any,
    serve: Any,  # noqa: F811
) -> None:
    engine = make_engine(bq_listener)
    key = make_key(engine, "acme", "sam", "starter")
    engine.set_quotas("acme", {"max_run_bytes": 3000})
    run = engine.start(bq_listener, 10, tenant="acme")
    with Api(serve(engine), key) as api:
        path = f"/v1/runs/{run.run_id}/signals/item"
        assert api.post(path, json={"payload": KB}).status_code == 202
        assert api.post(path, json={"payload": KB}).status_code == 202
        answer = api.post(path, json={"payload": KB})
        assert answer.status_code == 429, answer.text
        assert answer.json()["error"]["details"]["quota"] == "max_run_bytes"


@wp.workflow(name="bq_hooked")
async def bq_hooked(ctx: wp.WorkflowContext, order_id: str) -> int:
    for _ in range(10):
        await ctx.wait_signal("paid", correlate=("order", order_id))
    return 10


def test_a_webhook_past_the_runs_bytes_is_refused_and_not_kept(make_engine: Any) -> None:
    import json

    engine = with_acme_quotas(make_engine(bq_hooked), {"max_run_bytes": 4000})
    made = engine.create_webhook_source("pay", signal="paid", key="order", path="id", tenant="acme")

    def deliver(delivery_id: str) -> Any:
        body = json.dumps({"id": "o-1", "pad": KB}).encode()
        headers = webhook_headers(made.secret, delivery_id, body)
        return engine.deliver_webhook(made.url_id, headers, body)

    with engine.running():
        run = engine.start(bq_hooked, "o-1", tenant="acme")
        delivered = 0

        def registered() -> int:  # the run's n-th wait is there (not merely still shown)
            history = engine.history(run.run_id, tenant="acme")
            return len(of_type(history, "CorrelationRegistered"))

        refused: wp.QuotaExceeded | None = None
        while refused is None:
            eventually(lambda n=delivered: registered() == n + 1, "the next wait")
            try:
                deliver(f"d{delivered}")
            except wp.QuotaExceeded as exc:
                refused = exc
            else:
                delivered += 1
        assert refused.quota == "max_run_bytes" and "nothing was delivered" in str(refused)
        assert 1 <= delivered < 4
        signals = of_type(engine.history(run.run_id, tenant="acme"), "SignalReceived")
        assert len(signals) == delivered
