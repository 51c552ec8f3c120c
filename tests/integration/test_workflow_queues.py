"""Workflow queues and per-worker limits on both stores, with real engines.

A run started on a workflow queue is `enqueued` until the queue's limits admit it: its
concurrency (admitted runs not finished), its rate, its per-key limit, by priority and
then oldest first. An enqueued run can be cancelled or terminated (it never starts and
frees nothing), keeps its deduplication id, and shows in listings. A queue's
`worker_concurrency` bounds what one engine holds of it. Bad settings and names are
refused; another tenant's queue is not found.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.gates import Gate
from tests.helpers.store import violations
from waypost.model.events import EventType

from .server_fixtures import Api, make_key, metrics_text, serve, serve_metered

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(240)


GATE = Gate()


@wp.activity()
def wq_step(ctx: wp.ActivityContext, n: Any, key: str, gated: bool) -> Any:
    GATE.enter(n, key)
    try:
        if gated:
            GATE.open.wait(30)
        else:
            time.sleep(0.02)  # a little work, so that runs overlap if they may
        return n
    finally:
        GATE.leave(key)


@wp.workflow(name="wq_report", queue="reports")
async def wq_report(ctx: wp.WorkflowContext, args: list[Any]) -> Any:
    n, key, gated = args
    return await ctx.run(wq_step, n, key, gated)


@wp.activity(queue="payments")
def wq_pay(ctx: wp.ActivityContext, n: int) -> int:
    return GATE.hold(n)


@wp.workflow(name="wq_fan")
async def wq_fan(ctx: wp.WorkflowContext, n: int) -> list[int]:

    return list(await asyncio.gather(*(ctx.run(wq_pay, i) for i in range(n))))


@wp.workflow(name="wq_waiter", queue="reports")
async def wq_waiter(ctx: wp.WorkflowContext) -> Any:
    return await ctx.wait_signal("go")


CHASE = """
name: wq_chase
start: answer
steps:
  answer: {type: wait, signal: reply, output: $.reply, next: thanks}
  thanks: {type: succeed, output: reply.text}
