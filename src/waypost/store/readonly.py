"""Reading runs and histories from a database that must not change: `open_reader(url)`.

A deploy check (`waypost replay`) reads production's runs while workers serve
them. It must not write anything: not a migration, not a WAL checkpoint, not a
created file. So it does not open a `Store` (which creates a missing SQLite file
and migrates the schema); it opens one connection that the database itself keeps
from writing — SQLite's `mode=ro`, PostgreSQL's `default_transaction_read_only` —
and runs the store's own read transactions (`transactions/runs.py`) on it.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from waypost.errors import ConfigurationError, StoreError
from waypost.model.chain import PLAIN, Chain
from waypost.model.encryption import Keys
from waypost.model.events import Event

from . import transactions as txn
from .base import RunRecord
from .sqlfile import load_queries
from .urls import redact_url, scrub_password

T = TypeVar("T")


class HistoryReader:
    """Runs and their histories, read from a database opened read-only."""

    def __init__(self, run: Callable[[Callable[..., Any], tuple[Any, ...]], Any], close: Any):
        self._run = run
        self._close = close

    def list_runs(
        self, tenant: str | None, status: str, workflow: str, limit: int
    ) -> list[RunRecord]:
        """Up to `limit` runs of `workflow` in `status` (newest first), of one tenant or all."""
        result: list[RunRecord] = self._run(txn.list_runs, (tenant, status, workflow, limit))
        return result

    def load_run(self, tenant: str, run_id: str) -> tuple[RunRecord | None, list[Event]]:
        """The run's snapshot and its whole history, read together."""
        result: tuple[RunRecord | None, list[Event]] = self._run(txn.load_run, (tenant, run_id))
        return result

    def close(self) -> None:
        self._close()

    def __enter__(self) -> HistoryReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_reader(url: str, keys: Keys | None = None, chain: Chain = PLAIN) -> HistoryReader:
    """A read-only reader of the database at `url`; refuses one that does not exist.

    `keys` open the payloads stored encrypted (`waypost.model.encryption`); `chain`
    checks the rows read (their MACs under the chain key, `BrokenRecord`)."""
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        return _sqlite_reader(url, keys, chain)
    if scheme in ("postgresql", "postgres"):
        return _postgres_reader(url, keys, chain)
    raise ConfigurationError(
        f"unsupported database URL {redact_url(url)!r}: use sqlite:///path/to/file.db "
        "or postgresql://user@host:port/database"
    )


def _sqlite_reader(url: str, keys: Keys | None, chain: Chain) -> HistoryReader:
    from .sqlite import SqliteTx, parse_sqlite_url

    path, _ = parse_sqlite_url(url)
    if path == ":memory:" or not os.path.isfile(path):
        raise ConfigurationError(f"there is no database at {path}")
    uri = pathlib.Path(path).absolute().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA query_only = ON")
        _require_schema(
            lambda: _first(conn.execute("SELECT max(version) FROM waypost_migrations").fetchone()),
            sqlite3.Error,
            path,
        )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read SQLite file {path!r}: {exc}") from exc
    queries = load_queries("sqlite")

    def run(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        tx = SqliteTx(conn, queries, chain, keys=keys)
        try:
            return tx.read(fn, args)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read SQLite file {path!r}: {exc}") from exc

    return HistoryReader(run, conn.close)


def _postgres_reader(url: str, keys: Keys | None, chain: Chain) -> HistoryReader:
    import psycopg

    from .postgres import PostgresTx, parse_postgres_url

    conninfo, options = parse_postgres_url(url)
    schema = options["schema"]
    where = redact_url(url)
    try:
        conn = psycopg.connect(
            conninfo,
            connect_timeout=30,
            autocommit=True,
            options=f"-c default_transaction_read_only=on -c search_path={schema}",
        )
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot connect to PostgreSQL at {where}: {scrub_password(str(exc), url)}".strip()
        ) from exc
    try:
        _require_schema(
            lambda: _first(conn.execute("SELECT max(version) FROM waypost_migrations").fetchone()),
            psycopg.Error,
            where,
        )
    except BaseException:
        conn.close()
        raise
    queries = load_queries("postgres")

    def run(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            with conn.transaction():
                tx = PostgresTx(conn, queries, chain, keys=keys)
                tx.begin_read()
                return fn(tx, *args)
        except psycopg.Error as exc:
            raise StoreError(
                f"PostgreSQL error: {type(exc).__name__}: {scrub_password(str(exc), url)}"
            ) from exc

    return HistoryReader(run, conn.close)


def _first(row: Any) -> Any:
    return None if row is None else row[0]


def _require_schema(version: Callable[[], Any], errors: Any, where: str) -> None:
    """Refuse a database waypost has never set up (it would show no runs, misleadingly)."""
    try:
        found = version()
    except errors as exc:
        raise ConfigurationError(f"{where} is not a waypost database: {exc}") from exc
    if found is None:
        raise ConfigurationError(f"{where} is not a waypost database (no schema version)")


__all__ = ["HistoryReader", "open_reader"]
