"""The PostgreSQL store: many engine and worker processes on one database.

The transactions are the ones SQLite runs (`transactions.py`); only the
plumbing differs. Each request runs in a pooled connection on a worker thread
(psycopg 3, `psycopg_pool`), in one transaction. Rows a transaction reads and
then changes are locked (`FOR UPDATE`), claims skip rows others hold
(`FOR UPDATE SKIP LOCKED`), and every condition (sequence number, fences,
timer generation) is also part of the statement that writes, so correctness
never rests on advisory locks or server-side functions.

`LISTEN`/`NOTIFY` wakes idle workers when a task becomes ready or a timer is
set, within milliseconds; polling stays on as the fallback, so a lost
notification only delays work. A broken connection (a restart of the server)
surfaces as a `StoreError` for the request that hit it; the pool checks
connections before handing them out and reconnects on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

from waypost.errors import ConfigurationError, SchemaError, StoreError

from . import transactions as txn
from .sqlfile import load_migrations, load_queries
from .sqlstore import SqlStore

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - the dependency is declared
    raise ConfigurationError(
        "PostgreSQL needs psycopg 3 and psycopg_pool: pip install 'psycopg[binary]' psycopg_pool"
    ) from exc

T = TypeVar("T")
log = logging.getLogger("waypost.postgres")

CHANNEL = "waypost"
_OPTIONS = {"pool_size": 10}


def parse_postgres_url(url: str) -> tuple[str, dict[str, int]]:
    """Split waypost's own options (`pool_size`) off a PostgreSQL URL."""
    parsed = urlparse(url)
    if parsed.scheme not in ("postgresql", "postgres"):
        raise ConfigurationError(f"not a PostgreSQL URL: {url!r}")
    options: dict[str, int] = dict(_OPTIONS)
    rest = []
    for key, value in parse_qsl(parsed.query, keep_blank_values=True):
        if key in _OPTIONS:
            try:
                options[key] = int(value)
            except ValueError:
                raise ConfigurationError(f"{key}={value!r} in {url!r} is not a number") from None
            if options[key] < 1:
                raise ConfigurationError(f"{key} must be at least 1, got {value}")
        else:
            rest.append((key, value))
    return urlunparse(parsed._replace(scheme="postgresql", query=urlencode(rest))), options


_IDLE_CHECK = 2.0  # seconds a pooled connection may sit idle before it is pinged
# A process frozen inside a transaction (SIGSTOP, a VM pause) would hold its row
# locks and block the takeover of its work; the server ends such a session instead.
# The engine's transactions last milliseconds.
_STUCK_TRANSACTION = "-c idle_in_transaction_session_timeout=30000"


def _session_options(conninfo: str) -> dict[str, Any]:
    """Connection settings the store adds, unless the URL sets `options` itself."""
    if "options" in conninfo_to_dict(conninfo):
        return {}
    return {"options": _STUCK_TRANSACTION}


def _mark_used(conn: psycopg.Connection[Any]) -> None:
    conn._waypost_used_at = time.monotonic()  # type: ignore[attr-defined]


def _check_if_idle(conn: psycopg.Connection[Any]) -> None:
    """Ping a connection that has been idle a while (the server may have restarted).

    A connection used a moment ago is handed out as it is: a ping on every
    request would add a round trip to every step.
    """
    if time.monotonic() - getattr(conn, "_waypost_used_at", 0.0) > _IDLE_CHECK:
        ConnectionPool.check_connection(conn)


class _PgTx:
    """A transaction on one connection, addressed by query name."""

    __slots__ = ("_conn", "_q")

    def __init__(self, conn: psycopg.Connection[Any], queries: dict[str, str]) -> None:
        self._conn = conn
        self._q = queries

    def one(self, name: str, params: dict[str, Any]) -> Sequence[Any] | None:
        row: Sequence[Any] | None = self._conn.execute(self._q[name], params).fetchone()
        return row

    def all(self, name: str, params: dict[str, Any]) -> list[Sequence[Any]]:
        return self._conn.execute(self._q[name], params).fetchall()

    def run(self, name: str, params: dict[str, Any]) -> int:
        return self._conn.execute(self._q[name], params).rowcount

    def many(self, name: str, rows: list[dict[str, Any]]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(self._q[name], rows)

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        with self._conn.transaction():
            yield

    def notify(self, topic: str) -> None:
        # Delivered when (and only if) the transaction commits.
        self._conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, topic))

    def begin_read(self) -> None:
        self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def end_read(self) -> None:
        return None


