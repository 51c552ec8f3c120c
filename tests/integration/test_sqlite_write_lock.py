"""Waiting for another process's write lock on a SQLite file: the writer tries again
every millisecond (`begin`), takes the lock once it is released, and gives up after
its busy timeout with SQLite's own error. Two connections stand for two processes."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from waypost.store.sqlite import begin


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA busy_timeout = 0")
    return conn


def test_a_held_write_lock_is_taken_once_it_is_released(tmp_path: Path) -> None:
    holder, waiter = connect(tmp_path / "w.db"), connect(tmp_path / "w.db")
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    outcome: list[BaseException | None] = []
    trying = threading.Thread(target=lambda: outcome.append(_begin(waiter, 60.0)))
    trying.start()
    try:
        # The waiter cannot have it while the holder writes: a try now fails at once.
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            connect(tmp_path / "w.db").execute("BEGIN IMMEDIATE")
    finally:
        holder.execute("COMMIT")
    trying.join(timeout=30)
    assert outcome == [None]
    assert waiter.in_transaction
    # It sees what the holder committed, and writes after it.
    assert waiter.execute("SELECT count(*) FROM t").fetchone() == (1,)
    waiter.execute("INSERT INTO t VALUES (2)")
    waiter.execute("COMMIT")
    assert holder.execute("SELECT sum(x) FROM t").fetchone() == (3,)


def test_a_lock_held_past_the_wait_gives_sqlites_error(tmp_path: Path) -> None:
    holder, waiter = connect(tmp_path / "w.db"), connect(tmp_path / "w.db")
    holder.execute("BEGIN IMMEDIATE")
    try:
        error = _begin(waiter, 0.05)
    finally:
        holder.execute("ROLLBACK")
    assert isinstance(error, sqlite3.OperationalError) and "locked" in str(error)
    assert not waiter.in_transaction
    assert _begin(waiter, 0.0) is None  # free now: no wait needed


def test_an_error_other_than_a_lock_is_raised_at_once(tmp_path: Path) -> None:
    conn = connect(tmp_path / "w.db")
    conn.execute("BEGIN")
    error = _begin(conn, 60.0)  # a transaction within a transaction: not a lock to wait for
    assert isinstance(error, sqlite3.OperationalError)
    assert "within a transaction" in str(error)


def _begin(conn: sqlite3.Connection, wait: float) -> BaseException | None:
    try:
        begin(conn, wait)
    except sqlite3.Error as exc:
        return exc
    return None
