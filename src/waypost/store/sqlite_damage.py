"""A SQLite file's soundness: whether an error says it is damaged or refused a write for
what it carries, and the problems a check finds (its structure, then every run's
snapshot head against its history), said in words."""

from __future__ import annotations

import sqlite3
from typing import Any

CHECKS = {"quick": "quick_check", "full": "integrity_check", "none": ""}
_PROBLEMS_SHOWN = 5


def rows_by_name(
    conn: sqlite3.Connection, sql: str, params: dict[str, Any] | None = None
) -> list[sqlite3.Row]:
    """The rows of `sql`, read by column name whatever row factory `conn` was given."""
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    try:
        return cur.execute(sql, params or {}).fetchall()
    finally:
        cur.close()


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite says the file is damaged (rather than busy, missing or full)."""
    name = str(getattr(exc, "sqlite_errorname", ""))
    text = str(exc)
    return (
        name.startswith("SQLITE_CORRUPT")
        or name == "SQLITE_NOTADB"
        or "malformed" in text
        or "not a database" in text
    )


_REFUSALS = (
    sqlite3.DataError,
    sqlite3.IntegrityError,
    sqlite3.InterfaceError,
    sqlite3.NotSupportedError,
)


def refused(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused a write for what it carries (a value too big or of a type
    it cannot bind, a constraint), so that making it again as it is fails again
    (`StoreRejected`); a busy, full or damaged file is not."""
    name = str(getattr(exc, "sqlite_errorname", ""))
    if name == "SQLITE_TOOBIG" or name.startswith("SQLITE_CONSTRAINT"):
        return True
    if isinstance(exc, sqlite3.ProgrammingError):
        return "closed" not in str(exc)  # a closed connection is the store stopping
    return isinstance(exc, _REFUSALS)


# A run's snapshot head (runs.last_seq, runs.last_hash) is written in the same
# transaction as the event it names, so in a sound file it is always the run's
# newest event. One primary-key search per run: with max(), SQLite takes the bare
# column e.hash from the row of the newest event.
_HEAD_MISMATCHES = """
SELECT r.tenant AS tenant, r.run_id AS run_id, r.last_seq AS last_seq,
       (SELECT max(e.seq) FROM events AS e
         WHERE e.tenant = r.tenant AND e.run_id = r.run_id) AS newest_seq
FROM runs AS r
WHERE (SELECT max(e.seq), e.hash FROM events AS e
        WHERE e.tenant = r.tenant AND e.run_id = r.run_id)
      IS NOT (r.last_seq, r.last_hash)
LIMIT :limit
"""


def find_damage(conn: sqlite3.Connection, check: str) -> list[str]:
    """The problems in the file open on `conn`, the first few of each kind; [] if sound.

    `check` is "quick" (`PRAGMA quick_check`) or "full" (`PRAGMA integrity_check`).
    When the file's structure is sound, every run's snapshot head is compared with
    its history too. Reads only.
    """
    pragma = CHECKS[check]
    try:
        problems = [
            line
            for row in rows_by_name(conn, f"PRAGMA {pragma}({_PROBLEMS_SHOWN})")
            for line in str(row[pragma]).splitlines()
            if line != "ok" and not line.startswith("*** in database")
        ]
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        # The check stops at the first page it cannot read: say whose page it is.
        tables = _damaged_tables(conn, pragma)
        where = f" (in {', '.join(tables)})" if tables else ""
        return [f"{pragma} stopped: {exc}{where}"]
    if problems:
        more = "; ..." if len(problems) >= _PROBLEMS_SHOWN else ""  # it stops counting there
        return [f"{pragma} found: {'; '.join(problems)}{more}"]
    schema = {row["name"] for row in rows_by_name(conn, "SELECT name FROM sqlite_schema")}
    if not {"waypost_migrations", "runs", "events"} <= schema:
        return []  # not migrated yet: no runs to compare
    rows = rows_by_name(conn, _HEAD_MISMATCHES, {"limit": _PROBLEMS_SHOWN + 1})
    return [_head_problem(row) for row in rows]


def _damaged_tables(conn: sqlite3.Connection, pragma: str) -> list[str]:
    if sqlite3.sqlite_version_info < (3, 33, 0):
        return []  # older SQLite checks only whole files
    try:
        names = [
            str(row["name"])
            for row in rows_by_name(conn, "SELECT name FROM sqlite_schema WHERE type = 'table'")
        ]
    except sqlite3.DatabaseError:
        return []  # the schema itself cannot be read
    damaged = []
    for name in names:
        quoted = '"' + name.replace('"', '""') + '"'
        try:
            rows = rows_by_name(conn, f"PRAGMA {pragma}({quoted})")
        except sqlite3.DatabaseError:
            damaged.append(f"table {name}")
            continue
        if [row[pragma] for row in rows] != ["ok"]:
            damaged.append(f"table {name}")
    return damaged


def _head_problem(row: sqlite3.Row) -> str:
    run = f"run {row['tenant']}/{row['run_id']}"
    last_seq = row["last_seq"]
    newest_seq = row["newest_seq"]
    if newest_seq is None:
        return f"{run}: its snapshot says its history ends at event {last_seq}, but it has none"
    if newest_seq != last_seq:
        return (
            f"{run}: its snapshot says its history ends at event {last_seq}, "
            f"but the history ends at event {newest_seq}"
        )
    return f"{run}: event {last_seq} does not have the hash its snapshot records"


def damaged_message(path: str, problems: list[str], *, unchanged: bool = True) -> str:
    """Why waypost refuses the file at `path`, and what to do about it."""
    shown = "; ".join(problems[:_PROBLEMS_SHOWN])
    if len(problems) > _PROBLEMS_SHOWN:
        shown += "; ..."
    left = " and has not changed it" if unchanged else ""
    return (
        f"the SQLite file {path!r} is damaged: {shown}. waypost refuses to serve it{left}: "
        "restore the file from a backup (?check=none in the URL opens it anyway, "
        "for tools that must read what is left)"
    )
