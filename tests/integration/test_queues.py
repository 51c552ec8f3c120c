"""Named queues on both stores, with real engines: the limits hold and are visible.

A queue's concurrency limit holds across two engines, and its other queues are not
held up; a rate limit lets no more start than its bucket allows; priorities order
the attempts of a limited queue; a limit set, kept and removed is what the next
claim honours; bad settings are refused with the field named and write nothing;
another tenant's queues are not found; the HTTP API and the remote client answer
the same.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.gates import Gate
from waypost.model.queues import QueueInfo

from .server_fixtures import Api, make_key, metrics_text, serve, serve_metered

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(240)


GATE = Gate()


@wp.activity(queue="payments")
def qq_pay(ctx: wp.ActivityContext, n: int) -> int:
    return GATE.hold(n)


@wp.activity()
async def qq_free(ctx: wp.ActivityContext, n: int) -> int:
    return n


@wp.activity(queue="metered")
def qq_metered(ctx: wp.ActivityContext, n: int) -> int:
    GATE.enter(n)
    GATE.leave()
    return n


@wp.workflow(name="qq_fan")
async def qq_fan(ctx: wp.WorkflowContext, n: int) -> list[int]:
    return list(await asyncio.gather(*(ctx.run(qq_pay, i) for i in range(n))))


@wp.workflow(name="qq_one")
async def qq_one(ctx: wp.WorkflowContext, n: int) -> int:
    return int(await ctx.run(qq_pay, n))


@wp.workflow(name="qq_free_fan")
async def qq_free_fan(ctx: wp.WorkflowContext, n: int) -> list[int]:
    return list(await asyncio.gather(*(ctx.run(qq_free, i) for i in range(n))))


@wp.workflow(name="qq_meter")
async def qq_meter(ctx: wp.WorkflowContext, n: int) -> list[int]:
    return list(await asyncio.gather(*(ctx.run(qq_metered, i) for i in range(n))))


def _fresh_gate() -> None:
    GATE.reset()


# == concurrency ============================================================================
def test_a_concurrency_limit_holds_across_two_engines_and_other_queues_go_on(
    make_engine: Any,
) -> None:
    _fresh_gate()
    a = make_engine(qq_fan, qq_pay, qq_free_fan, qq_free)
    b = make_engine(qq_fan, qq_pay, qq_free_fan, qq_free)
    info = a.configure_queue("payments", concurrency=2)
    assert (info.name, info.concurrency, info.rate, info.configured) == (
        "payments",
        2,
        None,
        True,
    )
    with a.running(), b.running():
        runs = [a.start(qq_fan, 3), b.start(qq_fan, 3)]
        eventually(lambda: GATE.now() == 2, "two payments running")
        shown = eventually(
            lambda: (q := a.queue("payments")).depth == 4 and q, "four payments waiting"
        )
        assert shown.running == 2
        assert shown.oldest_age is not None and shown.oldest_age >= 0
        # The default queue is not held up by a full "payments".
        assert a.start(qq_free_fan, 5).result(timeout=30) == [0, 1, 2, 3, 4]
        assert GATE.now() == 2
        GATE.open.set()
        assert [r.result(timeout=60) for r in runs] == [[0, 1, 2], [0, 1, 2]]
    assert GATE.highest() == 2  # never more than the limit, across both engines
    listed = {q.name: q for q in a.queues()}
    assert set(listed) == {"payments"}  # the default queue's attempts are done and gone
    assert (listed["payments"].depth, listed["payments"].running) == (0, 0)


def test_a_raised_limit_lets_waiting_attempts_start_and_a_removed_one_lets_all(
    make_engine: Any,
) -> None:
    _fresh_gate()
    engine = make_engine(qq_fan, qq_pay)
    engine.configure_queue("payments", concurrency=1)
    with engine.running():
        run = engine.start(qq_fan, 4)
        eventually(lambda: GATE.now() == 1, "one payment running")
        eventually(lambda: engine.queue("payments").depth == 3, "three waiting")
        engine.configure_queue("payments", concurrency=3)
        eventually(lambda: GATE.now() == 3, "three payments running")
        raised = engine.configure_queue("payments", rate=(100, 1.0))  # concurrency kept
        assert (raised.concurrency, raised.rate) == (3, (100, 1.0))
        removed = engine.configure_queue("payments", concurrency=None)
        assert (removed.concurrency, removed.rate) == (None, (100, 1.0))
        eventually(lambda: GATE.now() == 4, "every payment running")
        GATE.open.set()
        assert run.result(timeout=30) == [0, 1, 2, 3]


def test_priorities_order_the_attempts_of_a_limited_queue(make_engine: Any) -> None:
    _fresh_gate()
    engine = make_engine(qq_one, qq_pay)
    engine.configure_queue("payments", concurrency=1)
    with engine.running():
        blocker = engine.start(qq_one, -1)
        eventually(lambda: GATE.started == [-1], "the first payment holds the slot")
        waiting = [engine.start(qq_one, p, priority=p) for p in (0, 5, 10, 3)]
        eventually(lambda: engine.queue("payments").depth == 4, "four waiting")
        GATE.open.set()
        assert [r.result(timeout=30) for r in waiting] == [0, 5, 10, 3]
        assert blocker.result(timeout=30) == -1
    assert GATE.started == [-1, 10, 5, 3, 0]
    assert GATE.highest() == 1


# == rate ===================================================================================
def test_a_rate_limit_lets_no_more_start_than_its_bucket(make_engine: Any) -> None:
    _fresh_gate()
    n, per = 5, 1.0  # a bucket of 5, refilled at 5 a second
    engine = make_engine(qq_meter, qq_metered)
    engine.configure_queue("metered", rate=(n, per))
    total = 20
    with engine.running():
        began = time.time()
        assert engine.start(qq_meter, total).result(timeout=60) == list(range(total))
        took = time.time() - began
    times = sorted(GATE.times)
    assert len(times) == total
    # The bucket starts full; the other 15 need 3 s of refill.
    assert took >= (total - n) * per / n - 0.2
    tolerance = 1  # an attempt's start is seen a little after its claim
    for i, first in enumerate(times):
        for j in range(i, total):
            window = times[j] - first
            assert j - i + 1 <= n + math.floor(window * n / per + 1e-9) + tolerance, (
                f"{j - i + 1} attempts started within {window:.3f}s"
            )


# == bad input and tenants ==================================================================
@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        ({"concurrency": 0}, "concurrency", "concurrency must be a whole number"),
        ({"concurrency": -3}, "concurrency", "concurrency must be a whole number"),
        ({"concurrency": True}, "concurrency", "concurrency must be a whole number"),
        ({"concurrency": 2.5}, "concurrency", "concurrency must be a whole number"),
        ({"concurrency": "3"}, "concurrency", "concurrency must be a whole number"),
        ({"concurrency": 10**12}, "concurrency", "concurrency must be a whole number"),
        ({"rate": (0, 1.0)}, "rate", "rate's N"),
        ({"rate": (5, 0)}, "rate", "rate's period"),
        ({"rate": (5, math.nan)}, "rate", "rate's period"),
        ({"rate": (5, math.inf)}, "rate", "rate's period"),
        ({"rate": "5/s"}, "rate", "rate must be a pair"),
        ({"rate": (1, 2, 3)}, "rate", "rate must be a pair"),
        ({"rate": [[5], 1]}, "rate", "rate's N"),
        ({}, "queue", "give a limit"),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_bad_settings_are_refused_with_the_field_and_write_nothing(
    make_engine: Any, options: dict[str, Any], field: str, words: str
) -> None:
    engine = make_engine()
    with pytest.raises(wp.InvalidRequest) as refused:
        engine.configure_queue("payments", **options)
    assert refused.value.field == field
    assert words in str(refused.value)
    assert engine.queues() == []


@pytest.mark.parametrize("name", ["", "a b", "x" * 201, "q\n", "pay/ments", "\u202epay"])
def test_bad_queue_names_are_refused(make_engine: Any, name: str) -> None:
    engine = make_engine()
    with pytest.raises(wp.InvalidRequest) as refused:
        engine.configure_queue(name, concurrency=1)
    assert refused.value.field == "queue"
    with pytest.raises(wp.InvalidRequest):
        engine.queue(name)
    assert engine.queues() == []


def test_a_tenants_queues_are_its_own(make_engine: Any) -> None:
    engine = make_engine()
    engine.configure_queue("payments", concurrency=2, tenant="acme")
    assert [q.name for q in engine.queues(tenant="acme")] == ["payments"]
    assert engine.queues(tenant="globex") == []
    with pytest.raises(wp.QueueNotFound):
        engine.queue("payments", tenant="globex")
    with pytest.raises(wp.QueueNotFound):
        engine.queue("nothing", tenant="acme")


def test_an_activitys_queue_name_is_checked_when_it_is_declared() -> None:
    with pytest.raises(wp.ConfigurationError, match="queue"):

        @wp.activity(queue="no spaces")
        def bad(ctx: wp.ActivityContext) -> None: ...


# == HTTP and the remote client =============================================================
def test_queues_over_http_and_the_remote_client(make_engine: Any, serve: Any) -> None:
    _fresh_gate()
    engine = make_engine(qq_fan, qq_pay)
    base = serve(engine)
    admin = Api(base, make_key(engine, "acme", "ada", "admin"))
    viewer = Api(base, make_key(engine, "acme", "vic", "viewer"))
    other = Api(base, make_key(engine, "globex", "gus", "admin"))

    put = admin.put("/v1/queues/payments", json={"concurrency": 1, "rate": [50, 10]})
    assert put.status_code == 200, put.text
    assert put.json()["concurrency"] == 1 and put.json()["rate"] == [50, 10.0]
    kept = admin.put("/v1/queues/payments", json={"rate": None}).json()
    assert (kept["concurrency"], kept["rate"]) == (1, None)
    assert viewer.put("/v1/queues/payments", json={"concurrency": 5}).status_code == 403
    bad = admin.put("/v1/queues/payments", json={"concurrency": -1})
    assert bad.status_code == 422
    assert bad.json()["error"]["details"]["field"] == "concurrency"
    assert admin.put("/v1/queues/payments", json={"nested": {"x": 1}}).status_code == 422
    assert admin.put("/v1/queues/pay%20ments", json={"concurrency": 1}).status_code == 422

    with engine.running():
        run = engine.start(qq_fan, 3, tenant="acme")
        eventually(lambda: GATE.now() == 1, "one payment running")
        listed = eventually(
            lambda: (b := viewer.get("/v1/queues").json())["queues"][0]["depth"] == 2 and b,
            "two payments waiting",
        )
        (q,) = listed["queues"]
        assert (q["name"], q["running"], q["concurrency"]) == ("payments", 1, 1)
        assert q["oldest_age"] >= 0
        assert viewer.get("/v1/queues/payments").json()["running"] == 1
        assert other.get("/v1/queues").json() == {"queues": []}
        missing = other.get("/v1/queues/payments")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "queue_not_found"

        with wp.Client(base, admin.key or "") as client:
            got = client.queue("payments")
            assert isinstance(got, QueueInfo) and got.running == 1
            assert [x.name for x in client.queues()] == ["payments"]
            set_ = client.configure_queue("payments", rate=(7, 2.5))
            assert (set_.concurrency, set_.rate) == (1, (7, 2.5))
            with pytest.raises(wp.InvalidRequest):
                client.configure_queue("payments", concurrency=0)
            with pytest.raises(wp.QueueNotFound):
                client.queue("nothing")
        GATE.open.set()
        assert run.result(timeout=30) == [0, 1, 2]


# == metrics ================================================================================
def test_metrics_show_a_named_queues_depth_running_and_oldest_age(
    make_engine: Any, serve: Any
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    _fresh_gate()
    engine, base = serve_metered(make_engine, serve, qq_fan, qq_pay)
    engine.configure_queue("payments", concurrency=1)

    def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = metrics_text(base)
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    key = (("queue", "payments"), ("tenant", "default"))
    with engine.running():
        run = engine.start(qq_fan, 3)
        eventually(lambda: GATE.now() == 1, "one payment running")
        seen = eventually(
            lambda: (m := scrape()).get(("waypost_named_queue_depth", key)) == 2 and m,
            "two payments waiting in the gauges",
        )
        assert seen[("waypost_named_queue_running", key)] == 1
        assert seen[("waypost_named_queue_oldest_age_seconds", key)] >= 0
        leased = ("waypost_queue_running", (("kind", "activity"), ("queue", "qq_pay"), key[1]))
        assert seen[leased] == 1  # the task queue of an activity is its name: qq_pay
        GATE.open.set()
        assert run.result(timeout=30) == [0, 1, 2]


# == definitions ============================================================================
@wp.activity(name="qq.gated")
def qq_gated(ctx: wp.ActivityContext, n: int) -> int:
    return GATE.hold(n)


QUEUED_DEFINITION = {
    "name": "qq_defn",
    "start": "pay",
    "steps": {
        "pay": {
            "type": "activity",
            "activity": "qq.gated",
            "queue": "payments",
            "input": {"n": "n"},
            "output": "$.paid",
            "next": "done",
        },
        "done": {"type": "succeed", "output": "paid"},
    },
}


def test_a_definitions_step_names_its_queue_and_the_limit_holds(make_engine: Any) -> None:
    _fresh_gate()
    engine = make_engine(qq_gated)
    engine.publish(QUEUED_DEFINITION)
    engine.configure_queue("payments", concurrency=1)
    with engine.running():
        runs = [engine.start("qq_defn", {"n": n}) for n in range(3)]
        eventually(lambda: GATE.now() == 1, "one step running")
        eventually(lambda: engine.queue("payments").depth == 2, "two steps waiting")
        GATE.open.set()
        assert sorted(r.result(timeout=30) for r in runs) == [0, 1, 2]
    assert GATE.highest() == 1
    bad = {**QUEUED_DEFINITION, "name": "qq_bad"}
    bad["steps"] = {**bad["steps"], "pay": {**bad["steps"]["pay"], "queue": "no spaces"}}
    with pytest.raises(wp.DefinitionError) as refused:
        engine.publish(bad)
    assert [p.path for p in refused.value.problems] == ["steps.pay.queue"]


def test_each_tenants_limit_is_its_own_in_the_claims_of_two_engines(make_engine: Any) -> None:
    _fresh_gate()
    a = make_engine(qq_fan, qq_pay)
    b = make_engine(qq_fan, qq_pay)
    a.configure_queue("payments", concurrency=1, tenant="acme")
    a.configure_queue("payments", concurrency=2, tenant="globex")
    with a.running(), b.running():
        runs = [a.start(qq_fan, 3, tenant="acme"), b.start(qq_fan, 3, tenant="globex")]
        eventually(lambda: GATE.now() == 3, "one of acme's and two of globex's running")
        assert a.queue("payments", tenant="acme").running == 1
        assert b.queue("payments", tenant="globex").running == 2
        assert a.queue("payments", tenant="acme").depth == 2
        GATE.open.set()
        assert [r.result(timeout=30) for r in runs] == [[0, 1, 2], [0, 1, 2]]
    assert GATE.highest() == 3


# == concurrency keys =======================================================================
KEYS = Gate()


@wp.activity(queue="per-customer")
def qq_keyed(ctx: wp.ActivityContext, key: str) -> str:
    return KEYS.hold(key, key)


@wp.workflow(name="qq_keyed_run")
async def qq_keyed_run(ctx: wp.WorkflowContext, key: str) -> str:
    return str(await ctx.run(qq_keyed, key))


def test_a_concurrency_key_bounds_the_runs_of_one_key_across_two_engines(
    make_engine: Any,
) -> None:
    KEYS.reset()
    a = make_engine(qq_keyed_run, qq_keyed)
    b = make_engine(qq_keyed_run, qq_keyed)
    info = a.configure_queue("per-customer", key_concurrency=1)
    assert (info.key_concurrency, info.concurrency) == (1, None)
    with a.running(), b.running():
        runs = [
            *(a.start(qq_keyed_run, "cust-1", concurrency_key="cust-1") for _ in range(3)),
            *(b.start(qq_keyed_run, "cust-2", concurrency_key="cust-2") for _ in range(2)),
            *(a.start(qq_keyed_run, "none") for _ in range(2)),  # no key: not bounded by one
        ]
        eventually(lambda: KEYS.now() == 4, "one of each key and both without one")
        eventually(lambda: a.queue("per-customer").depth == 3, "three waiting")
        assert KEYS.now_per_key() == {"cust-1": 1, "cust-2": 1, "none": 2}
        # Raised to 2 per key, one more of cust-1 and one of cust-2 start.
        a.configure_queue("per-customer", key_concurrency=2)
        eventually(lambda: KEYS.now() == 6, "two of each key")
        KEYS.open.set()
        assert sorted(r.result(timeout=30) for r in runs) == sorted(
            ["cust-1"] * 3 + ["cust-2"] * 2 + ["none"] * 2
        )
    assert KEYS.most_per_key() == {"cust-1": 2, "cust-2": 2, "none": 2}


def test_a_key_limit_and_a_queue_limit_hold_together(make_engine: Any) -> None:
    KEYS.reset()
    engine = make_engine(qq_keyed_run, qq_keyed)
    engine.configure_queue("per-customer", key_concurrency=1, concurrency=2)
    with engine.running():
        runs = [
            engine.start(qq_keyed_run, key, concurrency_key=key)
            for key in ("k1", "k1", "k2", "k2", "k3")
        ]
        eventually(lambda: KEYS.now() == 2, "two running")
        eventually(lambda: engine.queue("per-customer").depth == 3, "three waiting")
        assert all(n <= 1 for n in KEYS.now_per_key().values())
        KEYS.open.set()
        assert [r.result(timeout=30) for r in runs] == ["k1", "k1", "k2", "k2", "k3"]
    assert max(KEYS.most_per_key().values()) == 1


def test_bad_concurrency_keys_and_key_limits_are_refused(make_engine: Any) -> None:
    engine = make_engine(qq_keyed_run, qq_keyed)
    for bad in ("", "k\n", "x" * 1000):
        with pytest.raises(wp.InvalidRequest) as refused:
            engine.start(qq_keyed_run, "k", concurrency_key=bad)
        assert refused.value.field == "concurrency_key"
    with pytest.raises(wp.InvalidRequest) as refused_limit:
        engine.configure_queue("per-customer", key_concurrency=0)
    assert refused_limit.value.field == "key_concurrency"
    assert engine.list_runs() == [] and engine.queues() == []


def test_a_concurrency_key_over_http(make_engine: Any, serve: Any) -> None:
    KEYS.reset()
    engine = make_engine(qq_keyed_run, qq_keyed)
    base = serve(engine)
    admin = Api(base, make_key(engine, "acme", "ada", "admin"))
    put = admin.put("/v1/queues/per-customer", json={"key_concurrency": 1})
    assert put.status_code == 200 and put.json()["key_concurrency"] == 1
    assert admin.put("/v1/queues/per-customer", json={"key_concurrency": 0}).status_code == 422
    with engine.running():
        started = [
            admin.post(
                "/v1/runs",
                json={"workflow": "qq_keyed_run", "input": "c", "concurrency_key": "c"},
            )
            for _ in range(2)
        ]
        assert [s.status_code for s in started] == [201, 201], started[0].text
        eventually(lambda: KEYS.now() == 1, "one running")
        eventually(lambda: engine.queue("per-customer", tenant="acme").depth == 1, "one waits")
        bad = admin.post(
            "/v1/runs", json={"workflow": "qq_keyed_run", "input": "c", "concurrency_key": ""}
        )
        assert bad.status_code == 422
        KEYS.open.set()
        for s in started:
            assert engine.result(s.json()["run_id"], tenant="acme", timeout=30) == "c"
    assert KEYS.most_per_key() == {"c": 1}


# == deduplication ids ======================================================================
@wp.workflow(name="qq_waits")
async def qq_waits(ctx: wp.WorkflowContext, n: int) -> int:
    await ctx.wait_signal("go")
    return n


def test_a_dedup_id_finds_the_unfinished_run_and_a_finished_one_lets_a_new_start(
    make_engine: Any,
) -> None:
    engine = make_engine(qq_waits)
    with engine.running():
        first = engine.start(qq_waits, 1, dedup_id="order-7")
        again = engine.start(qq_waits, 2, dedup_id="order-7")  # another input: still the first
        assert again.run_id == first.run_id
        other = engine.start(qq_waits, 4, dedup_id="order-8")
        assert other.run_id != first.run_id
        elsewhere = engine.start(qq_waits, 5, dedup_id="order-7", tenant="acme")
        assert elsewhere.run_id != first.run_id  # a tenant's ids are its own
        first.signal("go")
        assert first.result(timeout=20) == 1
        later = engine.start(qq_waits, 6, dedup_id="order-7")  # the first has finished
        assert later.run_id != first.run_id
        for run in (other, later):
            run.signal("go")
        assert later.result(timeout=20) == 6
    assert len(engine.list_runs()) == 3


def test_concurrent_starts_with_one_dedup_id_make_one_run(make_engine: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    engines = [make_engine(qq_waits), make_engine(qq_waits)]
    with ThreadPoolExecutor(8) as pool:
        ids = list(
            pool.map(lambda i: engines[i % 2].start(qq_waits, i, dedup_id="once").run_id, range(16))
        )
    assert len(set(ids)) == 1
    assert len(engines[0].list_runs()) == 1


def test_bad_dedup_ids_are_refused_and_over_http_a_dedup_id_answers_the_first(
    make_engine: Any, serve: Any
) -> None:
    engine = make_engine(qq_waits)
    for bad in ("", "a\x00b", "x" * 1000):
        with pytest.raises(wp.InvalidRequest) as refused:
            engine.start(qq_waits, 1, dedup_id=bad)
        assert refused.value.field == "dedup_id"
    assert engine.list_runs() == []
    base = serve(engine)
    starter = Api(base, make_key(engine, "acme", "sam", "starter"))
    body = {"workflow": "qq_waits", "input": 1, "dedup_id": "d-1"}
    made = starter.post("/v1/runs", json=body)
    found = starter.post("/v1/runs", json={**body, "input": 2})
    assert (made.status_code, found.status_code) == (201, 200), found.text
    assert found.json()["run_id"] == made.json()["run_id"]
    assert starter.post("/v1/runs", json={**body, "dedup_id": ""}).status_code == 422
