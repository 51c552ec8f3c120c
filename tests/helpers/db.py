"""The test database from outside the engine: reading, writing and locking it."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any


def pg_connect(db_url: str, **kwargs: Any) -> Any:
    """A psycopg connection to a test database, whose search path finds waypost's tables
    (in their own schema, `waypost`)."""
    import psycopg

    return psycopg.connect(db_url, options="-c search_path=waypost", **kwargs)


def db_query(db_url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one read query (written with `?` placeholders) on either kind of database."""
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()
    with pg_connect(db_url) as pg:
        return pg.execute(sql.replace("?", "%s"), params).fetchall()


def db_write(db_url: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Write to the database behind the engine's back, as an editor with access would."""
    db_write_all(db_url, (sql, params))


def db_write_all(db_url: str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Several writes (each SQL with its params, `?` placeholders) in one transaction."""
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        try:
            for sql, params in statements:
                conn.execute(sql, params)
            conn.commit()
        finally:
            conn.close()
        return
    with pg_connect(db_url) as pg:
        for sql, params in statements:
            pg.execute(sql.replace("?", "%s"), params)


@contextlib.contextmanager
def write_lock(db_url: str) -> Iterator[None]:
    """Hold the database's write lock, as another process writing slowly would."""
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("COMMIT")
            conn.close()
        return
    import psycopg

    with pg_connect(db_url) as pg:
        # The engine's transactions take these tables in their own order, so taking all
        # four can deadlock with one of them; PostgreSQL then cancels one side. When it
        # cancels this side, take the locks again (the engine's side went on).
        for _ in range(50):
            try:
                pg.execute("LOCK TABLE runs, events, tasks, timers IN EXCLUSIVE MODE")
                break
            except psycopg.errors.DeadlockDetected:
                pg.rollback()
        else:
            raise AssertionError("could not take the write lock: every try deadlocked")
        yield
