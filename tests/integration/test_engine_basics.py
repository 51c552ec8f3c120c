"""The engine end to end on a real SQLite file: the API a user relies on."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, pg_connect
from waypost.model.chain import verify_chain


@wp.activity
def double(ctx: wp.ActivityContext, x: int) -> int:
    return x * 2


@wp.workflow(name="doubler")
async def doubler(ctx: wp.WorkflowContext, x: int) -> int:
    y = await ctx.run(double, x)
    return await ctx.run(double, y)


def test_a_workflow_runs_to_completion_and_its_history_chains(make_engine: Any) -> None:
    engine = make_engine(doubler, double)
    with engine.running():
        handle = engine.start(doubler, 5)
        assert handle.result(timeout=10) == 20
    info = engine.get(handle.run_id)
    assert info.status == wp.RunStatus.COMPLETED
    assert info.result == 20
    events = engine.history(handle.run_id)
    assert [e.type for e in events] == [
        "RunStarted",
        "ActivityScheduled",
        "ActivityCompleted",
        "ActivityScheduled",
        "ActivityCompleted",
        "RunCompleted",
    ]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert verify_chain(events, run=("default", handle.run_id)) == []
    assert engine.verify(handle.run_id) == []


def test_start_by_name_and_a_started_run_waits_for_a_worker(make_engine: Any) -> None:
    engine = make_engine(doubler, double)
    handle = engine.start("doubler", 1)
    assert engine.get(handle.run_id).status == wp.RunStatus.RUNNING
    with pytest.raises(wp.ResultTimeout):
        engine.result(handle.run_id, timeout=0)  # nobody serves it: it has not moved
    with engine.running():
        assert engine.result(handle.run_id, timeout=10) == 4


def test_idempotent_start_with_a_run_id(make_engine: Any) -> None:
    engine = make_engine(doubler, double)
    first = engine.start(doubler, 3, run_id="order-1")
    again = engine.start(doubler, 3, run_id="order-1")
    assert again.run_id == first.run_id == "order-1"
    with pytest.raises(wp.RunIdConflict, match="order-1"):
        engine.start(doubler, 4, run_id="order-1")
    assert len(engine.history("order-1")) == 1


def test_unknown_names_and_bad_input_raise_and_write_nothing(make_engine: Any) -> None:
    engine = make_engine(doubler, double)
    with pytest.raises(wp.UnknownWorkflow, match="nope"):
        engine.start("nope", 1)
    with pytest.raises(wp.PayloadError, match="set"):
        engine.start(doubler, {1, 2})
    with pytest.raises(wp.RunNotFound, match="missing"):
        engine.signal("missing", "go")
    with pytest.raises(wp.RunNotFound):
        engine.get("missing")
    assert engine.list_runs() == []


def test_signal_to_a_finished_run_is_refused(make_engine: Any) -> None:
    engine = make_engine(doubler, double)
    with engine.running():
        handle = engine.start(doubler, 1)
        handle.result(timeout=10)
        before = len(engine.history(handle.run_id))
        with pytest.raises(wp.RunNotActive, match="finished"):
            engine.signal(handle.run_id, "late", 1)
        with pytest.raises(wp.RunNotActive):
            engine.cancel(handle.run_id, "too late")
    assert len(engine.history(handle.run_id)) == before


@dataclasses.dataclass
class Item:
    sku: str
    qty: int


@dataclasses.dataclass
class Basket:
    items: list[Item]
    note: str | None = None


@wp.activity
def count_items(ctx: wp.ActivityContext, basket: Basket) -> Item:
    assert isinstance(basket, Basket)
    assert isinstance(basket.items[0], Item)
    return Item("total", sum(i.qty for i in basket.items))


@wp.workflow(name="basket")
async def basket_flow(ctx: wp.WorkflowContext, basket: Basket) -> Item:
    assert isinstance(basket, Basket)
    total = await ctx.run(count_items, basket)
    assert isinstance(total, Item)
    return total


def test_dataclasses_go_in_as_json_and_come_back_typed(make_engine: Any) -> None:
    engine = make_engine(basket_flow, count_items)
    with engine.running():
        handle = engine.start(basket_flow, Basket([Item("a", 2), Item("b", 3)]))
        assert handle.result(timeout=10) == Item("total", 5)
    started = engine.history(handle.run_id)[0]
    assert started.data["input"] == {
        "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 3}],
        "note": None,
    }


attempts: dict[str, list[int]] = {}
keys: dict[str, set[str]] = {}
lock = threading.Lock()


@pytest.fixture(autouse=True)
def _fresh_records() -> None:
    """Each test (and each store it runs on) starts with empty records."""
    attempts.clear()
    keys.clear()


class Flaky(Exception):
    pass


class Fatal(Exception):
    pass


@wp.activity(retry=wp.Retry(max_attempts=3, initial_interval=timedelta(milliseconds=10)))
def flaky(ctx: wp.ActivityContext, name: str, fail_times: int) -> str:
    with lock:
        attempts.setdefault(name, []).append(ctx.attempt)
        keys.setdefault(name, set()).add(ctx.idempotency_key)
    if ctx.attempt <= fail_times:
        raise Flaky(f"attempt {ctx.attempt}")
    return f"ok after {ctx.attempt}"


@wp.activity(
    retry=wp.Retry(
        max_attempts=5, initial_interval=timedelta(milliseconds=10), non_retryable=(Fatal,)
    )
)
def fatal(ctx: wp.ActivityContext, name: str) -> None:
    with lock:
        attempts.setdefault(name, []).append(ctx.attempt)
    raise Fatal("no point retrying")


@wp.workflow(name="retrying")
async def retrying(ctx: wp.WorkflowContext, args: dict[str, Any]) -> Any:
    if args.get("fatal"):
        try:
            await ctx.run(fatal, args["name"])
        except wp.ActivityError as err:
            return {"caught": err.type, "attempts": err.attempts}
    return await ctx.run(flaky, args["name"], args["fail"])


def test_retries_keep_the_idempotency_key_and_are_in_history(make_engine: Any) -> None:
    engine = make_engine(retrying, flaky, fatal)
    with engine.running():
        handle = engine.start(retrying, {"name": "r1", "fail": 2})
        assert handle.result(timeout=10) == "ok after 3"
    assert attempts["r1"] == [1, 2, 3]
    assert len(keys["r1"]) == 1
    failed = [e for e in engine.history(handle.run_id) if e.type == "ActivityFailed"]
    assert [(e.data["attempt"], e.data["retrying"]) for e in failed] == [(1, True), (2, True)]


def test_exhausted_retries_fail_the_run_with_the_error(make_engine: Any) -> None:
    engine = make_engine(retrying, flaky, fatal)
    with engine.running():
        handle = engine.start(retrying, {"name": "r2", "fail": 5})
        with pytest.raises(wp.WorkflowFailed) as err:
            handle.result(timeout=10)
    assert err.value.type == "ActivityError"
    assert "Flaky" in err.value.message
    assert "3 attempts" in err.value.message
    assert engine.get(handle.run_id).status == wp.RunStatus.FAILED


def test_non_retryable_errors_fail_at_once(make_engine: Any) -> None:
    engine = make_engine(retrying, flaky, fatal)
    with engine.running():
        handle = engine.start(retrying, {"name": "r3", "fatal": True})
        assert handle.result(timeout=10) == {"caught": "Fatal", "attempts": 1}
    assert attempts["r3"] == [1]


@wp.activity
async def slow_echo(ctx: wp.ActivityContext, value: str, delay: float) -> str:
    await asyncio.sleep(delay)
    return value


@wp.workflow(name="fan_out")
async def fan_out(ctx: wp.WorkflowContext, delays: list[float]) -> list[str]:
    results = await asyncio.gather(*(ctx.run(slow_echo, str(i), d) for i, d in enumerate(delays)))
    return list(results)


def test_gather_runs_steps_in_parallel_with_stable_step_ids(make_engine: Any) -> None:
    engine = make_engine(fan_out, slow_echo)
    replaying = make_engine(fan_out, slow_echo, cache_size=0)
    with engine.running():
        a = engine.start(fan_out, [0.3, 0.0, 0.15])
        b = engine.start(fan_out, [0.0, 0.3, 0.15])
        assert a.result(timeout=10) == ["0", "1", "2"]
        assert b.result(timeout=10) == ["0", "1", "2"]
    for handle in (a, b):
        scheduled = [
            e.data["step"] for e in engine.history(handle.run_id) if e.type == "ActivityScheduled"
        ]
        assert scheduled == ["1", "2", "3"]
    completed_a = [
        e.data["step"] for e in engine.history(a.run_id) if e.type == "ActivityCompleted"
    ]
    completed_b = [
        e.data["step"] for e in engine.history(b.run_id) if e.type == "ActivityCompleted"
    ]
    assert completed_a[0] == "2"
    assert completed_b[0] == "1"
    # An engine without a cache replays every step from history and agrees.
    with replaying.running():
        c = replaying.start(fan_out, [0.2, 0.0, 0.1])
        assert c.result(timeout=10) == ["0", "1", "2"]


@wp.workflow(name="typed_signal")
async def typed_signal(ctx: wp.WorkflowContext) -> str:
    import uuid

    value = await ctx.wait_signal("id", type=uuid.UUID)
    return str(value)


def test_a_malformed_signal_payload_the_code_does_not_handle_suspends_the_run_clearly(
    make_engine: Any,
) -> None:
    engine = make_engine(typed_signal)
    with engine.running():
        handle = engine.start(typed_signal)
        engine.signal(handle.run_id, "id", "not-a-uuid")
        eventually(lambda: engine.get(handle.run_id).status == "suspended", "the suspension")
    info = engine.get(handle.run_id)
    assert info.error is not None and info.error["type"] == "PayloadError"
    assert "not-a-uuid" in info.error["message"]
    assert [w["kind"] for w in info.waiting_for] == ["operator"]


@wp.workflow(name="calls_unknown")
async def calls_unknown(ctx: wp.WorkflowContext) -> None:
    await ctx.run("no_such_activity", 1)


def test_an_unknown_activity_suspends_the_run_naming_it_and_schedules_nothing(
    make_engine: Any,
) -> None:
    engine = make_engine(calls_unknown, double)
    with engine.running():
        handle = engine.start(calls_unknown)
        eventually(lambda: engine.get(handle.run_id).status == "suspended", "the suspension")
    error = engine.get(handle.run_id).error
    assert error is not None and error["type"] == "UnknownActivity"
    assert "no_such_activity" in error["message"]
    assert [e.type for e in engine.history(handle.run_id)] == ["RunStarted", "RunSuspended"]


def test_registering_something_undecorated_is_refused(make_engine: Any) -> None:
    def plain(ctx: Any) -> None:
        return None

    engine = make_engine()
    with pytest.raises(wp.ConfigurationError, match="neither a @workflow nor an @activity"):
        engine.register(plain)
    with pytest.raises(wp.ConfigurationError, match="async def"):

        @wp.workflow
        def not_async(ctx: Any) -> None:
            return None


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_sync_engine_runs_on_either_event_loop(make_engine: Any, loop: str) -> None:
    engine = make_engine(fan_out, slow_echo, event_loop=loop)
    with engine.running():
        assert engine.start(fan_out, [0.05, 0.0]).result(timeout=10) == ["0", "1"]
    assert type(engine._loop.loop).__module__.split(".")[0] == loop


def test_an_unknown_event_loop_is_refused(db_url: str) -> None:
    with pytest.raises(wp.ConfigurationError, match="event_loop='tornado'"):
        wp.Engine(db_url, event_loop="tornado")


def test_tenants_are_walls(make_engine: Any) -> None:
    engine = make_engine(doubler, double)
    with engine.running():
        acme = engine.start(doubler, 1, run_id="order-1", tenant="acme")
        globex = engine.start(doubler, 2, run_id="order-1", tenant="globex")
        assert engine.result("order-1", tenant="acme", timeout=10) == 4
        assert engine.result("order-1", tenant="globex", timeout=10) == 8
    assert (acme.run_id, globex.run_id) == ("order-1", "order-1")
    assert engine.history("order-1", tenant="acme")[0].data["input"] == 1
    for call in (
        lambda: engine.get("order-1"),
        lambda: engine.history("order-1"),
        lambda: engine.signal("order-1", "go", tenant="initech"),
        lambda: engine.cancel("order-1", "not yours", tenant="initech"),
    ):
        with pytest.raises(wp.RunNotFound):
            call()
    assert {r.tenant for r in engine.list_runs(tenant=None)} == {"acme", "globex"}
    assert [r.tenant for r in engine.list_runs(tenant="acme")] == ["acme"]
    assert engine.list_runs() == []  # the default tenant has none


@wp.activity
async def short_job(ctx: wp.ActivityContext, n: int) -> int:
    await asyncio.sleep(0.01)
    return n


@wp.workflow(name="fan_out_ten")
async def fan_out_ten(ctx: wp.WorkflowContext) -> list[int]:
    return list(await asyncio.gather(*(ctx.run(short_job, n) for n in range(10))))


def test_queued_activities_take_freed_slots_without_waiting_for_a_poll(make_engine: Any) -> None:
    """Ten activities, two slots, a poll every 30 s: each slot that frees up takes the
    next queued activity at once (waiting for polls would take minutes)."""
    engine = make_engine(fan_out_ten, short_job, max_activities=2, poll_interval=30.0)
    with engine.running():
        run = engine.start(fan_out_ten)
        assert engine.result(run.run_id, timeout=20) == list(range(10))


@wp.workflow(name="older_flow")
async def older_flow(ctx: wp.WorkflowContext, x: int) -> int:
    return x + 1


def test_a_database_of_schema_version_1_is_upgraded_and_keeps_its_runs(
    make_engine: Any, db_url: str
) -> None:
    """A file or database made by the first release gains the newer tables on open."""
    from tests.helpers import db_query
    from waypost.store.sqlfile import load_migrations

    engine = make_engine(older_flow)
    with engine.running():
        run = engine.start(older_flow, 41)
        assert engine.result(run.run_id, timeout=10) == 42
    engine.close()
    newer = ["approvals", "approval_credentials", "approval_votes", "group_members", "outbox"]
    newer += ["definitions", "approval_refusals", "tenants", "api_keys", "tenant_admission"]
    newer += ["correlations", "webhook_sources", "webhook_deliveries", "purged_runs"]
    newer += ["users", "console_sessions", "schedules", "queues", "sign_in_attempts"]
    _downgrade_to_version_1(db_url, newer)
    again = make_engine(older_flow)
    assert again.get(run.run_id).status == "completed"  # the old run is still there
    newest = max(m.version for m in load_migrations("sqlite"))
    assert db_query(db_url, "SELECT max(version) FROM waypost_migrations") == [(newest,)]
    again.add_to_group("managers", ["ann"])  # a table of version 2 works
    assert again.groups() == {"managers": ["ann"]}


# Version 6 replaced the runs' status index and added the page indexes; version 8 added
# priorities and the indexes that claims and quotas read; version 9 the index of finished
# runs that retention reads; version 10 the tasks' count of lapsed leases; version 13 child runs;
# version 14 named queues, concurrency keys and deduplication ids; version 15 workflow queues;
# version 17 the checks of runs' rows; version 18 the runs' bounds (history bytes, unread
# signals).
_RUN_INDEXES_OF_VERSION_1 = [
    "ALTER TABLE runs DROP COLUMN input_mac",
    "ALTER TABLE runs DROP COLUMN state_mac",
    "ALTER TABLE runs DROP COLUMN history_bytes",
    "ALTER TABLE runs DROP COLUMN unread_signals",
    "ALTER TABLE runs DROP COLUMN signal_names",
    "DROP INDEX runs_by_named_queue",
    "DROP INDEX runs_enqueued",
    "ALTER TABLE runs DROP COLUMN named_queue",
    "DROP INDEX runs_by_created",
    "DROP INDEX runs_by_workflow",
    "DROP INDEX runs_by_status",
    "CREATE INDEX runs_by_status ON runs (tenant, status, created_at)",
    "DROP INDEX tasks_ready",
    "DROP INDEX tasks_leased",
    "DROP INDEX timers_by_tenant",
    "DROP INDEX runs_by_finished",
    "ALTER TABLE runs DROP COLUMN priority",
    "ALTER TABLE tasks DROP COLUMN priority",
    "ALTER TABLE tasks DROP COLUMN lapses",
    "DROP INDEX runs_by_parent",
    "ALTER TABLE runs DROP COLUMN parent_run_id",
    "ALTER TABLE runs DROP COLUMN parent_step",
    "ALTER TABLE runs DROP COLUMN parent_close",
    "ALTER TABLE runs DROP COLUMN parent_told",
    "DROP INDEX tasks_by_named_queue",
    "DROP INDEX runs_by_dedup_id",
    "ALTER TABLE tasks DROP COLUMN named_queue",
    "ALTER TABLE tasks DROP COLUMN concurrency_key",
    "ALTER TABLE runs DROP COLUMN concurrency_key",
    "ALTER TABLE runs DROP COLUMN dedup_id",
]


def _downgrade_to_version_1(db_url: str, tables: list[str]) -> None:
    """Drop what versions 2 and later added, as if the database had been made before them."""
    if db_url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        for t in tables:
            conn.execute(f"DROP TABLE {t}")
        for statement in _RUN_INDEXES_OF_VERSION_1:
            conn.execute(statement)
        conn.execute("DELETE FROM waypost_migrations WHERE version >= 2")
        conn.close()
        return
    with pg_connect(db_url, autocommit=True) as pg:
        for t in tables:
            pg.execute(f"DROP TABLE {t}")
        pg.execute("DROP INDEX IF EXISTS tasks_claimable")
        for statement in _RUN_INDEXES_OF_VERSION_1:
            pg.execute(statement)
        pg.execute("DELETE FROM waypost_migrations WHERE version >= 2")


@wp.activity(retry=wp.Retry(initial_interval=timedelta(0)))
async def undecodable(ctx: wp.ActivityContext, text: str) -> dict[str, str]:
    # What a byte string decoded with `surrogateescape` gives: no UTF-8 form.
    if ctx.attempt == 1:
        raise ValueError(f"bad byte in {text}\udcff")
    return {text + "\udcff": "\ud800" + text}


@wp.workflow(name="undecodable_text")
async def undecodable_text(ctx: wp.WorkflowContext, text: str) -> dict[str, str]:
    result: dict[str, str] = await ctx.run(undecodable, text)
    return result


def test_text_with_lone_surrogates_is_stored_and_read_back_as_it_was(make_engine: Any) -> None:
    """Strings with no UTF-8 form (lone surrogates) in an input, an error and a result are
    stored as JSON escapes: the run completes with them as they were, and its history
    chains (before, every commit of the step failed to encode and was tried again)."""
    engine = make_engine(undecodable_text, undecodable)
    with engine.running():
        run = engine.start(undecodable_text, "in\ud801put")
        assert engine.result(run.run_id, timeout=30) == {"in\ud801put\udcff": "\ud800in\ud801put"}
    history = engine.history(run.run_id)
    assert verify_chain(history, run=("default", run.run_id)) == []
    failed = next(e for e in history if e.type == "ActivityFailed")
    assert failed.data["error"]["message"] == "bad byte in in\ud801put\udcff"
    assert engine.get(run.run_id).input == "in\ud801put"
