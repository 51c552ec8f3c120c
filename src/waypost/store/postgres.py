"""The PostgreSQL store: many engine and worker processes on one database.

The transactions are the ones SQLite runs (the `transactions` package, given
a `PostgresTx`); only the plumbing differs. Each request runs in a pooled
connection on a worker thread (psycopg 3, `psycopg_pool`), in one transaction,
whose statements return rows as dicts, read by column name. Rows a transaction reads and
then changes are locked (`FOR UPDATE`), claims skip rows others hold
(`FOR UPDATE SKIP LOCKED`), and every condition (sequence number, fences,
timer generation) is also part of the statement that writes, so correctness
never rests on advisory locks or server-side functions.

`LISTEN`/`NOTIFY` wakes idle workers when a task becomes ready or a timer is
set, within milliseconds; polling stays on as the fallback, so a lost
notification only delays work. A broken connection (a restart of the server)
surfaces as a `StoreError` for the request that hit it; the pool checks
connections before handing them out and reconnects on its own.

Requests run in lanes, each with its own threads and connections, so that the
engine's housekeeping never queues behind its own load: lease renewals and
heartbeats (the `liveness` lane, one connection) and the timer loop's firing and
look-ups (the `timers` lane) do not wait for the claims and commits of the
`main` lane, however many of those are queued (docs/decisions/0024).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import random
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

from waypost.errors import ConfigurationError, SchemaError, StoreError, StoreRejected
from waypost.model.chain import PLAIN, Chain
from waypost.model.encryption import Keys
from waypost.model.identity import preview
from waypost.model.logs import logger, warn_once

from . import transactions as txn
from .base import RunCommit
from .postgres_group import CommitGroups, Dirty, Outcome, run_requests
from .postgres_reach import RECONNECT_AFTER, STANDBY_HINT, read_only, revive, unreachable
from .reach import Reach
from .sqlfile import load_migrations, load_queries
from .sqlstore import SqlStore
from .transactions.step import commit_step, finish_shaped, step_shaped
from .tx import Abort, Tx
from .urls import redact_url, scrub_password, server_of

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - the dependency is declared
    raise ConfigurationError(
        "PostgreSQL needs psycopg 3 and psycopg_pool: pip install 'psycopg[binary]' psycopg_pool"
    ) from exc

T = TypeVar("T")
log = logger("waypost.postgres")

# Errors after which PostgreSQL rolled the whole transaction back and running it again
# is the documented remedy, and how many times `_run` tries.
TRANSIENT_ERRORS = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
TRANSIENT_TRIES = 5
# SQLSTATE classes of a statement refused for what it carries, which fails again as it
# is: data exception, integrity constraint violation, syntax error or access rule
# violation, program limit exceeded, feature not supported.
_REFUSED_CLASSES = frozenset({"22", "23", "42", "54", "0A"})


def refused(exc: psycopg.Error) -> bool:
    """Whether PostgreSQL (or psycopg, before sending it) refused a statement for what it
    carries, so that sending it again as it is fails again (`StoreRejected`); a lost
    connection, a restart, a deadlock or a full disk are not."""
    if exc.sqlstate is None:
        # psycopg's own refusals: a value it cannot send (a NUL in a text), a query that
        # does not match its parameters.
        return isinstance(exc, psycopg.DataError | psycopg.ProgrammingError)
    return exc.sqlstate[:2] in _REFUSED_CLASSES


_INT_OPTIONS = {"pool_size": 10}
_SWITCH = {"on": True, "off": False, "1": True, "0": False, "true": True, "false": False}
# The writes whose requests are gathered into group commits (postgres_group).
GROUPED = frozenset({txn.commit_run, txn.create_run})
# The lanes besides `main` (whose size is the URL's pool_size): name -> connections.
LANES = {"liveness": 1, "timers": 4}
# The transactions that run in a lane of their own rather than in `main`.
LANE_OF: dict[Callable[..., Any], str] = {
    txn.renew_leases: "liveness",
    txn.beat_worker: "liveness",
    txn.live_workers: "liveness",
    txn.release_owner: "liveness",
    txn.fire_due_timers: "timers",
    txn.next_timer_at: "timers",
    txn.expired_activities: "timers",
    txn.admit_enqueued: "timers",
}
DEFAULT_SCHEMA = "waypost"
# Lower-case letters, digits and underscores, so the name needs no quoting anywhere;
# short enough that the notification channel derived from it fits PostgreSQL's 63 bytes.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")
_RESERVED_SCHEMAS = ("pg_", "information_schema")


def parse_postgres_url(url: str) -> tuple[str, dict[str, Any]]:
    """Split waypost's own options (`pool_size`, `schema`, `group_commit`,
    `step_statement`) off a PostgreSQL URL."""
    parsed = urlparse(url)
    if parsed.scheme not in ("postgresql", "postgres"):
        raise ConfigurationError(f"not a PostgreSQL URL: {redact_url(url)!r}")
    options: dict[str, Any] = {
        **_INT_OPTIONS,
        "schema": DEFAULT_SCHEMA,
        "group_commit": True,
        "step_statement": True,
    }
    rest = []
    for key, value in parse_qsl(parsed.query, keep_blank_values=True):
        if key in ("group_commit", "step_statement"):
            if value.lower() not in _SWITCH:
                raise ConfigurationError(
                    f"{key}={value!r} in {redact_url(url)!r} is not on or off "
                    f"(use {key}=on or {key}=off)"
                )
            options[key] = _SWITCH[value.lower()]
        elif key in _INT_OPTIONS:
            try:
                options[key] = int(value)
            except ValueError:
                raise ConfigurationError(
                    f"{key}={value!r} in {redact_url(url)!r} is not a number"
                ) from None
            if options[key] < 1:
                raise ConfigurationError(f"{key} must be at least 1, got {value}")
        elif key == "schema":
            if not _SCHEMA_NAME.fullmatch(value) or value.startswith(_RESERVED_SCHEMAS):
                raise ConfigurationError(
                    f"schema={preview(value)} in the database URL is not a usable schema "
                    "name: use 1-48 lower-case letters, digits and underscores, starting "
                    "with a letter or underscore (not pg_... or information_schema)"
                )
            options["schema"] = value
        else:
            rest.append((key, value))
    return urlunparse(parsed._replace(scheme="postgresql", query=urlencode(rest))), options


def channel_for(schema: str) -> str:
    """The LISTEN/NOTIFY channel of the waypost tables in `schema` (one per schema)."""
    return "waypost" if schema == DEFAULT_SCHEMA else f"waypost_{schema}"


_IDLE_CHECK = 2.0  # seconds a pooled connection may sit idle before it is pinged
# A process frozen or cut off inside a transaction (SIGSTOP, a VM pause, a lost network)
# would hold its row locks and block the takeover of its work; the server ends such a
# session after 5 s instead. The engine's transactions last milliseconds, and never wait
# for anything but the database between their statements.
_STUCK_TRANSACTION = "-c idle_in_transaction_session_timeout=5000"
# A connection whose peer went silent (a host cut off, a port blackholed) is given up
# after about 20 s, not the operating system's two hours: keepalives from 10 s idle,
# and unacknowledged data given up after 20 s. A URL that sets any of them keeps its own.
TCP_LIVENESS = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "2",
    "tcp_user_timeout": "20000",
}


def _session_options(conninfo: str, schema: str) -> dict[str, Any]:
    """Connection settings the store adds to the URL's own: in `options`, waypost's
    schema first on the search path and (unless the URL sets one) the stuck-transaction
    limit; and TCP liveness (`TCP_LIVENESS`), each unless the URL sets it."""
    url = conninfo_to_dict(conninfo)
    given = url.get("options") or ""
    options = [str(given)] if given else []
    if "idle_in_transaction_session_timeout" not in str(given):
        options.append(_STUCK_TRANSACTION)
    options.append(f"-c search_path={schema}")
    liveness = {k: v for k, v in TCP_LIVENESS.items() if k not in url}
    return {"options": " ".join(options), **liveness}


class _IdleCheck:
    """Pings a pooled connection that has been idle a while (the server may have restarted).

    A connection used a moment ago is handed out as it is: a ping on every
    request would add a round trip to every step. The pool calls `check` when it
    hands a connection out and `mark_used` when the connection comes back.
    """

    def __init__(self) -> None:
        # Weak keys: a connection the pool closes and drops is forgotten with it.
        self._used_at: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = (
            weakref.WeakKeyDictionary()
        )

    def mark_used(self, conn: psycopg.Connection[Any]) -> None:
        self._used_at[conn] = time.monotonic()

    def check(self, conn: psycopg.Connection[Any]) -> None:
        if time.monotonic() - self._used_at.get(conn, 0.0) > _IDLE_CHECK:
            ConnectionPool.check_connection(conn)


class PostgresTx(Tx):
    """A transaction on a pooled psycopg connection (the store begins and ends it).

    Its statements run one after the other on one cursor, whose rows are dicts.
    """

    __slots__ = ("channel", "conn", "dirty", "one_statement_steps", "stepped", "writes")

    batch_timer_fires = True  # see transactions/timers.py

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        queries: dict[str, str],
        chain: Chain = PLAIN,
        channel: str = "waypost",
        *,
        keys: Keys | None = None,
        writes: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(conn.cursor(row_factory=dict_row), queries, chain, keys=keys)
        self.conn = conn
        self.channel = channel
        self.writes = writes  # the names of the statements that change rows
        self.dirty = False  # whether a statement changed (or may have changed) a row
        self.one_statement_steps = True  # see transactions/step.py
        self.stepped = 0  # steps made in one statement

    # A group commit rolls back when a request that changed rows fails its condition.
    def one(self, name: str, params: dict[str, Any]) -> Any:
        self.dirty = self.dirty or name in self.writes
        return super().one(name, params)

    def all(self, name: str, params: dict[str, Any]) -> list[Any]:
        self.dirty = self.dirty or name in self.writes
        return super().all(name, params)

    def run(self, name: str, params: dict[str, Any]) -> int:
        changed = super().run(name, params)
        self.dirty = self.dirty or (changed != 0 and name in self.writes)
        return changed

    def many(self, name: str, rows: list[dict[str, Any]]) -> None:
        self.dirty = self.dirty or (bool(rows) and name in self.writes)
        if name not in ROW_INSERTS:
            super().many(name, rows)
            return
        # One INSERT of many rows: one round trip, and none of the pipeline psycopg's
        # executemany enters and leaves on every call (a fifth of a step's CPU).
        for first in range(0, len(rows), _ROWS_PER_INSERT):
            chunk = rows[first : first + _ROWS_PER_INSERT]
            params = {f"{k}_{i}": v for i, row in enumerate(chunk) for k, v in row.items()}
            self.statements.execute(rows_insert(self.queries[name], len(chunk)), params)

    def step_statement(self, name: str, params: dict[str, Any]) -> Any:
        row = self.statements.execute(STEPS[name], params).fetchone()
        if row is not None and row["ok"]:
            self.dirty = True
            self.stepped += 1
        return row

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        with self.conn.transaction():
            yield

    def notify(self, topic: str) -> None:
        # Delivered when (and only if) the transaction commits.
        self.conn.execute("SELECT pg_notify(%s, %s)", (self.channel, topic))

    def begin_read(self) -> None:
        self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def end_read(self) -> None:
        return None


@dataclasses.dataclass
class _Lane:
    """Threads and connections of their own for one kind of request."""

    pool: ConnectionPool[psycopg.Connection[Any]]
    threads: ThreadPoolExecutor | None


class PostgresStore(SqlStore):
    """The `Store` for a PostgreSQL database."""

    dialect = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url
        self.conninfo, options = parse_postgres_url(url)
        self.pool_size: int = options["pool_size"]
        self.group_commit: bool = options["group_commit"]
        # A run's step in one statement (transactions/step.py; `?step_statement=off`).
        self.step_statement: bool = options["step_statement"]
        # Group committers (postgres_group): connections of the main lane, two left over.
        self.commit_threads = max(1, self.pool_size - 2)
        self.schema: str = options["schema"]
        self.channel = channel_for(self.schema)
        self._connect_options = _session_options(self.conninfo, self.schema)
        # With the two statements of a batch of due timers (transactions/timers.py).
        self.queries = load_queries("postgres") | load_queries("postgres", "timers.sql")
        self._writes = write_statements(self.queries)
        self._lanes: dict[str, _Lane] = {}
        self._lock = threading.Lock()  # for the counters, kept by many threads
        self._groups: CommitGroups | None = None
        self._transactions = 0  # every transaction, reads included
        self._commits = 0  # write transactions
        self._requests = 0  # write requests they carried
        self._redone = 0  # groups rolled back and run request by request
        self._stepped = 0  # steps made in one statement
        self._reach = Reach(self._where())

    # -- lifecycle ----------------------------------------------------------
    async def open(self) -> None:
        if self._lanes:
            return
        await asyncio.to_thread(self._migrate)
        sizes = {"main": self.pool_size, **LANES}
        lanes: dict[str, _Lane] = {}
        try:
            for name, size in sizes.items():
                lane = _Lane(self._new_pool(name, size), None)
                lanes[name] = lane
                # `main` connects now, so a wrong URL fails here; the others on first use.
                await asyncio.to_thread(lane.pool.open, name == "main", 30.0)
        except (psycopg.Error, PoolTimeout) as exc:
            for lane in lanes.values():
                await asyncio.to_thread(lane.pool.close)
            raise StoreError(
                f"cannot connect to PostgreSQL at {self._where()}: {self._safe(exc)}"
            ) from exc
        for name, lane in lanes.items():
            lane.threads = ThreadPoolExecutor(
                max_workers=sizes[name], thread_name_prefix=f"waypost-pg-{name}"
            )
        self._lanes = lanes
        if self.group_commit:
            self._groups = CommitGroups(self._run_group, threads=self.commit_threads)

    def _new_pool(self, name: str, size: int) -> ConnectionPool[psycopg.Connection[Any]]:
        idle = _IdleCheck()
        return ConnectionPool(
            self.conninfo,
            min_size=1 if name == "main" else 0,
            max_size=size,
            open=False,
            check=idle.check,
            reset=idle.mark_used,
            name=f"waypost-{name}",
            # A connection lost is tried again after about a second, then the pool
            # stops trying and grows again when a caller asks: never the doubling
            # backoff of a long `reconnect_timeout` (a minute's wait after a minute away).
            reconnect_timeout=RECONNECT_AFTER,
            kwargs=self._connect_options,
        )

    async def close(self) -> None:
        lanes, groups = self._lanes, self._groups
        self._groups = None  # writes from now on go alone, while the lanes are open
        if groups is not None:
            await asyncio.to_thread(groups.stop)
        self._lanes = {}
        for lane in lanes.values():
            if lane.threads is not None:
                await asyncio.to_thread(lane.threads.shutdown, True)
        for lane in lanes.values():
            await asyncio.to_thread(lane.pool.close)

    def __repr__(self) -> str:
        return f"PostgresStore({redact_url(self.url)!r})"

    def _safe(self, exc: BaseException) -> str:
        """A driver error's text, without the password should the driver quote it."""
        return scrub_password(str(exc), self.url)

    def _where(self) -> str:
        return server_of(self.conninfo)

    def _migrate(self) -> None:
        for attempt in range(5):
            try:
                with psycopg.connect(
                    self.conninfo, connect_timeout=30, **self._connect_options
                ) as conn:
                    migrate_connection(conn, self.schema)
                    _warn_without_autovacuum(conn, self._where())
                return
            except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                # Two processes created the schema or the migrations table at the same
                # moment (a table a migration creates that exists already is reported
                # by `migrate_connection` as the collision it is).
                time.sleep(0.1 * (attempt + 1))
            except psycopg.OperationalError as exc:
                raise StoreError(
                    f"cannot connect to PostgreSQL at {self._where()}: {self._safe(exc)}".strip()
                ) from exc
            except psycopg.errors.ReadOnlySqlTransaction as exc:  # a standby
                raise StoreError(
                    f"PostgreSQL at {self._where()} is a standby (read-only), so waypost cannot "
                    f"set up its schema there: {self._safe(exc)}. {STANDBY_HINT}"
                ) from exc
            except psycopg.Error as exc:
                raise StoreError(f"PostgreSQL schema migration failed: {self._safe(exc)}") from exc
        raise StoreError("PostgreSQL schema migration kept colliding with another process")

    # -- plumbing -----------------------------------------------------------
    def _run(
        self, pool: ConnectionPool[Any], fn: Callable[..., T], args: tuple[Any, ...], read: bool
    ) -> T:
        """Run `fn` in one transaction. A transaction PostgreSQL chose as a deadlock's
        victim, or failed for serialization, was rolled back whole, so it runs again
        (a few times, a little later each time) before the error reaches the caller."""
        for attempt in range(TRANSIENT_TRIES):
            try:
                return self._run_once(pool, fn, args, read)
            except StoreError as exc:
                transient = isinstance(exc.__cause__, TRANSIENT_ERRORS)
                if not transient or attempt == TRANSIENT_TRIES - 1:
                    raise
                time.sleep(0.01 * (attempt + 1) * (1 + random.random()))
        raise AssertionError("unreachable")  # pragma: no cover

    def _run_once(
        self, pool: ConnectionPool[Any], fn: Callable[..., T], args: tuple[Any, ...], read: bool
    ) -> T:
        began = time.monotonic()
        try:
            with pool.connection() as conn:
                tx = self._tx(conn)
                try:
                    with conn.transaction():
                        if read:
                            tx.begin_read()
                        result = fn(tx, *args)
                except Abort as abort:
                    result = cast(T, abort.result)
                finally:
                    self._count(0 if read else 1, 0 if read else 1, tx.stepped)
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._store_error(exc) from exc
        self._reach.back(began, wrote=not read)
        return result

    def _store_error(self, exc: psycopg.Error | PoolTimeout) -> StoreError:
        self._note_unreachable(exc)
        if isinstance(exc, PoolTimeout):
            return StoreError(f"no PostgreSQL connection available: {self._safe(exc)}")
        if refused(exc):
            # The primary message only: PostgreSQL's DETAIL quotes the refused row, which
            # may hold a payload, and the message is kept with the run it suspends.
            text = scrub_password(exc.diag.message_primary or str(exc), self.url)
            return StoreRejected(f"PostgreSQL refused the write: {type(exc).__name__}: {text}")
        return StoreError(f"PostgreSQL error: {type(exc).__name__}: {self._safe(exc)}".strip())

    def _count(self, commits: int, requests: int, stepped: int = 0) -> None:
        """One more transaction, carrying `requests` writes in `commits` commits (of
        them `stepped` made in one statement)."""
        with self._lock:
            self._transactions += 1
            self._commits += commits
            self._requests += requests
            self._stepped += stepped

    async def _in_lane(self, fn: Callable[..., T], args: tuple[Any, ...], read: bool) -> T:
        """Run `fn` on the threads and connections of its lane (`LANE_OF`, else main)."""
        key = fn.func if isinstance(fn, functools.partial) else fn
        lane = self._lanes.get(LANE_OF.get(key, "main"))
        if lane is None or lane.threads is None:
            raise StoreError("the store is not open")
        return await asyncio.get_running_loop().run_in_executor(
            lane.threads, self._run, lane.pool, fn, args, read
        )

    def _tx(self, conn: psycopg.Connection[Any]) -> PostgresTx:
        tx = PostgresTx(
            conn, self.queries, self.chain, self.channel, keys=self.keys, writes=self._writes
        )
        tx.one_statement_steps = self.step_statement
        return tx

    def _run_group(
        self, requests: list[tuple[Callable[..., Any], tuple[Any, ...]]]
    ) -> list[Outcome]:
        """Run a group of write requests in one transaction (on a thread of the main
        lane); see `postgres_group` for what happens when one of them fails."""
        pool = self._lanes["main"].pool
        if len(requests) == 1:
            fn, args = requests[0]
            if fn is txn.commit_run:
                made = self._step_alone(pool, args[0])
                if made is not None:
                    return [made]
                fn = txn.commit_run_in_full  # its one statement was tried, or cannot apply
            return [self._alone(pool, fn, args)]
        landed, began = False, time.monotonic()
        try:
            with pool.connection() as conn:
                tx = self._tx(conn)
                with conn.transaction():
                    outcomes = run_requests(tx, requests)
                    landed = True  # from here on, only the COMMIT can fail
            self._count(1, len(requests), tx.stepped)
            self._reach.back(began)
            return outcomes
        except PoolTimeout as exc:
            return [(None, self._store_error(exc))] * len(requests)
        except Exception as exc:
            self._count(0, 0)
            if landed:  # the COMMIT failed: whether it landed is unknown, as alone
                error = (
                    self._store_error(exc)
                    if isinstance(exc, psycopg.Error)
                    else StoreError(f"PostgreSQL commit failed: {exc!r}")
                )
                error.__cause__ = exc
                return [(None, error)] * len(requests)
            if not isinstance(exc, Dirty | psycopg.Error):
                log.debug("a group commit failed (%s); its requests run alone", exc)
        with self._lock:
            self._redone += 1
        return [self._alone(pool, fn, args) for fn, args in requests]

    def _step_alone(self, pool: ConnectionPool[Any], c: RunCommit) -> Outcome | None:
        """A lone commit of the one-statement shapes, made by its statement alone, outside
        a transaction: the statement is atomic, and BEGIN and COMMIT are two round trips
        fewer. None when it was not made so (not of those shapes, a condition failed and
        nothing was written, or PostgreSQL chose it as a deadlock's victim): the caller
        then makes it in a transaction, the long way (`commit_run_in_full`)."""
        if not (self.step_statement and (step_shaped(c) or finish_shaped(c))):
            return None
        began = time.monotonic()
        try:
            with pool.connection() as conn:
                conn.autocommit = True
                try:
                    tx = self._tx(conn)
                    result = commit_step(tx, c)
                finally:
                    conn.autocommit = False  # back to the pool as it came
        except PoolTimeout as exc:
            return None, self._store_error(exc)
        except psycopg.Error as exc:
            if isinstance(exc, TRANSIENT_ERRORS):
                return None  # rolled back whole: the long way tries again
            return None, self._store_error(exc)
        if result is None:  # a transaction of its own that wrote nothing
            self._count(0, 0)
            return None
        self._count(1, 1, tx.stepped)
        self._reach.back(began)
        return result, None

    def _alone(
        self, pool: ConnectionPool[Any], fn: Callable[..., Any], args: tuple[Any, ...]
    ) -> Outcome:
        try:
            return self._run(pool, fn, args, False), None
        except Exception as exc:
            return None, exc

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        if self._groups is not None and fn in GROUPED:
            return cast(T, await self._groups.submit(fn, args))
        return await self._in_lane(fn, args, False)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._in_lane(fn, args, True)

    @property
    def opened(self) -> bool:
        return bool(self._lanes)

    @property
    def stats(self) -> dict[str, int]:
        return {
            "commits": self._commits,
            "requests": self._requests,
            "transactions": self._transactions,
            "groups_redone": self._redone,
            "step_statements": self._stepped,
        }

    async def listen(self, on_notify: Callable[[str], None]) -> None:
        """Call `on_notify(topic)` for every notification, reconnecting as needed.

        After each (re)connection it reports "reconnected": notifications sent
        while it was away are lost, so whoever listens should look for work.
        """
        delay = 0.1
        while True:
            began = time.monotonic()
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True, connect_timeout=10, **self._connect_options
                )
                async with conn:
                    await conn.execute(f"LISTEN {self.channel}")
                    delay = 0.1
                    self._reach.back(began, wrote=False)
                    on_notify("reconnected")
                    async for note in conn.notifies():
                        on_notify(note.payload)
            except (psycopg.Error, OSError) as exc:
                if self._note_unreachable(exc):  # said once, by the store
                    log.debug("listening for notifications failed (retrying): %s", exc)
                else:
                    log.warning(
                        "listening for notifications failed (retrying in %.1fs): %s", delay, exc
                    )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_AFTER)

    @property
    def reachable(self) -> bool:
        return self._reach.reachable

    def _note_unreachable(self, exc: BaseException) -> bool:
        """Tell `Reach` if `exc` says the server cannot be reached (or takes no writes),
        and revive the pools meanwhile; False for other errors."""
        if read_only(exc):
            why = "the server is a standby: it takes no writes"
            self._reach.lost(why, STANDBY_HINT, writes_only=True)
            return True
        if not unreachable(exc):
            return False
        first = self._reach.reachable
        self._reach.lost(self._safe(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        if first:
            for name, lane in self._lanes.items():
                threading.Thread(
                    target=revive,
                    args=(lane.pool, self._reach),
                    name=f"waypost-revive-{name}",
                    daemon=True,
                ).start()
        return True


# A run's step as one statement (transactions/step.py).
STEPS = load_queries("postgres", "steps.sql")
# The INSERT ... VALUES statements that `PostgresTx.many` sends as one statement.
ROW_INSERTS = frozenset({"insert_event"})
_ROWS_PER_INSERT = 500
_PARAM = re.compile(r"%\((\w+)\)s")


@functools.lru_cache(maxsize=64)
def rows_insert(sql: str, n: int) -> str:
    """`sql` (an INSERT of one row, `VALUES (...)` last) made to insert `n` rows, the
    parameters of row i suffixed `_i`."""
    head, values, row = sql.partition("VALUES")
    if not values:
        raise ValueError(f"not an INSERT ... VALUES statement: {sql!r}")
    row = row.strip()
    rows = (_PARAM.sub(rf"%(\1_{i})s", row) for i in range(n))
    return f"{head}VALUES {', '.join(rows)}"


def _warn_without_autovacuum(conn: psycopg.Connection[Any], where: str) -> None:
    row = conn.execute("SHOW autovacuum").fetchone()
    if row is not None and str(row[0]).lower() == "off":
        warn_once(
            log,
            "autovacuum is off on the PostgreSQL server of %s: nothing refreshes the planner's "
            "statistics as waypost's tables grow, and PostgreSQL may then read a whole "
            "table to find one run (measured: 48 ms per lookup at 35,000 runs). Turn it "
            "on, or run ANALYZE regularly",
            where,
        )


def write_statements(queries: dict[str, str]) -> frozenset[str]:
    """The names of the statements that may change rows (all but plain SELECTs)."""
    writes = set()
    for name, sql in queries.items():
        code = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
        first = " ".join(code).split(maxsplit=1)[:1]
        if not first or first[0].upper() != "SELECT":
            writes.add(name)
    return frozenset(writes)


_CREATES = re.compile(r"^CREATE TABLE (?:IF NOT EXISTS )?([a-z_]+)", re.M)


def migrate_connection(conn: psycopg.Connection[Any], schema: str = DEFAULT_SCHEMA) -> list[int]:
    """Apply the migrations the tables in `schema` lack, holding a lock on the migrations
    table; leaves `conn`'s search path on `schema`.

    A table of waypost's name that waypost did not create (another application's
    `events`, say) is reported as the collision it is, and nothing is changed.
    """
    migrations = load_migrations("postgres")
    with conn.transaction():
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(f"SET search_path = {schema}")
        if (
            schema != "public"
            and _has_migrations(conn, "public")
            and not _has_migrations(conn, schema)
        ):
            raise SchemaError(
                "waypost's tables are in schema public (where earlier versions put them), "
                f"not in schema {schema}: add ?schema=public to the database URL to go on "
                f"using them, or move them with ALTER TABLE ... SET SCHEMA {schema}"
            )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS waypost_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at double precision NOT NULL)"
        )
        # Concurrent starts queue here; the first applies, the others find it done.
        conn.execute("LOCK TABLE waypost_migrations IN ACCESS EXCLUSIVE MODE")
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute("SELECT version FROM waypost_migrations")
            applied = {row["version"] for row in cur.fetchall()}
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
            existing = {row["tablename"] for row in cur.fetchall()}
        newest = max((m.version for m in migrations), default=0)
        if applied and max(applied) > newest:
            raise SchemaError(
                f"the database has schema version {max(applied)}, newer than this waypost "
                f"understands ({newest}); upgrade waypost"
            )
        pending = [m for m in migrations if m.version not in applied]
        taken = sorted({t for m in pending for t in _CREATES.findall(m.sql)} & existing)
        if taken:
            raise SchemaError(
                f"schema {schema} already has table(s) {', '.join(taken)} that waypost did "
                "not create: give waypost a schema of its own with ?schema=NAME in the "
                "database URL"
            )
        done = []
        for mig in pending:
            try:
                with conn.transaction():
                    conn.execute(mig.sql.encode())
            except (psycopg.errors.DuplicateTable, psycopg.errors.DuplicateObject) as exc:
                raise SchemaError(
                    f"migration {mig.version} ({mig.name}) collides with an object in "
                    f"schema {schema} that waypost did not create: {exc}; give waypost a "
                    "schema of its own with ?schema=NAME in the database URL"
                ) from exc
            conn.execute(
                "INSERT INTO waypost_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                (mig.version, mig.name, time.time()),
            )
            done.append(mig.version)
    return done


def _has_migrations(conn: psycopg.Connection[Any], schema: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'waypost_migrations'",
        (schema,),
    ).fetchone()
    return found is not None