class PostgresStore(SqlStore):
    """The `Store` for a PostgreSQL database."""

    dialect = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url
        self.conninfo, options = parse_postgres_url(url)
        self.pool_size = options["pool_size"]
        self.queries = load_queries("postgres")
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._threads: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._transactions = 0

    # -- lifecycle ----------------------------------------------------------
    async def open(self) -> None:
        if self._pool is not None:
            return
        await asyncio.to_thread(self._migrate)
        pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=self.pool_size,
            open=False,
            check=_check_if_idle,
            reset=_mark_used,
            name="waypost",
            reconnect_timeout=24 * 3600,
            kwargs=_session_options(self.conninfo),
        )
        try:
            await asyncio.to_thread(pool.open, True, 30.0)
        except (psycopg.Error, PoolTimeout) as exc:
            await asyncio.to_thread(pool.close)
            raise StoreError(f"cannot connect to PostgreSQL at {self._where()}: {exc}") from exc
        self._pool = pool
        self._threads = ThreadPoolExecutor(
            max_workers=self.pool_size, thread_name_prefix="waypost-pg"
        )

    async def close(self) -> None:
        threads, self._threads = self._threads, None
        if threads is not None:
            await asyncio.to_thread(threads.shutdown, True)
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.close)

    def _where(self) -> str:
        parsed = urlparse(self.conninfo)
        return f"{parsed.hostname or 'localhost'}:{parsed.port or 5432}{parsed.path}"

    def _migrate(self) -> None:
        for attempt in range(5):
            try:
                with psycopg.connect(self.conninfo, connect_timeout=30) as conn:
                    migrate_connection(conn)
                return
            except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                # Two processes created the migrations table at the same moment.
                time.sleep(0.1 * (attempt + 1))
            except psycopg.OperationalError as exc:
                raise StoreError(
                    f"cannot connect to PostgreSQL at {self._where()}: {exc}".strip()
                ) from exc
            except psycopg.Error as exc:
                raise StoreError(f"PostgreSQL schema migration failed: {exc}") from exc
        raise StoreError("PostgreSQL schema migration kept colliding with another process")

    # -- plumbing -----------------------------------------------------------
    def _run(self, fn: Callable[..., T], args: tuple[Any, ...], read: bool) -> T:
        pool = self._pool
        if pool is None:
            raise StoreError("the store is not open")
        try:
            with pool.connection() as conn:
                tx = _PgTx(conn, self.queries)
                try:
                    with conn.transaction():
                        if read:
                            tx.begin_read()
                        return fn(tx, *args)
                except txn.Abort as abort:
                    return cast(T, abort.result)
                finally:
                    self._transactions += 1
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error: {type(exc).__name__}: {exc}".strip()) from exc
        except PoolTimeout as exc:
            raise StoreError(f"no PostgreSQL connection available: {exc}") from exc

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        threads = self._threads
        if threads is None:
            raise StoreError("the store is not open")
        return await asyncio.get_running_loop().run_in_executor(threads, self._run, fn, args, False)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        threads = self._threads
        if threads is None:
            raise StoreError("the store is not open")
        return await asyncio.get_running_loop().run_in_executor(threads, self._run, fn, args, True)

    @property
    def stats(self) -> dict[str, int]:
        return {"commits": self._transactions, "requests": self._transactions}

    async def listen(self, on_notify: Callable[[str], None]) -> None:
        """Call `on_notify(topic)` for every notification, reconnecting as needed.

        After each (re)connection it reports "reconnected": notifications sent
        while it was away are lost, so whoever listens should look for work.
        """
        delay = 0.1
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True, connect_timeout=10
                )
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    delay = 0.1
                    on_notify("reconnected")
                    async for note in conn.notifies():
                        on_notify(note.payload)
            except (psycopg.Error, OSError) as exc:
                log.warning(
                    "listening for notifications failed (retrying in %.1fs): %s", delay, exc
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def migrate_connection(conn: psycopg.Connection[Any]) -> list[int]:
    """Apply the migrations this database lacks, holding a lock on the migrations table."""
    migrations = load_migrations("postgres")
    with conn.transaction():
        conn.execute(
            "CREATE TABLE IF NOT EXISTS waypost_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at double precision NOT NULL)"
        )
        # Concurrent starts queue here; the first applies, the others find it done.
        conn.execute("LOCK TABLE waypost_migrations IN ACCESS EXCLUSIVE MODE")
        applied = {row[0] for row in conn.execute("SELECT version FROM waypost_migrations")}
        newest = max((m.version for m in migrations), default=0)
        if applied and max(applied) > newest:
            raise SchemaError(
                f"the database has schema version {max(applied)}, newer than this waypost "
                f"understands ({newest}); upgrade waypost"
            )
        done = []
        for mig in migrations:
            if mig.version in applied:
                continue
            conn.execute(mig.sql.encode())
            conn.execute(
                "INSERT INTO waypost_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                (mig.version, mig.name, time.time()),
            )
            done.append(mig.version)
    return done