"""


def _fresh_gate() -> None:
    GATE.reset()


def _admitted_at(engine: wp.Engine, run_id: str) -> float | None:
    for ev in engine.history(run_id):
        if ev.type == EventType.RUN_ADMITTED:
            return ev.ts
    return None


# == concurrency ============================================================================
@pytest.fixture
def engine(make_engine: Any) -> Any:
    """An engine serving `wq_report`, its gate fresh."""
    _fresh_gate()
    return make_engine(wq_report, wq_step)


def test_a_workflow_queue_admits_at_most_its_concurrency_and_every_run_finishes(
    engine: Any,
) -> None:
    engine.configure_queue("reports", concurrency=2)
    seen: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.append(engine.queue("reports").runs_admitted)

    with engine.running():
        runs = [engine.start(wq_report, [i, "", False]) for i in range(20)]
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            assert [r.result(timeout=120) for r in runs] == list(range(20))
        finally:
            done.set()
            sampler.join()
    assert GATE.highest() <= 2  # never more than two runs' steps at once
    assert seen and max(seen) <= 2
    assert all(_admitted_at(engine, r.run_id) is not None for r in runs)
    q = engine.queue("reports")
    assert (q.runs_enqueued, q.runs_admitted) == (0, 0)


def test_enqueued_runs_are_listed_with_their_status_and_admitted_by_priority_then_age(
    engine: Any,
) -> None:
    engine.configure_queue("reports", concurrency=1)
    with engine.running():
        blocker = engine.start(wq_report, [-1, "", True])
        eventually(lambda: GATE.started == [-1], "the first run holds the slot")
        waiting = [
            engine.start(wq_report, [n, "", True], priority=p)
            for n, p in ((0, 0), (5, 5), (10, 10), (3, 3), (1, 0))
        ]
        assert {engine.get(r.run_id).status for r in waiting} == {wp.RunStatus.ENQUEUED}
        told = engine.get(waiting[0].run_id).next_action
        assert told is not None and told["kind"] == "enqueued"
        listed = engine.list_runs(status="enqueued")
        assert {i.run_id for i in listed} == {r.run_id for r in waiting}
        q = engine.queue("reports")
        assert (q.runs_enqueued, q.runs_admitted) == (5, 1)
        assert q.oldest_age is not None and q.oldest_age >= 0
        GATE.open.set()
        assert [r.result(timeout=60) for r in waiting] == [0, 5, 10, 3, 1]
        assert blocker.result(timeout=30) == -1
    assert GATE.started == [-1, 10, 5, 3, 0, 1]  # priority, then the older of equals
    assert GATE.highest() == 1


def test_a_workflow_queues_rate_limits_admissions(make_engine: Any) -> None:
    _fresh_gate()
    n, per, total = 4, 1.0, 12
    engine = make_engine(wq_report, wq_step)
    engine.configure_queue("reports", rate=(n, per))
    with engine.running():
        began = time.time()
        runs = [engine.start(wq_report, [i, "", False]) for i in range(total)]
        assert [r.result(timeout=60) for r in runs] == list(range(total))
        took = time.time() - began
    times = sorted(t for r in runs if (t := _admitted_at(engine, r.run_id)) is not None)
    assert len(times) == total
    assert took >= (total - n) * per / n - 0.2  # a full bucket, then 8 more need 2 s
    for i, first in enumerate(times):
        for j in range(i, total):
            window = times[j] - first
            assert j - i + 1 <= n + math.floor(window * n / per + 1e-6), (
                f"{j - i + 1} runs admitted within {window:.3f}s"
            )


def test_a_concurrency_key_bounds_the_admitted_runs_of_each_key(engine: Any) -> None:
    engine.configure_queue("reports", key_concurrency=1)
    with engine.running():
        runs = [
            engine.start(wq_report, [f"{k}{i}", k, True], concurrency_key=k)
            for k in ("a", "b")
            for i in range(3)
        ]
        loose = engine.start(wq_report, ["free", "", True])  # no key: not bounded by it
        eventually(lambda: GATE.now("a") == 1 and GATE.now("b") == 1, "one run of each key")
        eventually(lambda: "free" in GATE.started, "the run without a key started")
        statuses = [engine.get(r.run_id).status for r in runs]
        assert statuses.count(wp.RunStatus.ENQUEUED) == 4
        GATE.open.set()
        assert [r.result(timeout=60) for r in runs] == ["a0", "a1", "a2", "b0", "b1", "b2"]
        assert loose.result(timeout=30) == "free"
    assert (GATE.highest("a"), GATE.highest("b")) == (1, 1)


# == cancel, terminate, deduplication ========================================================
def test_an_enqueued_run_cancelled_or_terminated_never_starts_and_frees_no_slot(
    engine: Any, db_url: str
) -> None:
    engine.configure_queue("reports", concurrency=1)
    with engine.running():
        blocker = engine.start(wq_report, ["blocker", "", True])
        eventually(lambda: GATE.started == ["blocker"], "the first run holds the slot")
        cancelled = engine.start(wq_report, ["cancelled", "", True])
        terminated = engine.start(wq_report, ["terminated", "", True])
        engine.cancel(cancelled.run_id, "not needed")
        engine.terminate(terminated.run_id, "wrong input")
        assert engine.get(cancelled.run_id).status == wp.RunStatus.CANCELLED
        assert engine.get(terminated.run_id).status == wp.RunStatus.TERMINATED
        with pytest.raises(wp.InvalidState, match="enqueued"):
            engine.pause(engine.start(wq_report, ["paused", "", True]).run_id, "hold")
        # Their ends freed nothing: the slot is still the blocker's.
        q = engine.queue("reports")
        assert (q.runs_admitted, q.runs_enqueued) == (1, 1)
        assert GATE.started == ["blocker"]
        assert violations(db_url) == []  # enqueued, cancelled and terminated runs are sound
        GATE.open.set()
        assert blocker.result(timeout=30) == "blocker"
        eventually(lambda: engine.queue("reports").runs_enqueued == 0, "the last one admitted")
    for run in (cancelled, terminated):
        types = [ev.type for ev in engine.history(run.run_id)]
        assert EventType.RUN_ADMITTED not in types
        assert EventType.ACTIVITY_SCHEDULED not in types
    assert "cancelled" not in GATE.started and "terminated" not in GATE.started
    assert violations(db_url) == []


def test_a_dedup_id_finds_an_enqueued_run(engine: Any) -> None:
    engine.configure_queue("reports", concurrency=1)
    with engine.running():
        blocker = engine.start(wq_report, ["blocker", "", True])
        eventually(lambda: GATE.started == ["blocker"], "the first run holds the slot")
        first = engine.start_run(wq_report, ["x", "", True], dedup_id="order-7")
        again = engine.start_run(wq_report, ["y", "", True], dedup_id="order-7")
        assert first.created and not again.created
        assert again.run_id == first.run_id
        assert engine.get(first.run_id).status == wp.RunStatus.ENQUEUED
        GATE.open.set()
        assert blocker.result(timeout=30) == "blocker"
        eventually(lambda: engine.get(first.run_id).status.finished, "the enqueued run ran")


def test_start_run_passes_the_concurrency_key_dedup_id_and_queue_through(
    engine: Any,
) -> None:
    engine.configure_queue("elsewhere", key_concurrency=1)
    with engine.running():
        one = engine.start_run(wq_report, ["k1", "k", True], concurrency_key="k", queue="elsewhere")
        eventually(lambda: GATE.started == ["k1"], "the key's first run started")
        two = engine.start_run(wq_report, ["k2", "k", True], concurrency_key="k", queue="elsewhere")
        assert engine.get(two.run_id).status == wp.RunStatus.ENQUEUED
        assert engine.queue("elsewhere").runs_enqueued == 1
        assert "reports" not in {q.name for q in engine.queues()}  # the start's queue won
        GATE.open.set()
        eventually(lambda: engine.get(two.run_id).status.finished, "the second run ran")
        assert engine.get(one.run_id).status == wp.RunStatus.COMPLETED


def test_a_signal_to_an_enqueued_run_waits_for_its_admission_and_definitions_queue_too(
    make_engine: Any,
) -> None:
    _fresh_gate()
    engine = make_engine(wq_report, wq_step, wq_waiter)
    engine.publish(CHASE)
    engine.configure_queue("reports", concurrency=1)
    with engine.running():
        blocker = engine.start(wq_report, ["blocker", "", True])
        eventually(lambda: GATE.started == ["blocker"], "the first run holds the slot")
        waiter = engine.start(wq_waiter)
        chase = engine.start("wq_chase", {}, queue="reports")
        engine.signal(waiter.run_id, "go", {"n": 7})
        engine.signal(chase.run_id, "reply", {"text": "yes"})
        for run in (waiter, chase):
            assert engine.get(run.run_id).status == wp.RunStatus.ENQUEUED
        assert engine.queue("reports").runs_enqueued == 2
        GATE.open.set()
        assert blocker.result(timeout=30) == "blocker"
        assert waiter.result(timeout=30) == {"n": 7}
        assert chase.result(timeout=30) == "yes"


def test_a_start_on_a_queue_with_no_limits_runs_at_once(engine: Any) -> None:
    with engine.running():
        runs = [engine.start(wq_report, [i, "", False]) for i in range(3)]
        assert [r.result(timeout=30) for r in runs] == [0, 1, 2]


# == a worker's own limit =====================================================================
def test_a_per_worker_limit_bounds_what_each_engine_holds(make_engine: Any) -> None:
    _fresh_gate()
    a = make_engine(wq_fan, wq_pay)
    b = make_engine(wq_fan, wq_pay)
    info = a.configure_queue("payments", worker_concurrency=1)
    assert (info.worker_concurrency, info.concurrency) == (1, None)
    with a.running():
        run = a.start(wq_fan, 4)
        eventually(lambda: GATE.now() == 1, "engine a holds one payment")
        eventually(lambda: a.queue("payments").depth == 3, "three waiting")
        assert GATE.now() == 1
        with b.running():
            eventually(lambda: GATE.now() == 2, "engine b holds one more")
            eventually(lambda: a.queue("payments").depth == 2, "two waiting")
            GATE.open.set()
            assert run.result(timeout=60) == [0, 1, 2, 3]
    assert GATE.highest() == 2


def test_two_engines_share_a_limited_queues_slots_fairly(make_engine: Any, db_url: str) -> None:
    from tests.helpers import db_query

    _fresh_gate()
    a = make_engine(wq_fan, wq_pay)
    b = make_engine(wq_fan, wq_pay)
    a.configure_queue("payments", concurrency=2)
    with a.running(), b.running():
        serving = "SELECT worker_id FROM workers WHERE queues LIKE ?"
        eventually(
            lambda: len(db_query(db_url, serving, ('%"named:payments"%',))) == 2,
            "both engines announced that they serve the queue",
        )
        run = a.start(wq_fan, 4)
        eventually(lambda: GATE.now() == 2, "two payments running")
        held = db_query(
            db_url,
            "SELECT owner, count(*) FROM tasks WHERE state = 'leased' "
            "AND named_queue = 'payments' GROUP BY owner",
        )
        assert sorted(n for _, n in held) == [1, 1]  # one each: neither took both slots
        GATE.open.set()
        assert run.result(timeout=60) == [0, 1, 2, 3]
    assert GATE.highest() == 2


# == bad input and tenants ===================================================================
@pytest.mark.parametrize("value", [0, -1, 10**12, 2.5, "3", True])
def test_a_bad_worker_concurrency_is_refused_and_writes_nothing(
    make_engine: Any, value: Any
) -> None:
    engine = make_engine()
    with pytest.raises(wp.InvalidRequest) as refused:
        engine.configure_queue("payments", worker_concurrency=value)
    assert refused.value.field == "worker_concurrency"
    assert engine.queues() == []


@pytest.mark.parametrize("name", ["", "a b", "x" * 201, "q\n", "pay/ments"])
def test_a_start_on_a_bad_queue_name_is_refused_and_starts_nothing(
    make_engine: Any, name: str
) -> None:
    engine = make_engine(wq_report, wq_step)
    with pytest.raises(wp.InvalidRequest) as refused:
        engine.start(wq_report, [1, "", False], queue=name)
    assert refused.value.field == "queue"
    assert engine.list_runs() == []


def test_a_workflows_queue_name_is_checked_when_it_is_declared() -> None:
    with pytest.raises(wp.ConfigurationError, match="queue"):

        @wp.workflow(queue="no spaces")
        async def bad(ctx: wp.WorkflowContext) -> None: ...


def test_workflow_queues_over_http_and_other_tenants_see_nothing(engine: Any, serve: Any) -> None:
    base = serve(engine)
    admin = Api(base, make_key(engine, "acme", "ada", "admin"))
    other = Api(base, make_key(engine, "globex", "gus", "admin"))
    put = admin.put("/v1/queues/reports", json={"concurrency": 1, "worker_concurrency": 3})
    assert put.status_code == 200, put.text
    assert (put.json()["concurrency"], put.json()["worker_concurrency"]) == (1, 3)
    bad = admin.put("/v1/queues/reports", json={"worker_concurrency": 0})
    assert bad.status_code == 422
    assert bad.json()["error"]["details"]["field"] == "worker_concurrency"
    bad_start = admin.post(
        "/v1/runs", json={"workflow": "wq_report", "input": [0, "", True], "queue": "a b"}
    )
    assert bad_start.status_code == 422
    with engine.running():
        first = admin.post("/v1/runs", json={"workflow": "wq_report", "input": [1, "", True]})
        assert first.status_code == 201, first.text
        eventually(lambda: GATE.started == [1], "the first run holds the slot")
        second = admin.post("/v1/runs", json={"workflow": "wq_report", "input": [2, "", True]})
        assert second.json()["status"] == "enqueued"
        listed = admin.get("/v1/runs", params={"status": "enqueued"}).json()["runs"]
        assert [r["run_id"] for r in listed] == [second.json()["run_id"]]
        q = admin.get("/v1/queues/reports").json()
        assert (q["runs_enqueued"], q["runs_admitted"]) == (1, 1)
        assert other.get("/v1/queues/reports").status_code == 404
        assert other.get("/v1/runs", params={"status": "enqueued"}).json()["runs"] == []
        with wp.Client(base, admin.key or "") as client:
            set_ = client.configure_queue("reports", worker_concurrency=None)
            assert set_.worker_concurrency is None and set_.concurrency == 1
            third = client.start("wq_report", [3, "", True], queue="reports")
            assert client.get(third).status == wp.RunStatus.ENQUEUED
        GATE.open.set()
        eventually(
            lambda: admin.get(f"/v1/runs/{third}").json()["status"] == "completed",
            "every run ran",
        )


def test_metrics_and_the_console_count_enqueued_runs(make_engine: Any, serve: Any) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    _fresh_gate()
    engine, base = serve_metered(make_engine, serve, wq_report, wq_step)
    engine.configure_queue("reports", concurrency=1)

    def enqueued() -> float | None:
        text = metrics_text(base)
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "waypost_runs" and s.labels.get("status") == "enqueued":
                    return float(s.value)
        return None

    with engine.running():
        blocker = engine.start(wq_report, ["blocker", "", True])
        eventually(lambda: GATE.started == ["blocker"], "the first run holds the slot")
        later = [engine.start(wq_report, [n, "", True]) for n in range(3)]
        eventually(lambda: enqueued() == 3, "three enqueued runs in the metrics")
        assert engine.count_runs()["enqueued"] == 3  # what the console's counts show
        GATE.open.set()
        assert [r.result(timeout=60) for r in [blocker, *later]] == ["blocker", 0, 1, 2]
