"""Runs as the HTTP API needs them, on both stores: a start that says whether it created
the run, a start by the name of a workflow only another engine serves, what happens next
to a run, and pages of runs by an opaque cursor."""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, pg_connect
from tests.helpers.threads import in_threads
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role
from waypost.store.sqlfile import load_queries

WAYPOST = Path(sys.executable).with_name("waypost")


@wp.workflow(name="api_echo")
async def api_echo(ctx: wp.WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
    return {"echo": order}


def run_started_events(engine: wp.Engine, run_id: str, tenant: str = "default") -> int:
    return sum(1 for e in engine.history(run_id, tenant=tenant) if e.type == "RunStarted")


# == 1. created or found ===================================================================
def test_start_run_says_whether_this_start_created_the_run(make_engine: Any) -> None:
    engine = make_engine(api_echo)
    first = engine.start_run("api_echo", {"n": 1}, run_id="order-1")
    assert first == wp.Started("order-1", created=True)
    again = engine.start_run("api_echo", {"n": 1}, run_id="order-1")
    assert again == wp.Started("order-1", created=False)
    # `start` is the same operation answering only the id.
    assert engine.start("api_echo", {"n": 1}, run_id="order-1").run_id == "order-1"
    with pytest.raises(wp.RunIdConflict, match="exists already"):
        engine.start_run("api_echo", {"n": 2}, run_id="order-1")
    assert run_started_events(engine, "order-1") == 1
    assert engine.get("order-1").input == {"n": 1}

    # Without a run_id each start is a new run; the same run_id in another tenant is another run.
    fresh = engine.start_run(api_echo, {"n": 3})
    assert fresh.created and fresh.run_id != "order-1"
    assert engine.start_run("api_echo", {"n": 1}, run_id="order-1", tenant="other").created

    # A bad run_id is refused at the door and writes nothing.
    before = {r.run_id for r in engine.list_runs()}
    for bad in ("", "a\x00b", "line\nbreak", "x" * 201, "zero\u200bwidth"):
        with pytest.raises(wp.InvalidRequest) as refused:
            engine.start_run("api_echo", {"n": 1}, run_id=bad)
        assert refused.value.field == "run_id"
    assert {r.run_id for r in engine.list_runs()} == before


def test_concurrent_duplicate_starts_create_the_run_exactly_once(make_engine: Any) -> None:
    """Three engines (three connections) start the same runs at once: for each run one
    start answers created=True and every other finds it; a start with other input is
    refused; the history holds one RunStarted."""
    engines = [make_engine(api_echo) for _ in range(3)]
    for round_ in range(4):
        run_id = f"dup-{round_}"
        callers = [
            (e, 2 if i == 0 else 1) for i, e in enumerate(e for e in engines for _ in range(3))
        ]
        answers = _start_at_once(run_id, callers)
        assert len(answers) == len(callers)
        created = [got for _, got in answers if isinstance(got, wp.Started) and got.created]
        assert len(created) == 1, answers
        winner_input = engines[0].get(run_id).input["n"]
        for n, got in answers:
            if n == winner_input:
                assert isinstance(got, wp.Started) and got.run_id == run_id, got
            else:  # the other input: refused as a conflict, never a store error
                assert isinstance(got, wp.RunIdConflict), got
        assert run_started_events(engines[0], run_id) == 1


def _start_at_once(run_id: str, callers: list[tuple[wp.Engine, int]]) -> list[tuple[int, Any]]:
    """Each (engine, n) starts `run_id` with input {"n": n}, all released together."""
    barrier = threading.Barrier(len(callers))
    answers: list[tuple[int, Any]] = []
    lock = threading.Lock()

    def start(engine: wp.Engine, n: int) -> None:
        barrier.wait()
        try:
            got: Any = engine.start_run("api_echo", {"n": n}, run_id=run_id)
        except Exception as exc:  # collected: the test checks each answer
            got = exc
        with lock:
            answers.append((n, got))

    in_threads([partial(start, *caller) for caller in callers], timeout=30)
    return answers


# == 2. start by name, served elsewhere =====================================================
def _greet(version: str) -> Any:
    @wp.workflow(name="greet", version=version)
    async def greet(ctx: wp.WorkflowContext, who: dict[str, Any]) -> dict[str, Any]:
        return {"hello": who["name"], "version": version}

    return greet


def _served(engine: wp.Engine, queue: str) -> bool:
    return any(
        queue in json.loads(q) for (q,) in db_query(engine.url, "SELECT queues FROM workers")
    )


def test_a_workflow_only_a_running_worker_serves_starts_by_name(make_engine: Any) -> None:
    worker = make_engine(_greet("1"), _greet("2"), _greet("10"))
    starter = make_engine()  # registers nothing, publishes nothing
    with worker.running():
        eventually(lambda: _served(worker, "greet@10"), what="the worker to advertise greet")
        started = starter.start_run("greet", {"name": "ann"}, run_id="g-1")
        assert started == wp.Started("g-1", created=True)
        # The newest version the worker serves, in natural order ("10" after "2").
        assert starter.result("g-1", timeout=20) == {"hello": "ann", "version": "10"}
        info = starter.get("g-1")
        assert (info.workflow, info.version, info.input) == ("greet", "10", {"name": "ann"})
        assert info.next_action is None

        assert starter.start_run("greet", {"name": "bob"}, run_id="g-2", version="2").created
        assert starter.result("g-2", timeout=20) == {"hello": "bob", "version": "2"}
        assert not starter.start_run("greet", {"name": "bob"}, run_id="g-2", version="2").created

        with pytest.raises(wp.UnknownWorkflow, match="no running worker serves workflow 'greet'"):
            starter.start_run("greet", {"name": "cy"}, version="7")
        with pytest.raises(wp.UnknownWorkflow) as unknown:
            starter.start_run("nobody_serves_this", {"name": "cy"})
        assert "'nobody_serves_this'" in str(unknown.value)
        assert "no running worker serves it" in str(unknown.value)

    # A stopped worker no longer advertises the workflow: the start is refused, nothing written.
    with pytest.raises(wp.UnknownWorkflow, match="no running worker serves it"):
        starter.start_run("greet", {"name": "dan"}, run_id="g-3")
    assert sorted(r.run_id for r in starter.list_runs()) == ["g-1", "g-2"]


# == 3. what happens next ===================================================================
release = threading.Event()


@wp.activity(timeout=timedelta(minutes=10))
def hold(ctx: wp.ActivityContext) -> str:
    release.wait(30)
    return "released"


@wp.activity(
    retry=wp.Retry(
        max_attempts=3,
        initial_interval=timedelta(hours=1),
        max_interval=timedelta(hours=2),
        jitter=0.0,
    )
)
def flaky(ctx: wp.ActivityContext) -> str:
    raise RuntimeError("the service is down")


@wp.workflow(name="next_holding")
async def next_holding(ctx: wp.WorkflowContext) -> str:
    return str(await ctx.run(hold))


@wp.workflow(name="next_retrying")
async def next_retrying(ctx: wp.WorkflowContext) -> str:
    return str(await ctx.run(flaky))


@wp.workflow(name="next_sleeping")
async def next_sleeping(ctx: wp.WorkflowContext) -> str:
    await ctx.sleep(timedelta(hours=2))
    return "woke"


@wp.workflow(name="next_signal")
async def next_signal(ctx: wp.WorkflowContext, timeout: float | None) -> Any:
    return await ctx.wait_signal("shipped", timeout=timeout)


@wp.workflow(name="next_approval")
async def next_approval(ctx: wp.WorkflowContext) -> bool:
    decision = await ctx.approval(
        "manager", approvers=wp.Quorum(2, users=["ann", "bob", "cy"]), expires_in=timedelta(days=3)
    )
    return decision.approved


def _at(action: dict[str, Any]) -> float:
    return datetime.fromisoformat(action["at"]).timestamp()


def _next(engine: wp.Engine, run_id: str, kind: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        action = engine.get(run_id).next_action
        return action if action is not None and action["kind"] == kind else None

    return eventually(check, what=f"next_action of kind {kind}")


def test_next_action_says_what_happens_next(make_engine: Any) -> None:
    release.clear()
    engine = make_engine(
        next_holding, next_retrying, next_sleeping, next_signal, next_approval, hold, flaky
    )
    with engine.running():
        try:
            _walk_next_actions(engine)
        finally:
            release.set()


def _walk_next_actions(engine: wp.Engine) -> None:
    t0 = time.time()
    engine.start("next_holding", run_id="holding")
    engine.start("next_retrying", run_id="retrying")
    engine.start("next_sleeping", run_id="sleeping")
    engine.start("next_signal", 3600.0, run_id="signal-timed")
    engine.start("next_signal", None, run_id="signal")
    engine.start("next_approval", run_id="approval")

    running = _next(engine, "holding", "activity")
    assert running["detail"].startswith("activity 'hold' (step 1) attempt 1 is running")
    assert running["at"] is None and running["attempt"] == 1
    assert running["deadline"] is not None

    retry = _next(engine, "retrying", "retry")
    assert "attempt 1 failed; attempt 2 is due at" in retry["detail"]
    assert t0 + 3600 - 5 <= _at(retry) <= time.time() + 3600 + 5

    timer = _next(engine, "sleeping", "timer")
    assert "fires at" in timer["detail"]
    assert t0 + 7200 - 5 <= _at(timer) <= time.time() + 7200 + 5

    timed = _next(engine, "signal-timed", "signal")
    assert "waiting for signal 'shipped', sent from outside the run, until" in timed["detail"]
    assert t0 + 3600 - 5 <= _at(timed) <= time.time() + 3600 + 5
    plain = _next(engine, "signal", "signal")
    assert plain["at"] is None and plain["signal"] == "shipped"

    approval = _next(engine, "approval", "approval")
    assert "waiting for approval 'manager' (step 1) by 2 of [ann, bob, cy]" in approval["detail"]
    assert t0 + 3 * 86400 - 5 <= _at(approval) <= time.time() + 3 * 86400 + 5

    # The listing says the same as `get`, from a few reads for the whole page.
    listed = {r.run_id: r.next_action for r in engine.page_runs(limit=10).runs}
    assert listed["signal"] == engine.get("signal").next_action
    assert listed["approval"] == engine.get("approval").next_action

    release.set()
    assert engine.result("holding", timeout=20) == "released"
    assert engine.get("holding").next_action is None
    engine.signal("signal", "shipped", {"box": 1})
    assert engine.result("signal", timeout=20) == {"box": 1}
    assert engine.get("signal").next_action is None


def test_next_action_names_a_workflow_no_running_worker_serves(make_engine: Any) -> None:
    owner = make_engine(api_echo)  # has the code, does not serve
    elsewhere = make_engine()  # has nothing
    owner.start("api_echo", {"n": 1}, run_id="unserved")
    action = elsewhere.get("unserved").next_action
    assert action is not None and action["kind"] == "no_worker"
    assert (
        "workflow 'api_echo' version '1' is not registered by any running worker"
        in (action["detail"])
    )
    # The engine that has the code will run it when it serves: the code runs next.
    here = owner.get("unserved").next_action
    assert here is not None and here["kind"] == "workflow"
    assert "workflow code runs next" in here["detail"]


@wp.activity
def twice(ctx: wp.ActivityContext, x: int) -> int:
    return 2 * x


@wp.workflow(name="next_drift", version="1")
async def next_drift_v1(ctx: wp.WorkflowContext, x: int) -> int:
    await ctx.run(twice, x)
    return int(await ctx.wait_signal("go"))


@wp.workflow(name="next_drift", version="1")
async def next_drift_changed(ctx: wp.WorkflowContext, x: int) -> int:
    await ctx.sleep(1)  # another command where the history has an activity
    return int(await ctx.wait_signal("go"))


def test_next_action_of_a_suspended_run_says_an_operator_must_act(
    make_engine: Any, db_url: str, tmp_path: Path
) -> None:
    original = make_engine(next_drift_v1, twice)
    with original.running():
        original.start(next_drift_v1, 3, run_id="drifted")
        _next(original, "drifted", "signal")
    changed = make_engine(next_drift_changed, twice, cache_size=0)
    with changed.running():
        changed.signal("drifted", "go", 1)
        action = _next(changed, "drifted", "suspended")
    assert action["detail"].startswith("suspended until an operator acts: ")
    assert "event 2 (ActivityScheduled twice" in action["detail"]
    assert len(action["detail"]) <= 400

    # `waypost runs show` prints it, a real process reading the same database.
    shown = subprocess.run(
        [str(WAYPOST), "runs", "show", "drifted", "--db", db_url, "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["next_action"] == action


# == 4. pages by cursor ====================================================================
def _ids(page: wp.RunPage) -> list[str]:
    return [r.run_id for r in page.runs]


def test_250_runs_paged_by_100_give_each_run_exactly_once(make_engine: Any) -> None:
    engine = make_engine(api_echo, next_sleeping)  # not serving: the runs stay as started
    ids = [engine.start_run("api_echo", {"i": i}).run_id for i in range(250)]
    sleepers = [engine.start_run("next_sleeping").run_id for _ in range(5)]
    others = {engine.start_run("api_echo", {"i": i}, tenant="other").run_id for i in range(30)}

    first = engine.page_runs(workflow="api_echo", limit=100)
    assert len(first.runs) == 100 and first.next_cursor is not None
    # Runs created between pages are newer than every run paged so far: later pages
    # neither repeat nor skip a run because of them.
    meanwhile = [engine.start_run("api_echo", {"late": i}).run_id for i in range(7)]
    second = engine.page_runs(workflow="api_echo", cursor=first.next_cursor, limit=100)
    third = engine.page_runs(workflow="api_echo", cursor=second.next_cursor, limit=100)
    assert [len(second.runs), len(third.runs)] == [100, 50]
    assert third.next_cursor is None
    seen = _ids(first) + _ids(second) + _ids(third)
    assert len(seen) == len(set(seen)) == 250
    assert set(seen) == set(ids)
    assert not set(seen) & (set(meanwhile) | others | set(sleepers))
    keys = [(r.created_at, r.run_id) for p in (first, second, third) for r in p.runs]
    assert keys == sorted(keys, reverse=True)  # newest first, run_id breaking ties

    # Unfiltered, and by status: the same walk over the tenant's 262 runs.
    everything: list[str] = []
    cursor = None
    while True:
        page = engine.page_runs(status="running", cursor=cursor, limit=100)
        everything += _ids(page)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(everything) == len(set(everything)) == 262
    assert set(everything) == set(ids) | set(meanwhile) | set(sleepers)
    assert engine.page_runs(status="completed").runs == []
    assert engine.page_runs(status="completed").next_cursor is None
    assert _ids(engine.page_runs(workflow="next_sleeping", status="running")) == sorted(
        sleepers, key=lambda r: (engine.get(r).created_at, r), reverse=True
    )

    # ListRuns takes a cursor too, and gives the page PageRuns gives.
    listed = engine.list_runs(workflow="api_echo", cursor=first.next_cursor, limit=100)
    assert [r.run_id for r in listed] == _ids(second)
    # An exact multiple of the limit ends with an empty page's absence: no cursor to nothing.
    tenant_other = engine.page_runs(tenant="other", limit=30)
    assert len(tenant_other.runs) == 30 and tenant_other.next_cursor is None


def _cursor_of(payload: bytes) -> str:
    return "r1." + base64.urlsafe_b64encode(payload).decode().rstrip("=")


BAD_CURSORS: list[Any] = [
    "",
    "garbage",
    "r1.",
    "r1.!!!!",
    "r1.===",
    "r2." + _cursor_of(b'[1.0,"a"]')[3:],
    _cursor_of(b"not json"),
    _cursor_of(b"\xff\xfe\xfd"),  # not UTF-8
    _cursor_of(b'{"t":1,"r":"a"}'),
    _cursor_of(b'[1,"a",3]'),
    _cursor_of(b'[true,"a"]'),
    _cursor_of(b'["1","a"]'),
    _cursor_of(b"[1,2]"),
    _cursor_of(b'[1e999,"a"]'),
    _cursor_of(b'[NaN,"a"]'),
    _cursor_of(b"[" + b"9" * 400 + b',"a"]'),
    _cursor_of(b'[1,""]'),
    _cursor_of(b'[1,"a\\u0000b"]'),  # a control character in the run id
    _cursor_of(b'[1,"a\\u202eb"]'),  # a bidirectional override
    _cursor_of(json.dumps([1, "x" * 201]).encode()),
    _cursor_of(b"[" * 1000 + b"]" * 1000),
    "r1." + "A" * 100_000,
    "r1.\u00e9\u00e9",
    12345,
    b"r1.WzEsImEiXQ",
    ["r1."],
]


@pytest.mark.parametrize("bad", BAD_CURSORS, ids=lambda b: repr(b)[:30])
def test_a_cursor_the_api_did_not_give_out_is_refused(bad: Any, sqlite_url: str) -> None:
    with wp.Engine(sqlite_url) as engine:
        engine.register(api_echo)
        engine.start_run(api_echo, {"n": 1})
        for call in (
            lambda: engine.page_runs(cursor=bad),
            lambda: engine.list_runs(cursor=bad),
        ):
            with pytest.raises(wp.InvalidRequest) as refused:
                call()
            assert refused.value.field == "cursor"
            message = str(refused.value)
            assert len(message) < 200
            if isinstance(bad, str) and len(bad) > 8:
                assert bad[3:] not in message  # never quoted


def test_cursors_on_both_stores_refuse_garbage_and_hold_nothing_of_another_tenant(
    make_engine: Any,
) -> None:
    engine = make_engine(api_echo)
    mine = [engine.start_run("api_echo", {"i": i}, tenant="acme").run_id for i in range(5)]
    theirs = [engine.start_run("api_echo", {"i": i}, tenant="globex").run_id for i in range(5)]
    for bad in ("garbage", _cursor_of(b'[1,"a\\u0000b"]'), "r1." + "A" * 5000):
        with pytest.raises(wp.InvalidRequest) as refused:
            engine.page_runs(tenant="acme", cursor=bad)
        assert refused.value.field == "cursor"
    with pytest.raises(wp.InvalidRequest) as refused:
        engine.list_runs(tenant=None, cursor=engine.page_runs(tenant="acme", limit=1).next_cursor)
    assert refused.value.field == "cursor"

    # Acme's cursor handed to globex positions globex's own listing: nothing of acme's.
    acme_cursor = engine.page_runs(tenant="acme", limit=2).next_cursor
    assert acme_cursor is not None
    walked: list[str] = []
    cursor: str | None = acme_cursor
    while cursor is not None:
        page = engine.page_runs(tenant="globex", cursor=cursor, limit=2)
        walked += _ids(page)
        cursor = page.next_cursor
    assert set(walked) <= set(theirs)
    assert not set(walked) & set(mine)

    # The same through the door, as a viewer of globex holding an API key would call it.
    viewer = Principal("globex", "vic", frozenset({Role.VIEWER}))
    page = engine.execute(ops.PageRuns(cursor=acme_cursor, limit=10), viewer)
    assert {r.tenant for r in page.runs} <= {"globex"}
    assert not set(_ids(page)) & set(mine)
    with pytest.raises(wp.InvalidRequest):
        engine.execute(ops.PageRuns(cursor="nonsense"), viewer)
    with pytest.raises(wp.PermissionDenied):
        engine.execute(ops.StartRun(workflow="api_echo", input={}), viewer)
    starter = Principal("globex", "sam", frozenset({Role.STARTER}))
    assert engine.execute(ops.StartRun(workflow="api_echo", input={}, run_id="s-1"), starter)
    with pytest.raises(wp.PermissionDenied):  # an API caller starts runs as itself
        engine.execute(
            ops.StartRun(workflow="api_echo", input={}, run_id="s-2", started_by="eve"), starter
        )


# == the page queries read an index =========================================================
PAGE_QUERIES = ["page_run_sizes", "page_run_sizes_by_status", "page_run_sizes_by_workflow"]
PAGE_QUERIES += ["page_run_sizes_by_status_workflow", "page_run_sizes_by_workflow_version"]
PAGE_QUERIES += ["page_run_sizes_by_status_workflow_version"]
BY_IDS = "runs_by_ids"  # the rows of the runs that fit, once their sizes are read
MANY = 100_000


def _fill(db_url: str) -> None:
    """100,000 runs in 20 tenants, 7 workflows, 3 statuses (straight into the table)."""
    values = (
        "SELECT 't' || (i % 20), 'r' || i, 'w' || (i % 7), '1', "
        "CASE WHEN i % 3 = 0 THEN 'completed' ELSE 'running' END, '{}', '[]', 1, 'h', 0, "
        "1700000000.0 + i, 1700000000.0 + i FROM "
    )
    columns = (
        "INSERT INTO runs (tenant, run_id, workflow, version, status, input, waiting_for, "
        "last_seq, last_hash, processed_seq, created_at, updated_at) "
    )
    if db_url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        with conn:
            conn.execute(
                f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {MANY}) "
                + columns
                + values
                + "n"
            )
            conn.execute("ANALYZE")
        conn.close()
        return
    with pg_connect(db_url, autocommit=True) as pg:
        pg.execute(columns + values + f"generate_series(1, {MANY}) i")
        pg.execute("ANALYZE runs")


def _plans(db_url: str, params: dict[str, Any]) -> dict[str, str]:
    if db_url.startswith("sqlite:///"):
        import sqlite3

        queries = load_queries("sqlite")
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        try:
            return {
                name: "\n".join(
                    row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + queries[name], params)
                )
                for name in [*PAGE_QUERIES, BY_IDS]
            }
        finally:
            conn.close()
    queries = load_queries("postgres")
    with pg_connect(db_url) as pg:
        return {
            name: "\n".join(row[0] for row in pg.execute("EXPLAIN " + queries[name], params))
            for name in [*PAGE_QUERIES, BY_IDS]
        }


def test_a_page_reads_an_index_not_a_sort_of_the_whole_table(make_engine: Any, db_url: str) -> None:
    engine = make_engine()
    assert engine.list_runs() == []  # the schema is in place
    _fill(db_url)
    base = {"tenant": "t3", "status": "running", "workflow": "w2", "version": "1", "limit": 101}
    base["run_ids"] = json.dumps([f"r{i}" for i in range(3, 2000, 20)])
    for after_at, after_id in ((math.inf, ""), (1700050000.0, "r50000")):
        plans = _plans(db_url, {**base, "after_at": after_at, "after_id": after_id})
        by_ids = plans.pop(BY_IDS)  # on the primary key, never a scan
        if db_url.startswith("sqlite:///"):
            assert "SEARCH runs USING PRIMARY KEY" in by_ids, by_ids
        else:
            assert "runs_pkey" in by_ids and "Seq Scan on runs" not in by_ids, by_ids
        for name, plan in plans.items():
            if db_url.startswith("sqlite:///"):
                assert "USING INDEX runs_by_" in plan, (name, plan)
                assert "TEMP B-TREE" not in plan, (name, plan)  # no sort
            else:
                assert "Index Scan Backward using runs_by_" in plan, (name, plan)
                assert "Sort" not in plan and "Seq Scan" not in plan, (name, plan)
    # And the pages themselves, deep in the table, are right.
    page = engine.page_runs(tenant="t3", limit=3)
    assert _ids(page) == ["r99983", "r99963", "r99943"]
    deep = engine.page_runs(tenant="t3", cursor=page.next_cursor, limit=2)
    assert _ids(deep) == ["r99923", "r99903"]
