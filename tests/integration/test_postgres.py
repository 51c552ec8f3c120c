"""What only PostgreSQL has: its schema and migrations, URLs, and failing to connect."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

from tests.conftest import _admin, postgres_url
from waypost.errors import ConfigurationError, SchemaError, StoreError
from waypost.store import open_store
from waypost.store.postgres import PostgresStore, parse_postgres_url
from waypost.store.sqlfile import load_migrations, load_schema


@pytest.fixture
def empty_database() -> Any:
    """An empty database (no schema), dropped afterwards."""
    import uuid

    name = f"waypost_empty_{uuid.uuid4().hex[:12]}"
    with _admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_url(name)
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _schema(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_schema = 'public'"
            " AND table_name <> 'waypost_migrations' ORDER BY 1, 2"
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
            " AND tablename <> 'waypost_migrations' ORDER BY 1, 2"
        ).fetchall()
    return {"columns": columns, "indexes": indexes}


def test_migrations_build_the_schema_of_schema_sql(
    empty_database: str, fresh_postgres: str
) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute(load_schema("postgres").encode())
    built_from_schema = _schema(empty_database)
    built_from_migrations = _schema(fresh_postgres)  # the template applies every migration
    assert built_from_migrations == built_from_schema
    assert built_from_schema["columns"], "the schema has tables"


def test_concurrent_first_opens_apply_migrations_once(empty_database: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_close() -> None:
        try:
            store = PostgresStore(empty_database)
            barrier.wait(10)
            asyncio.run(store.open())
            asyncio.run(store.close())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_close) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    with psycopg.connect(empty_database) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM waypost_migrations ORDER BY 1")]
    assert versions == [m.version for m in load_migrations("postgres")]


def test_a_newer_schema_than_the_package_knows_is_refused(fresh_postgres: str) -> None:
    newest = max(m.version for m in load_migrations("postgres"))
    with psycopg.connect(fresh_postgres) as conn:
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
    ],
)
def test_bad_urls_are_refused_clearly(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_store(url)


def test_waypost_options_are_taken_off_the_url_and_the_rest_passed_on() -> None:
    conninfo, options = parse_postgres_url(
        "postgres://u@h:5433/db?pool_size=3&application_name=shop&connect_timeout=5"
    )
    assert options == {"pool_size": 3}
    assert conninfo == "postgresql://u@h:5433/db?application_name=shop&connect_timeout=5"


def test_a_session_frozen_inside_a_transaction_is_ended_by_the_server(
    fresh_postgres: str,
) -> None:
    """A process stopped mid-transaction must not hold its row locks for ever."""

    async def setting() -> Any:
        store = PostgresStore(fresh_postgres)
        await store.open()
        try:
            assert store._pool is not None
            with store._pool.connection() as conn:
                return conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        finally:
            await store.close()

    assert asyncio.run(setting()) == ("30s",)
