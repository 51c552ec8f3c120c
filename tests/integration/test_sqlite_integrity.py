"""A damaged SQLite file is refused when a store opens it, and left as it was.

`PRAGMA quick_check` finds pages that do not fit together; comparing every run's
snapshot head with its history finds well-formed pages from different moments.
The damaged WAL files are made the way they arise: commits are kept in the WAL
by a reader, a checkpoint copies (some of) them into the main file, and the WAL
then loses its tail or is lost, as when a file and its WAL are copied at
different moments. A WAL cut that the main file has not overtaken cannot be told
from a crash before the lost commits; a test shows what the engine does then.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query
from waypost.errors import ConfigurationError, StoreCorrupted
from waypost.store.sqlite import SqliteStore


@wp.activity
def double(ctx: wp.ActivityContext, x: int) -> int:
    return x * 2


@wp.workflow(name="integrity_doubler")
async def doubler(ctx: wp.WorkflowContext, x: int) -> int:
    y = await ctx.run(double, x)
    return await ctx.run(double, y)


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """Every engine in this module opens a SQLite file."""
    return sqlite_url


def _file(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _digests(path: Path) -> dict[str, str]:
    """SHA-256 of the database file and of its WAL, if it has one.

    An empty WAL is the same as none (a read-only connection may create one).
    """
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (path, _wal(path))
        if p.exists() and p.stat().st_size > 0
    }


def _run_to_completion(make_engine: Any, url: str, count: int) -> list[str]:
    engine = make_engine(doubler, double, url=url)
    with engine.running():
        handles = [engine.start(doubler, i) for i in range(count)]
        for i, handle in enumerate(handles):
            assert handle.result(timeout=30) == 4 * i
    engine.close()
    return [handle.run_id for handle in handles]


@contextlib.contextmanager
def _wal_kept(path: Path) -> Iterator[sqlite3.Connection]:
    """Commits made in the block stay in the WAL, in order, and none is checkpointed.

    A read transaction opened before them keeps any checkpoint from copying
    them; the connection stays open after it, so that no other connection's
    close checkpoints the WAL away. It is yielded for the test's own checkpoint.
    """
    keeper = sqlite3.connect(path, isolation_level=None)
    try:
        keeper.execute("BEGIN")
        keeper.execute("SELECT count(*) FROM runs").fetchone()
        yield keeper
    finally:
        if keeper.in_transaction:
            keeper.execute("COMMIT")
        keeper.close()


def _wal_frames(wal: Path) -> tuple[int, list[tuple[int, int, bytes]]]:
    """The page size and the WAL's frames: (page number, file size in pages if the
    frame ends a commit else 0, page image)."""
    data = wal.read_bytes()
    page_size = int.from_bytes(data[8:12], "big")
    salts = data[16:24]
    frames = []
    for at in range(32, len(data) - 24 - page_size + 1, 24 + page_size):
        if data[at + 8 : at + 16] != salts:
            break  # left from before the WAL last started over
        page = int.from_bytes(data[at : at + 4], "big")
        commit = int.from_bytes(data[at + 4 : at + 8], "big")
        frames.append((page, commit, data[at + 24 : at + 24 + page_size]))
    return page_size, frames


def _wal_cut(wal: Path, frames: int, page_size: int) -> bytes:
    return wal.read_bytes()[: 32 + frames * (24 + page_size)]


def _quick_check(path: Path) -> list[str]:
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("PRAGMA quick_check")]
    finally:
        conn.close()


def _spoil_an_events_page(path: Path) -> bool:
    """Overwrite one page inside the events table's b-tree with random bytes.

    Returns whether the page is known to be the table's (SQLite built with the
    dbstat table); otherwise the middle page of the file is spoiled.
    """
    conn = sqlite3.connect(path)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        try:
            pages = [
                row[0]
                for row in conn.execute(
                    "SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' "
                    "ORDER BY pageno"
                )
            ]
        except sqlite3.OperationalError:  # no dbstat in this SQLite
            pages = []
        page = (
            pages[len(pages) // 2]
            if pages
            else conn.execute("PRAGMA page_count").fetchone()[0] // 2 + 1
        )
    finally:
        conn.close()
    assert not _wal(path).exists() or _wal(path).stat().st_size == 0
    with path.open("r+b") as f:
        f.seek((page - 1) * page_size)
        f.write(random.Random(page).randbytes(page_size))
    return bool(pages)


# -- a sound file --------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "?check=quick", "?check=full"])
def test_a_sound_file_passes_the_check_and_its_runs_go_on(
    make_engine: Any, sqlite_url: str, query: str
) -> None:
    first = _run_to_completion(make_engine, sqlite_url, 20)
    engine = make_engine(doubler, double, url=sqlite_url + query)
    assert {run.run_id for run in engine.list_runs(status="completed")} == set(first)
    with engine.running():
        handle = engine.start(doubler, 7)
        assert handle.result(timeout=30) == 28
    assert engine.verify(handle.run_id) == []


def test_an_empty_file_is_set_up_as_a_new_database(make_engine: Any, sqlite_url: str) -> None:
    path = _file(sqlite_url)
    path.touch()  # empty, as SQLite leaves a file it has only just created
    engine = make_engine(doubler, double, url=sqlite_url + "?check=full")
    with engine.running():
        assert engine.start(doubler, 1).result(timeout=30) == 4


# -- damaged pages ---------------------------------------------------------------


def test_a_page_of_garbage_in_the_events_table_is_refused_and_left_as_it_was(
    make_engine: Any, sqlite_url: str
) -> None:
    _run_to_completion(make_engine, sqlite_url, 200)
    path = _file(sqlite_url)
    known = _spoil_an_events_page(path)
    before = _digests(path)
    for url in (sqlite_url, sqlite_url + "?check=full"):
        with pytest.raises(StoreCorrupted, match=re.escape(repr(str(path)))) as raised:
            wp.Engine(url)
        message = str(raised.value)
        assert "restore the file from a backup" in message
        assert "has not changed it" in message
        if known:
            assert "events" in message
        assert _digests(path) == before


@pytest.mark.parametrize("query", ["", "?check=none"])
def test_a_file_that_is_not_a_database_is_refused_even_unchecked(
    tmp_path: Path, query: str
) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a SQLite database, just some bytes" * 100)
    with pytest.raises(StoreCorrupted, match=r"garbage\.db.*not a database"):
        wp.Engine(f"sqlite:///{path}{query}")


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (
            "UPDATE runs SET last_hash = 'not-the-hash' WHERE run_id = :run",
            "event 6 does not have the hash its snapshot records",
        ),
        (
            "DELETE FROM events WHERE run_id = :run AND seq = 6",
            "its snapshot says its history ends at event 6, but the history ends at event 5",
        ),
        (
            "DELETE FROM events WHERE run_id = :run",
            "its snapshot says its history ends at event 6, but it has none",
        ),
    ],
    ids=["hash", "seq", "no-events"],
)
def test_a_snapshot_that_disagrees_with_its_history_is_refused(
    make_engine: Any, sqlite_url: str, tamper: str, problem: str
) -> None:
    run_ids = _run_to_completion(make_engine, sqlite_url, 3)
    conn = sqlite3.connect(_file(sqlite_url), isolation_level=None)
    try:
        conn.execute(tamper, {"run": run_ids[1]})
    finally:
        conn.close()
    with pytest.raises(StoreCorrupted, match=re.escape(f"run default/{run_ids[1]}: {problem}")):
        wp.Engine(sqlite_url)


def test_a_hot_rollback_journal_is_rolled_back_by_sqlite_then_checked(
    make_engine: Any, tmp_path: Path
) -> None:
    """waypost's files are WAL and never have one, but a file it is pointed at may:
    SQLite's recovery from the crash must write, which a read-only check cannot."""
    path = tmp_path / "journal.db"
    crash = (
        "import os, sqlite3, sys\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "conn.execute('CREATE TABLE t (x)')\n"
        "conn.execute('PRAGMA cache_size = 1')\n"
        "conn.execute('BEGIN')\n"
        "for _ in range(2000):\n"
        "    conn.execute('INSERT INTO t VALUES (randomblob(500))')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", crash, str(path)], check=True)
    assert path.with_name("journal.db-journal").stat().st_size > 0
    engine = make_engine(doubler, double, url=f"sqlite:///{path}")
    with engine.running():
        assert engine.start(doubler, 2).result(timeout=30) == 8
    assert db_query(f"sqlite:///{path}", "SELECT count(*) FROM t") == [(0,)]


