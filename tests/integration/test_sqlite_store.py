"""The SQLite store's own parts: migrations, URL parsing and how
requests are grouped into one transaction."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers import eventually_async
from tests.helpers.store_calls import (
    T0,
    TENANT,
    activity_task,
    claim_activities,
    ev,
    make_run,
    schedule_activities,
    signal_commit,
    state,
)
from tests.helpers.threads import open_and_close_at_once
from waypost.errors import ConfigurationError, SchemaError, StoreError
from waypost.model.events import EventType
from waypost.store import open_store
from waypost.store.base import (
    ActivityTaskOp,
    Conflict,
    RunCommit,
    WorkflowTaskOp,
)
from waypost.store.effects import SettleActivity
from waypost.store.sqlfile import load_migrations
from waypost.store.sqlite import SqliteStore

E = EventType


def _normalised_sql(sql: str | None) -> str | None:
    if sql is None:
        return None
    sql = re.sub(r"--[^\n]*", "", sql)
    return re.sub(r"\s+", " ", sql).replace("( ", "(").replace(" )", ")").strip()


def _schema_rows(path: Path) -> dict[tuple[str, str], tuple[str, str | None]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    finally:
        conn.close()
    return {(t, n): (tbl, _normalised_sql(sql)) for t, n, tbl, sql in rows}


def test_migrations_build_the_schema_and_record_every_version(tmp_path: Path) -> None:
    """The schema itself is checked against docs/schema/sqlite.sql (test_schema_docs)."""
    migrated = tmp_path / "migrated.db"
    store = SqliteStore(f"sqlite:///{migrated}")
    asyncio.run(store.open())
    asyncio.run(store.close())

    got = _schema_rows(migrated)
    bookkeeping = got.pop(("table", "waypost_migrations"))
    assert bookkeeping[0] == "waypost_migrations"
    assert {k for k in got if k[0] == "table"} >= {
        ("table", t) for t in ("runs", "events", "tasks", "timers", "workers")
    }

    conn = sqlite3.connect(migrated)
    try:
        versions = [r[0] for r in conn.execute("SELECT version FROM waypost_migrations")]
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    assert versions == [m.version for m in load_migrations("sqlite")]
    assert journal == "wal"


def test_reopening_and_concurrent_first_opens_apply_migrations_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    open_and_close_at_once(lambda: SqliteStore(url), 4, timeout=30)
    open_and_close_at_once(lambda: SqliteStore(url), 1, timeout=30)  # and once more, alone
    conn = sqlite3.connect(tmp_path / "shared.db")
    try:
        rows = conn.execute("SELECT version FROM waypost_migrations ORDER BY version").fetchall()
    finally:
        conn.close()
    assert [r[0] for r in rows] == [m.version for m in load_migrations("sqlite")]


def test_a_newer_schema_than_the_package_knows_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    url = f"sqlite:///{path}"
    store = SqliteStore(url)
    asyncio.run(store.open())
    asyncio.run(store.close())
    newest = max(m.version for m in load_migrations("sqlite"))
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO waypost_migrations (version, name, applied_at) VALUES (?, 'future', 0)",
        (newest + 1,),
    )
    conn.commit()
    conn.close()
    before = _schema_rows(path)

    with pytest.raises(SchemaError, match=f"version {newest + 1}"):
        asyncio.run(SqliteStore(url).open())
    with pytest.raises(SchemaError, match="upgrade waypost"):
        wp.Engine(url)
    assert _schema_rows(path) == before


def test_a_missing_folder_is_a_clear_configuration_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'w.db'}"
    with pytest.raises(ConfigurationError, match=r"folder .* does not exist"):
        asyncio.run(SqliteStore(url).open())
    with pytest.raises(ConfigurationError, match="does not exist"):
        wp.Engine(url)
    assert not (tmp_path / "no").exists()


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a SQLite database, just some bytes" * 100)
    with pytest.raises(StoreError, match=r"garbage\.db"):
        asyncio.run(SqliteStore(f"sqlite:///{path}").open())


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///:memory:", "names no file"),
        ("sqlite://", "names no file"),
        ("sqlite:///", "names no file"),
        ("sqlite://localhost/{tmp}/w.db", "has a host"),
        ("sqlite:///{tmp}/w.db?mode=memory", "unknown SQLite URL option.*mode"),
        ("sqlite:///{tmp}/w.db?synchronous=off", "synchronous='off' is not allowed"),
        ("sqlite:///{tmp}/w.db?busy_timeout=soon", "busy_timeout"),
        ("sqlite:///{tmp}/w.db?busy_timeout=-1", "busy_timeout"),
        ("mysql://localhost/db", "unsupported database URL"),
    ],
    ids=[
        "memory",
        "empty",
        "no-path",
        "host",
        "unknown-option",
        "bad-synchronous",
        "busy-timeout-not-a-number",
        "busy-timeout-negative",
        "other-scheme",
    ],
)
def test_bad_urls_are_refused_clearly(tmp_path: Path, url: str, message: str) -> None:
    url = url.format(tmp=tmp_path)
    with pytest.raises(ConfigurationError, match=message):
        open_store(url)
    with pytest.raises(ConfigurationError, match=message):
        wp.Engine(url)
    assert list(tmp_path.iterdir()) == []


def test_good_url_options_are_accepted(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path / 'w.db'}?synchronous=NORMAL&busy_timeout=2.5")
    assert (store.synchronous, store.busy_timeout) == ("NORMAL", 2.5)
    assert SqliteStore(f"sqlite:///{tmp_path / 'w.db'}").synchronous == "FULL"


def test_requests_queued_together_commit_as_one_batch_and_a_conflict_rolls_back_alone(
    tmp_path: Path,
) -> None:
    """Group commit, made deterministic: hold the write connection while requests queue."""

    async def body() -> None:
        store = SqliteStore(f"sqlite:///{tmp_path / 'batch.db'}")
        await store.open()
        try:
            n = 20
            heads = {}
            for i in range(n):
                created = await make_run(store, f"r{i}", owner="w1")
                heads[f"r{i}"] = (created.run.last_seq, created.run.last_hash)
            await make_run(store, "a", owner="w1")
            await schedule_activities(store, "a", activity_task("1"))
            (act,) = await claim_activities(store, "w2", now=T0)
            before_a = await state(store, "a")
            writer = store._writer
            assert writer is not None

            def commit(run_id: str) -> RunCommit:
                return signal_commit(run_id, heads[run_id])

            # Writes its activity update (deletes the task) and fails later, on the
            # workflow fence: the savepoint must undo the deletion.
            doomed = RunCommit(
                TENANT,
                "a",
                [ev(E.ACTIVITY_COMPLETED, T0 + 1, step="1", result=1)],
                T0 + 1,
                effects=(SettleActivity("1", act.fence, ActivityTaskOp.DONE),),
                workflow_fence=99,
                workflow_op=WorkflowTaskOp.IDLE,
            )
            commits_before = store.stats["commits"]
            store.conn_lock.acquire()
            try:
                plug = asyncio.ensure_future(store.commit_run(commit("r0")))
                await eventually_async(
                    lambda: writer.queue.qsize() == 0 and store._pending == 1,
                    "the writer to hold one commit",
                    timeout=5.0,
                    interval=0.001,
                )
                rest = [commit(f"r{i}") for i in range(1, n)]
                rest.insert(n // 2, doomed)
                futures = [asyncio.ensure_future(store.commit_run(c)) for c in rest]
                await eventually_async(
                    lambda: writer.queue.qsize() == len(rest),
                    "the rest queued",
                    timeout=5.0,
                    interval=0.001,
                )
            finally:
                store.conn_lock.release()
            results = await asyncio.gather(plug, *futures)
            assert store.stats["commits"] - commits_before == 2  # the plug, then one batch
            outcome = dict(zip([c.run_id for c in [commit("r0"), *rest]], results, strict=True))
            assert outcome["a"].conflict is Conflict.WORKFLOW_FENCE
            assert all(outcome[f"r{i}"].ok for i in range(n))
            assert await state(store, "a") == before_a
            for i in range(n):
                assert [e.seq for e in await store.load_history(TENANT, f"r{i}")] == [1, 2]
        finally:
            await store.close()

    asyncio.run(body())
