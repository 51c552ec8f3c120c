"""The SQLite store: one file, WAL, group commit.

The transactions are shared with PostgreSQL (the `transactions` package); here
they run on a `SqliteTx`, whose connections return `sqlite3.Row`s, read by
column name.

Writes requested during one turn of the event loop are committed together at
the end of that turn: each request in its own SAVEPOINT (so one request's
failed condition rolls back only that request), one COMMIT, one fsync for
many runs' steps. When the engine is nearly idle a write runs at once
instead. Either way the commit runs on the loop's thread, which saves the
thread hand-offs that cost more than the SQLite work itself; its connection
never waits for another process's write lock, and a batch that finds the
file locked goes to a writer thread that waits for it (so does every write
with `?commits=thread` in the URL, for applications whose event loop must not
block on the disk). Reads use separate connections, which WAL lets run
beside the writer.

Durability: by default `synchronous=FULL`, so a commit that was acknowledged
survives a power cut. `?synchronous=normal` in the URL is faster and still
safe against a crash of the process, but a power cut may lose the last
commits (never corrupt the file).

Integrity: before anything writes to an existing file, `open()` checks it on a
read-only connection: `PRAGMA quick_check` (`?check=full` runs the slower
`integrity_check`, `?check=none` skips the checks, for tools that must read a
damaged file) and that every run's snapshot head is the newest event of its
history. A damaged file raises `StoreCorrupted` and is left exactly as it was;
serving it could spread the damage into new commits and checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pathlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlparse

from waypost.errors import (
    ConfigurationError,
    SchemaError,
    StoreCorrupted,
    StoreError,
    StoreRejected,
)
from waypost.model.chain import PLAIN, Chain
from waypost.model.encryption import Keys

from .grouping import group_of, settle
from .sqlfile import load_migrations, load_queries
from .sqlite_damage import (
    CHECKS,
    damaged_message,
    find_damage,
    is_damage,
    refused,
    rows_by_name,
)
from .sqlite_files import create_private as create_private, path_error, prepare_file
from .sqlstore import SqlStore
from .tx import Abort, Tx
from .urls import redact_url
from .wakeups import Wakeups

T = TypeVar("T")

_SYNC_MODES = {"full": "FULL", "normal": "NORMAL", "extra": "EXTRA"}
BUSY_POLL = 0.001  # seconds between tries for a write lock another process holds


def parse_sqlite_url(url: str) -> tuple[str, dict[str, str]]:
    """`sqlite:///rel/path.db` or `sqlite:////abs/path.db` -> (path, options)."""
    parsed = urlparse(url)
    if parsed.scheme != "sqlite":
        raise ConfigurationError(f"not a SQLite URL: {redact_url(url)!r}")
    if parsed.netloc:
        raise ConfigurationError(
            f"SQLite URL {redact_url(url)!r} has a host; write sqlite:///relative.db or "
            "sqlite:////absolute.db"
        )
    path = unquote(parsed.path[1:] if parsed.path.startswith("/") else parsed.path)
    if not path or path == ":memory:":
        raise ConfigurationError(
            f"SQLite URL {url!r} names no file; waypost needs a file (e.g. sqlite:///waypost.db)"
        )
    if "\x00" in path:
        raise ConfigurationError(f"the SQLite path {path!r} holds a NUL character")
    options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = set(options) - {"synchronous", "busy_timeout", "commits", "check"}
    if unknown:
        raise ConfigurationError(f"unknown SQLite URL option(s): {', '.join(sorted(unknown))}")
    return path, options


class SqliteTx(Tx):
    """A transaction on a SQLite connection (in autocommit mode: the store begins and ends it).

    Statements run on the connection itself, each on a cursor of its own that is
    dropped (and its statement reset) as soon as its rows are read.
    """

    __slots__ = ("_savepoints", "conn", "notified", "wakeups")

    def __init__(
        self,
        conn: sqlite3.Connection,
        queries: dict[str, str],
        chain: Chain = PLAIN,
        *,
        keys: Keys | None = None,
        wakeups: Wakeups | None = None,
    ) -> None:
        super().__init__(conn, queries, chain, keys=keys)
        self.conn = conn
        self._savepoints = itertools.count()
        self.wakeups = wakeups
        self.notified: set[str] = set()

    def notify(self, topic: str) -> None:
        self.notified.add(topic)  # sent to the file's other engines once committed

    def committed(self, ok: bool) -> None:
        """The transaction ended (committed if `ok`): send what it notified, or drop it."""
        topics, self.notified = self.notified, set()
        if ok and topics and self.wakeups is not None:
            self.wakeups.send(topics)

    def begin_read(self) -> None:
        self.conn.execute("BEGIN")

    def end_read(self) -> None:
        self.conn.execute("COMMIT")

    def read(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """`fn(self, *args)` in one snapshot: its statements all see one moment."""
        self.begin_read()
        try:
            return fn(self, *args)
        finally:
            self.end_read()

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        name = f"sp{next(self._savepoints)}"
        self.conn.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            self.conn.execute(f"ROLLBACK TO {name}")
            self.conn.execute(f"RELEASE {name}")
            raise
        self.conn.execute(f"RELEASE {name}")


@dataclass(slots=True)
class _Request:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


_STOP = object()


def _resolve(done: list[tuple[_Request, Any, BaseException | None]]) -> None:
    for req, value, error in done:
        settle(req.future, value, error)


def _connect(path: str, synchronous: str, busy_timeout: float) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, cached_statements=256
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    # Switching a new file to WAL needs a lock SQLite does not wait for when
    # another connection is opening it at the same moment: wait here instead.
    deadline = time.monotonic() + max(busy_timeout, 1.0)
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()["journal_mode"]
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                conn.close()
                raise
            time.sleep(0.01)
    if str(mode).lower() != "wal":
        raise StoreError(f"could not put {path!r} in WAL mode (got {mode!r})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


def _connect_read_only(path: str, busy_timeout: float) -> sqlite3.Connection:
    """A connection that cannot write the file: not even a checkpoint when it closes."""
    uri = pathlib.Path(path).absolute().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    return conn


class _Busy(Exception):
    """Another process holds the write lock (only raised when asked to fail fast)."""


def run_batch(
    conn: sqlite3.Connection,
    tx: SqliteTx,
    requests: list[tuple[Callable[..., Any], tuple[Any, ...]]],
    path: str,
    *,
    fail_fast: bool = False,
    wait: float = 0.0,
) -> list[tuple[Any, BaseException | None]]:
    """Run requests in one transaction, each in its own savepoint; commit once.

    A request whose condition fails (`Abort`) or that raises is rolled back
    alone; the others commit. A failed COMMIT fails them all. With
    `fail_fast`, a write lock held by another process raises `_Busy` at once;
    otherwise it is waited for up to `wait` seconds (`begin`).
    """
    try:
        begin(conn, wait)
    except sqlite3.Error as exc:
        if fail_fast and isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            raise _Busy() from exc
        err = StoreError(f"SQLite could not begin a write transaction on {path}: {exc}")
        return [(None, err)] * len(requests)
    single = len(requests) == 1
    outcomes: list[tuple[Any, BaseException | None]] = []
    aborted = False
    for fn, args in requests:
        try:
            if single:
                value = fn(tx, *args)
            else:
                with tx.savepoint():
                    value = fn(tx, *args)
            outcomes.append((value, None))
        except Abort as abort:
            # Whatever the request wrote before its condition failed is undone, as the
            # savepoint of a batched request undoes it.
            aborted = True
            outcomes.append((abort.result, None))
        except sqlite3.Error as exc:
            error = (
                StoreRejected(f"SQLite refused the write on {path}: {exc}")
                if refused(exc)
                else StoreError(f"SQLite error on {path}: {exc}")
            )
            outcomes.append((None, error))
        except Exception as exc:
            outcomes.append((None, exc))
    try:
        if single and (outcomes[0][1] is not None or aborted):
            conn.execute("ROLLBACK")
            tx.committed(False)
        else:
            conn.execute("COMMIT")
            tx.committed(True)
    except sqlite3.Error as exc:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        tx.committed(False)
        err = StoreError(f"SQLite commit failed on {path}: {exc}")
        return [(None, err)] * len(requests)
    return outcomes


def begin(conn: sqlite3.Connection, wait: float) -> None:
    """BEGIN IMMEDIATE on `conn` (whose own busy timeout is 0), trying again every
    `BUSY_POLL` seconds for up to `wait` while another process holds the write lock.

    SQLite's own busy handler sleeps ever longer between tries (up to 100 ms), so a
    lock held 20 ms by another process was taken here 33 ms later, one held 35 ms,
    53 ms later; polling takes it within a millisecond of its release."""
    deadline = None
    pause = BUSY_POLL / 4
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + wait
            if now >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, BUSY_POLL)


class _Writer(threading.Thread):
    def __init__(self, store: SqliteStore) -> None:
        super().__init__(name="waypost-sqlite-writer", daemon=True)
        self._store = store
        self.conn = _connect(store.path, store.synchronous, store.busy_timeout)
        self.conn.execute("PRAGMA busy_timeout = 0")  # `begin` waits for the write lock
        wakeups = store.wakeups
        self.tx = SqliteTx(self.conn, store.queries, store.chain, keys=store.keys, wakeups=wakeups)
        self.inline_conn = _connect(store.path, store.synchronous, store.busy_timeout)
        self.inline_conn.execute("PRAGMA busy_timeout = 0")  # fail fast: see SqliteStore._write
        self.inline_tx = SqliteTx(
            self.inline_conn, store.queries, store.chain, keys=store.keys, wakeups=wakeups
        )
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.commits = 0
        self.requests = 0

    def run(self) -> None:
        store = self._store
        conn, tx = self.conn, self.tx
        try:
            stop = False
            while not stop:
                first = self.queue.get()
                if first is _STOP:
                    break
                batch, stop = group_of(self.queue, first, store.max_batch, _STOP)
                self._execute(conn, tx, batch)
        finally:
            conn.close()
            self.inline_conn.close()

    def _execute(self, conn: sqlite3.Connection, tx: SqliteTx, batch: list[_Request]) -> None:
        with self._store.conn_lock:
            outcomes = run_batch(
                conn,
                tx,
                [(req.fn, req.args) for req in batch],
                self._store.path,
                wait=self._store.busy_timeout,
            )
        self.commits += 1
        self.requests += len(batch)
        self._deliver(
            [(req, value, error) for req, (value, error) in zip(batch, outcomes, strict=True)]
        )

    @staticmethod
    def _deliver(done: list[tuple[_Request, Any, BaseException | None]]) -> None:
        by_loop: dict[
            asyncio.AbstractEventLoop, list[tuple[_Request, Any, BaseException | None]]
        ] = {}
        for item in done:
            by_loop.setdefault(item[0].loop, []).append(item)
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(_resolve, items)


class SqliteStore(SqlStore):
    """The `Store` for one SQLite file."""

    dialect = "sqlite"

    def __init__(self, url: str, *, max_batch: int = 512) -> None:
        self.url = url
        self.path, options = parse_sqlite_url(url)
        sync = options.get("synchronous", "full").lower()
        if sync not in _SYNC_MODES:
            raise ConfigurationError(
                f"synchronous={sync!r} is not allowed; use one of {', '.join(_SYNC_MODES)}"
            )
        self.synchronous = _SYNC_MODES[sync]
        try:
            self.busy_timeout = float(options.get("busy_timeout", "30"))
        except ValueError:
            self.busy_timeout = -1.0
        if not 0 <= self.busy_timeout < 86400:
            raise ConfigurationError(
                f"busy_timeout={options.get('busy_timeout')!r} is not allowed: "
                "give the seconds to wait for another process's write lock (0 or more)"
            )
        self.commits = options.get("commits", "loop").lower()
        if self.commits not in ("loop", "thread"):
            raise ConfigurationError(
                f"commits={self.commits!r} is not allowed; use 'loop' (the default) or 'thread'"
            )
        self.check = options.get("check", "quick").lower()
        if self.check not in CHECKS:
            raise ConfigurationError(
                f"check={self.check!r} is not allowed; use 'quick' (the default), 'full' "
                "(slower, also compares indexes with their tables) or 'none' (no check, "
                "for tools that must read a damaged file)"
            )
        self.max_batch = max_batch
        self.queries = load_queries("sqlite")
        self._writer: _Writer | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.conn_lock = threading.Lock()  # the write connection: writer thread or inline
        self._pending = 0  # requests handed to the writer thread, not yet answered
        self._batch: list[_Request] = []
        self._flush_handle: asyncio.Handle | None = None
        # Given by the engine (`use_idle_probe`): True when this process is nearly
        # idle, so a commit has nothing to be grouped with and may run on the
        # caller's thread.
        self.inline_probe: Callable[[], bool] | None = None
        self.wakeups = Wakeups(self.path)

    # -- lifecycle ----------------------------------------------------------
    async def open(self) -> None:
        if self._writer is not None:
            return
        await asyncio.to_thread(self._migrate)
        try:
            writer = _Writer(self)
        except sqlite3.Error as exc:
            raise self._open_failed(f"cannot open SQLite file {self.path!r}", exc) from exc
        self._readers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="waypost-sqlite-read")
        self._writer = writer
        writer.start()

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.queue.put(_STOP)
            await asyncio.to_thread(writer.join)
        readers, self._readers = self._readers, None
        if readers is not None:
            await asyncio.to_thread(readers.shutdown, True)
        with self._lock:
            for conn in self._reader_conns:
                conn.close()
            self._reader_conns.clear()
        self.wakeups.close()

    def _migrate(self) -> None:
        prepare_file(self.path)  # or a WaypostError saying which path and why
        if self.check != "none":
            try:
                self._refuse_if_damaged()
            except OSError as exc:
                raise path_error(self.path, exc) from exc
        try:
            conn = _connect(self.path, self.synchronous, self.busy_timeout)
        except sqlite3.Error as exc:
            raise self._open_failed(f"cannot open SQLite file {self.path!r}", exc) from exc
        try:
            migrate_connection(conn)
        except sqlite3.DatabaseError as exc:
            raise self._open_failed(f"SQLite file {self.path!r} cannot be used", exc) from exc
        finally:
            conn.close()

    def _refuse_if_damaged(self) -> None:
        """Check an existing file before anything writes to it; raise `StoreCorrupted`."""
        try:
            if os.path.getsize(self.path) == 0:
                return  # a new file (SQLite writes a WAL file's first page at once)
        except FileNotFoundError:
            return
        try:
            try:
                conn = _connect_read_only(self.path, self.busy_timeout)
                try:
                    problems = find_damage(conn, self.check)
                finally:
                    conn.close()
            except sqlite3.OperationalError as exc:
                if not str(getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_READONLY"):
                    raise
                # Only SQLite's own recovery from a crash (rolling back a hot
                # journal) can make the file readable, and it writes: let it,
                # then check. waypost's files are WAL and never need this.
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                try:
                    problems = find_damage(conn, self.check)
                finally:
                    conn.close()
        except sqlite3.Error as exc:
            if not is_damage(exc):
                raise StoreError(f"cannot check SQLite file {self.path!r}: {exc}") from exc
            problems = [str(exc)]
        if problems:
            raise StoreCorrupted(damaged_message(self.path, problems))

    def _open_failed(self, what: str, exc: sqlite3.Error) -> StoreError:
        if is_damage(exc):
            # Past the check, connecting may have written to the file already.
            return StoreCorrupted(damaged_message(self.path, [str(exc)], unchanged=False))
        return StoreError(f"{what}: {exc}")

    # -- plumbing -----------------------------------------------------------
    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        writer = self._writer
        if writer is None:
            raise StoreError("the store is not open")
        if self.commits == "thread":
            return await self._to_writer(fn, args)
        probe = self.inline_probe
        if (
            not self._batch
            and self._pending == 0
            and probe is not None
            and probe()
            and self.conn_lock.acquire(blocking=False)
        ):
            # Nearly idle: nothing to group this write with, so do it now rather
            # than at the end of this turn of the loop.
            try:
                ((value, error),) = run_batch(
                    writer.inline_conn, writer.inline_tx, [(fn, args)], self.path, fail_fast=True
                )
            except _Busy:
                pass
            else:
                writer.commits += 1
                writer.requests += 1
                if error is not None:
                    raise error
                return value  # type: ignore[no-any-return]
            finally:
                self.conn_lock.release()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._batch.append(_Request(fn, args, fut, loop))
        if self._flush_handle is None:
            self._flush_handle = loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        """Commit every write requested during this turn of the event loop, together."""
        self._flush_handle = None
        batch, self._batch = self._batch, []
        writer = self._writer
        if writer is None:
            for req in batch:
                req.future.set_exception(StoreError("the store is closed"))
            return
        if self._pending == 0 and self.conn_lock.acquire(blocking=False):
            # Run it here: no thread hops. This connection does not wait for
            # another process's write lock (that would block the event loop);
            # a busy file sends the batch to the writer thread instead.
            try:
                outcomes = run_batch(
                    writer.inline_conn,
                    writer.inline_tx,
                    [(req.fn, req.args) for req in batch],
                    self.path,
                    fail_fast=True,
                )
            except _Busy:
                outcomes = None
            finally:
                self.conn_lock.release()
            if outcomes is not None:
                writer.commits += 1
                writer.requests += len(batch)
                _resolve([(req, v, e) for req, (v, e) in zip(batch, outcomes, strict=True)])
                return
        for req in batch:
            self._pending += 1
            req.future.add_done_callback(self._done)
            writer.queue.put(req)

    async def _to_writer(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        writer = self._writer
        if writer is None:
            raise StoreError("the store is not open")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._pending += 1
        fut.add_done_callback(self._done)
        writer.queue.put(_Request(fn, args, fut, loop))
        return await fut

    def _done(self, _: asyncio.Future[Any]) -> None:
        self._pending -= 1

    def _reader(self) -> SqliteTx:
        tx: SqliteTx | None = getattr(self._local, "tx", None)
        if tx is None:
            conn = _connect(self.path, self.synchronous, self.busy_timeout)
            with self._lock:
                self._reader_conns.append(conn)
            tx = SqliteTx(conn, self.queries, self.chain, keys=self.keys)
            self._local.tx = tx
        return tx

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        if self._readers is None:
            raise StoreError("the store is not open")

        def call() -> T:
            tx = self._reader()
            try:
                return tx.read(fn, args)
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite read failed on {self.path}: {exc}") from exc

        return await asyncio.get_running_loop().run_in_executor(self._readers, call)

    @property
    def opened(self) -> bool:
        return self._writer is not None

    @property
    def stats(self) -> dict[str, int]:
        w = self._writer
        return {"commits": w.commits, "requests": w.requests} if w else {}

    async def listen(self, on_notify: Callable[[str], None]) -> None:
        """Call `on_notify(topic)` when another engine on the file has work for this one
        (`wakeups.py`; polling finds it too, later, where wake-ups cannot be had)."""
        await self.wakeups.listen(on_notify)


def migrate_connection(conn: sqlite3.Connection) -> list[int]:
    """Apply the migrations this database lacks, under the write lock; returns them."""
    migrations = load_migrations("sqlite")
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS waypost_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        applied = {
            row["version"] for row in rows_by_name(conn, "SELECT version FROM waypost_migrations")
        }
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
            for statement in split_statements(mig.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO waypost_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (mig.version, mig.name, time.time()),
            )
            done.append(mig.version)
        conn.execute("COMMIT")
        return done
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def split_statements(script: str) -> list[str]:
    """Split a SQL script into complete statements (comments and blank lines dropped)."""
    statements: list[str] = []
    current: list[str] = []
    for line in script.splitlines():
        if not current and (not line.strip() or line.strip().startswith("--")):
            continue
        current.append(line)
        text = "\n".join(current)
        if sqlite3.complete_statement(text):
            statements.append(text.strip())
            current = []
    if current and "\n".join(current).strip():
        raise SchemaError(f"incomplete SQL statement at the end of a migration: {current[0]!r}")
    return statements