# -- damaged WAL -------------------------------------------------------------------


def test_a_wal_cut_behind_what_a_checkpoint_copied_is_refused(
    make_engine: Any, sqlite_url: str, tmp_path: Path
) -> None:
    path = _file(sqlite_url)
    _run_to_completion(make_engine, sqlite_url, 20)  # checkpointed into the file
    damaged = tmp_path / "cut" / "waypost.db"
    damaged.parent.mkdir()
    with _wal_kept(path) as keeper:
        _run_to_completion(make_engine, sqlite_url, 20)
        keeper.execute("COMMIT")
        busy, in_wal, copied = keeper.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert busy == 0
        assert copied == in_wal > 0  # the file now holds every commit
        page_size, frames = _wal_frames(_wal(path))
        assert len(frames) == in_wal
        first_commit = next(n for n, (_, commit, _) in enumerate(frames, 1) if commit)
        # The WAL then loses all but its first commit.
        shutil.copyfile(path, damaged)
        _wal(damaged).write_bytes(_wal_cut(_wal(path), first_commit, page_size))
    before = _digests(damaged)
    assert set(before) == {"waypost.db", "waypost.db-wal"}
    with pytest.raises(StoreCorrupted, match=re.escape(repr(str(damaged)))) as raised:
        wp.Engine(f"sqlite:///{damaged}")
    assert "quick_check" in str(raised.value)
    assert _digests(damaged) == before


