"""What only PostgreSQL has: its migrations, URLs, and failing to connect."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

import waypost as wp
from tests.conftest import scratch_postgres
from tests.helpers import pg_connect
from tests.helpers.threads import open_and_close_at_once
from waypost.errors import ConfigurationError, SchemaError, StoreError
from waypost.store import open_store
from waypost.store.postgres import PostgresStore, parse_postgres_url
from waypost.store.sqlfile import load_migrations, load_queries
from waypost.store.sqlite import migrate_connection as sqlite_migrate


@pytest.fixture
def empty_database() -> Any:
    """An empty database (no schema), dropped afterwards."""
    with scratch_postgres("waypost_empty") as url:
        yield url


def _all_null(sql: str, placeholder: str) -> dict[str, Any]:
    """Every parameter of `sql` as NULL, but for a LIMIT of 1 and an empty list of queues."""
    return {
        name: 1 if name == "limit" else "[]" if name == "queues" else None
        for name in re.findall(placeholder, sql)
    }


def test_every_query_returns_the_columns_its_sqlite_twin_does(
    fresh_postgres: str, tmp_path: Path
) -> None:
    """Rows are read by column name, in code both dialects share: every selected
    expression needs the same name in both (an alias, where it is not a column)."""
    lite_queries, pg_queries = load_queries("sqlite"), load_queries("postgres")
    assert lite_queries.keys() == pg_queries.keys()
    returning = [
        name
        for name, sql in lite_queries.items()
        if sql.lstrip().upper().startswith("SELECT") or "RETURNING" in sql
    ]
    assert "next_timer_at" in returning
    lite = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    sqlite_migrate(lite)
    with pg_connect(fresh_postgres) as pg:
        for name in returning:
            lite.execute("BEGIN")
            cur = lite.execute(lite_queries[name], _all_null(lite_queries[name], r":([a-z_]+)"))
            lite_columns = [column[0] for column in cur.description]
            lite.execute("ROLLBACK")
            with pg.transaction(force_rollback=True):
                pg_cur = pg.execute(
                    pg_queries[name], _all_null(pg_queries[name], r"%\(([a-z_]+)\)s")
                )
                pg_columns = [column.name for column in pg_cur.description or []]
            assert all(re.fullmatch(r"[a-z_]+", c) for c in lite_columns), (name, lite_columns)
            assert pg_columns == lite_columns, name
    lite.close()


def test_concurrent_first_opens_apply_migrations_once(empty_database: str) -> None:
    open_and_close_at_once(lambda: PostgresStore(empty_database), 4, timeout=60)
    with pg_connect(empty_database) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM waypost_migrations ORDER BY 1")]
    assert versions == [m.version for m in load_migrations("postgres")]


def test_a_newer_schema_than_the_package_knows_is_refused(fresh_postgres: str) -> None:
    newest = max(m.version for m in load_migrations("postgres"))
    with pg_connect(fresh_postgres) as conn:
        conn.execute(
            "INSERT INTO waypost_migrations (version, name, applied_at) VALUES (%s, 'future', 0)",
            (newest + 1,),
        )
    with pytest.raises(SchemaError, match=f"schema version {newest + 1}, newer"):
        asyncio.run(PostgresStore(fresh_postgres).open())


def test_an_unreachable_server_is_a_clear_store_error() -> None:
    store = open_store("postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2")
    with pytest.raises(StoreError, match=r"cannot connect to PostgreSQL at 127\.0\.0\.1:1/nowhere"):
        asyncio.run(store.open())


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://localhost/db?pool_size=lots", "pool_size='lots'.*not a number"),
        ("postgresql://localhost/db?pool_size=0", "pool_size must be at least 1"),
        ("mysql://localhost/db", "unsupported database URL"),
        ("postgresql://localhost/db?schema=", "schema='' in the database URL is not a usable"),
        ("postgresql://localhost/db?schema=Shop", "schema='Shop' .*lower-case letters"),
        ("postgresql://localhost/db?schema=a;DROP%20TABLE%20runs", "not a usable schema"),
        ("postgresql://localhost/db?schema=pg_catalog", "not pg_"),
        (f"postgresql://localhost/db?schema={'s' * 49}", "1-48"),
    ],
)
def test_bad_urls_are_refused_clearly(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_store(url)


def test_waypost_options_are_taken_off_the_url_and_the_rest_passed_on() -> None:
    conninfo, options = parse_postgres_url(
        "postgres://u@h:5433/db?pool_size=3&application_name=shop&connect_timeout=5"
    )
    assert options == {
        "pool_size": 3,
        "schema": "waypost",
        "group_commit": True,
        "step_statement": True,
    }
    assert conninfo == "postgresql://u@h:5433/db?application_name=shop&connect_timeout=5"
    _, options = parse_postgres_url("postgres://u@h/db?group_commit=off&pool_size=4")
    assert options == {
        "pool_size": 4,
        "schema": "waypost",
        "group_commit": False,
        "step_statement": True,
    }


def test_a_session_frozen_inside_a_transaction_is_ended_by_the_server(
    fresh_postgres: str,
) -> None:
    """A process stopped mid-transaction must not hold its row locks for ever."""

    async def setting() -> Any:
        store = PostgresStore(fresh_postgres)
        await store.open()
        try:
            with store._lanes["main"].pool.connection() as conn:
                return conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        finally:
            await store.close()

    assert asyncio.run(setting()) == ("5s",)


def test_connections_give_up_on_a_silent_peer_unless_the_url_says_otherwise(
    fresh_postgres: str,
) -> None:
    """TCP liveness on by default: a blackholed server is left after about 20 s."""

    async def parameters(url: str) -> dict[str, str]:
        store = PostgresStore(url)
        await store.open()
        try:
            with store._lanes["main"].pool.connection() as conn:
                return conn.info.get_parameters()
        finally:
            await store.close()

    given = asyncio.run(parameters(fresh_postgres))
    assert given["keepalives_idle"] == "10"
    assert given["tcp_user_timeout"] == "20000"
    own = asyncio.run(parameters(f"{fresh_postgres}?tcp_user_timeout=5000&keepalives_idle=30"))
    assert (own["tcp_user_timeout"], own["keepalives_idle"]) == ("5000", "30")
    assert own["keepalives_count"] == "2"


def _tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
        return {row[0] for row in rows}


def test_waypost_keeps_its_tables_in_a_schema_of_its_own(empty_database: str) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        # Another application's tables, with the names waypost uses, in `public`.
        conn.execute("CREATE TABLE public.events (id serial PRIMARY KEY, title text)")
        conn.execute("INSERT INTO public.events (title) VALUES ('launch party')")

    async def run_one(url: str) -> Any:
        async with wp.AsyncEngine(url) as engine, engine.running():
            engine.register(_echo)
            handle = await engine.start(_echo, "hi")
            return await handle.result(timeout=10)

    assert asyncio.run(run_one(empty_database)) == "hi"
    assert {"runs", "events", "tasks", "waypost_migrations"} <= _tables(empty_database, "waypost")
    assert _tables(empty_database, "public") == {"events"}
    with psycopg.connect(empty_database) as conn:
        assert conn.execute("SELECT title FROM public.events").fetchall() == [("launch party",)]

    # A second schema on the same database is a separate waypost.
    other = f"{empty_database}?schema=shop_eu"
    assert asyncio.run(run_one(other)) == "hi"
    assert "runs" in _tables(empty_database, "shop_eu")
    with pg_connect(empty_database) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_a_table_waypost_did_not_create_is_reported_as_a_collision(
    empty_database: str,
) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.events (id serial PRIMARY KEY)")
    store = PostgresStore(f"{empty_database}?schema=public")
    with pytest.raises(SchemaError) as refused:
        asyncio.run(store.open())
    message = str(refused.value)
    assert "schema public already has table(s) events that waypost did not create" in message
    assert "?schema=NAME" in message
    assert "another process" not in message
    # Nothing was changed: only the foreign table is there.
    assert _tables(empty_database, "public") == {"events"}


def test_tables_of_an_earlier_layout_in_public_are_not_silently_left_behind(
    empty_database: str,
) -> None:
    from waypost.store.postgres import migrate_connection

    with psycopg.connect(empty_database) as conn:
        migrate_connection(conn, "public")  # where earlier versions put the tables
    with pytest.raises(SchemaError, match=r"add \?schema=public to the database URL"):
        asyncio.run(PostgresStore(empty_database).open())
    assert "waypost" not in _schemas(empty_database)

    async def count_runs() -> int:
        async with wp.AsyncEngine(f"{empty_database}?schema=public") as engine:
            return len(await engine.list_runs())

    assert asyncio.run(count_runs()) == 0


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {row[0] for row in conn.execute("SELECT nspname FROM pg_namespace")}


@wp.workflow(name="pg_echo")
async def _echo(ctx: wp.WorkflowContext, text: str) -> str:
    return text


# == lanes: housekeeping never queues behind the engine's own load ==========================


def test_renewals_and_timers_go_on_while_every_main_connection_is_held(
    fresh_postgres: str,
) -> None:
    """A lease renewal, a heartbeat and the timer loop's work have connections of their
    own: with every thread and connection of the main lane held inside a transaction,
    they still answer, and a request of the main lane still waits."""
    from waypost.model.events import EventType, NewEvent
    from waypost.store.base import LeaseRenewal, NewRun, TaskRef, WorkerRecord
    from waypost.store.tx import Tx

    t0 = 1_700_000_000.0
    gate = threading.Event()
    holding = threading.Semaphore(0)

    def hold(tx: Tx) -> None:
        tx.one("next_timer_at", {})  # inside a transaction, on a main connection
        holding.release()
        gate.wait(30)

    async def scenario() -> None:
        store = PostgresStore(f"{fresh_postgres}?pool_size=2")
        await store.open()
        held: list[asyncio.Future[Any]] = []
        try:
            started = NewEvent(EventType.RUN_STARTED, {"workflow": "wf"}, t0)
            await store.create_run(NewRun("default", "r1", "wf", "1", None, t0, started))
            (task,) = await store.claim_tasks("w1", ["wf@1"], [], 10, 0, 2.0, t0)
            held = [asyncio.ensure_future(store._write(hold)) for _ in range(2)]
            for _ in range(2):
                assert await asyncio.to_thread(holding.acquire, True, 10)
            # The main lane is full: one more request of it waits.
            waiting = asyncio.ensure_future(store.get_run("default", "r1"))
            ref = TaskRef("default", "r1", "workflow", "", task.fence)
            (state,) = await asyncio.wait_for(
                store.renew_leases("w1", [LeaseRenewal(ref)], 2.0, t0 + 1), 10
            )
            assert state.held
            worker = WorkerRecord("w1", "host", 1, ["wf@1"], t0, t0 + 1)
            await asyncio.wait_for(store.beat_worker(worker), 10)
            assert await asyncio.wait_for(store.fire_due_timers(t0, 16, None, [], 2.0), 10) == []
            assert await asyncio.wait_for(store.next_timer_at(), 10) is None
            assert not waiting.done()
            gate.set()
            assert (await asyncio.wait_for(waiting, 10)) is not None
        finally:
            gate.set()
            await asyncio.gather(*held, return_exceptions=True)
            await store.close()

    asyncio.run(scenario())


def test_a_server_without_autovacuum_is_named_when_the_store_opens(
    fresh_postgres: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Without autovacuum nothing refreshes the planner's statistics as the tables grow.
    with psycopg.connect(fresh_postgres) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
    assert row is not None

    async def open_and_close() -> None:
        store = PostgresStore(fresh_postgres)
        await store.open()
        await store.close()

    with caplog.at_level("WARNING", logger="waypost.postgres"):
        asyncio.run(open_and_close())
    warned = [r.getMessage() for r in caplog.records if "autovacuum is off" in r.getMessage()]
    assert len(warned) == (1 if row[0] == "off" else 0), warned


@pytest.mark.parametrize("held", ["runs", "tasks"])
def test_a_batch_of_timers_skips_a_run_another_transaction_holds(
    fresh_postgres: str, held: str
) -> None:
    """Firing never waits for a lock: a due timer whose run (or workflow task) another
    transaction holds stays pending while the others fire, and fires once it is let go."""
    from waypost.model.events import EventType, NewEvent
    from waypost.store.base import NewRun, NewTimer, RunCommit
    from waypost.store.effects import StartTimers

    t0 = 1_700_000_000.0

    async def scenario() -> None:
        store = PostgresStore(fresh_postgres)
        await store.open()
        try:
            for run_id in ("r1", "r2"):
                started = NewEvent(EventType.RUN_STARTED, {"workflow": "wf"}, t0)
                await store.create_run(NewRun("default", run_id, "wf", "1", None, t0, started))
                timer = NewEvent(EventType.TIMER_STARTED, {"step": "1", "fire_at": t0 + 1}, t0)
                effects = (StartTimers([NewTimer("1", t0 + 1)]),)
                res = await store.commit_run(
                    RunCommit("default", run_id, [timer], t0, effects=effects)
                )
                assert res.ok
            with pg_connect(fresh_postgres) as other:
                other.execute(
                    f"SELECT 1 FROM {held} WHERE tenant = 'default' AND run_id = 'r1' FOR UPDATE"
                )
                fired = await asyncio.wait_for(store.fire_due_timers(t0 + 5, 16, None, [], 30), 10)
                assert [t.run_id for t in fired] == ["r2"]
                assert await store.next_timer_at() == t0 + 1  # r1's, still pending
                other.rollback()
            (again,) = await store.fire_due_timers(t0 + 5, 16, None, [], 30)
            assert again.run_id == "r1"
            assert await store.fire_due_timers(t0 + 5, 16, None, [], 30) == []
            for run_id in ("r1", "r2"):
                history = await store.load_history("default", run_id)
                assert [e.type for e in history].count("TimerFired") == 1
        finally:
            await store.close()

    asyncio.run(scenario())