def test_a_checkpoint_stopped_between_two_tables_then_a_lost_wal_is_refused(
    make_engine: Any, sqlite_url: str, tmp_path: Path
) -> None:
    """Each page is well formed, so quick_check passes: the runs table is from
    after the run finished and the events table from before it started."""
    path = _file(sqlite_url)
    engine = make_engine(doubler, double)
    run_id = engine.start(doubler, 3).run_id  # waits for a worker
    engine.close()
    started = path.read_bytes()
    with _wal_kept(path):
        finisher = make_engine(doubler, double)
        with finisher.running():
            assert finisher.result(run_id, timeout=30) == 12
        finisher.close()
        page_size, frames = _wal_frames(_wal(path))
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        roots = dict(conn.execute("SELECT name, rootpage FROM sqlite_schema WHERE type = 'table'"))
    finally:
        conn.close()
    assert roots["runs"] < roots["events"]
    # A checkpoint writes pages in page order; this one stopped before the events
    # table's page, and the WAL was lost.
    torn = bytearray(started)
    for page, _commit, image in frames:
        if page < roots["events"]:
            torn[(page - 1) * page_size : page * page_size] = image
    damaged = tmp_path / "torn" / "waypost.db"
    damaged.parent.mkdir()
    damaged.write_bytes(bytes(torn))
    assert _quick_check(damaged) == ["ok"]
    before = _digests(damaged)
    with pytest.raises(StoreCorrupted, match=re.escape(repr(str(damaged)))) as raised:
        wp.Engine(f"sqlite:///{damaged}")
    assert f"run default/{run_id}: its snapshot says its history ends at event" in str(raised.value)
    assert _digests(damaged) == before


def test_a_wal_cut_the_file_has_not_overtaken_opens_as_the_earlier_state(
    make_engine: Any, sqlite_url: str, tmp_path: Path
) -> None:
    """Not detectable: the file is exactly as a crash before the lost commits
    would have left it. The engine serves that state; runs carry on from it,
    re-running the steps whose results were lost."""
    path = _file(sqlite_url)
    _run_to_completion(make_engine, sqlite_url, 5)
    cut = tmp_path / "cut" / "waypost.db"
    cut.parent.mkdir()
    with _wal_kept(path):
        _run_to_completion(make_engine, sqlite_url, 5)
        page_size, frames = _wal_frames(_wal(path))
        commits = [n for n, (_, commit, _) in enumerate(frames, 1) if commit]
        shutil.copyfile(path, cut)  # nothing checkpointed into it since the first five
        _wal(cut).write_bytes(_wal_cut(_wal(path), commits[len(commits) // 2], page_size))
    engine = make_engine(doubler, double, url=f"sqlite:///{cut}")
    runs = engine.list_runs()
    assert 5 <= len(runs) <= 10
    assert sum(run.status == wp.RunStatus.COMPLETED for run in runs) < 10
    with engine.running():
        for run in runs:
            engine.result(run.run_id, timeout=30)
    for run in runs:
        assert engine.get(run.run_id).status == wp.RunStatus.COMPLETED
        assert engine.verify(run.run_id) == []


# -- the check option --------------------------------------------------------------


def test_check_none_opens_a_damaged_file_for_tools_that_must_read_it(
    make_engine: Any, sqlite_url: str
) -> None:
    run_ids = _run_to_completion(make_engine, sqlite_url, 200)
    _spoil_an_events_page(_file(sqlite_url))
    engine = make_engine(url=sqlite_url + "?check=none")
    runs = engine.list_runs(status="completed", limit=1000)
    assert {run.run_id for run in runs} == set(run_ids)


@pytest.mark.parametrize("value", ["fast", "off", "yes"])
def test_an_unknown_check_is_a_configuration_error(sqlite_url: str, value: str) -> None:
    url = f"{sqlite_url}?check={value}"
    with pytest.raises(ConfigurationError, match=f"check='{value}' is not allowed"):
        SqliteStore(url)
    with pytest.raises(ConfigurationError, match=r"'quick'.*'full'.*'none'"):
        wp.Engine(url)
    assert not _file(sqlite_url).exists()
