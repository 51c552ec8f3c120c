"""Which database errors say "refused as it is" (`StoreRejected`) and which say "away"."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from waypost.store.postgres import refused as pg_refused
from waypost.store.sqlite_damage import refused as sqlite_refused

# SQLSTATE -> refused for what the statement carries (fails again as it is)?
POSTGRES = {
    "23514": True,  # a check constraint
    "23505": True,  # a unique violation
    "22P05": True,  # a character the encoding cannot hold
    "22021": True,  # invalid byte sequence
    "54000": True,  # a program limit (an index row too big)
    "42P01": True,  # no such table: the schema is not waypost's
    "0A000": True,  # a feature not supported
    "57P01": False,  # the server shut down
    "40P01": False,  # a deadlock's victim
    "40001": False,  # a serialization failure
    "53300": False,  # too many connections
    "53100": False,  # the disk is full
    "08006": False,  # the connection failed
    "XX000": False,  # an internal error
}


@pytest.mark.parametrize(("sqlstate", "expected"), POSTGRES.items())
def test_postgres_refusals_by_sqlstate(sqlstate: str, expected: bool) -> None:
    assert pg_refused(psycopg.errors.lookup(sqlstate)("x")) is expected


def test_postgres_refusals_psycopg_makes_before_sending() -> None:
    assert pg_refused(psycopg.DataError("PostgreSQL text fields cannot contain NUL"))
    assert not pg_refused(psycopg.OperationalError("the connection is lost"))
    assert not pg_refused(psycopg.InterfaceError("the connection is closed"))


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (sqlite3.IntegrityError("CHECK constraint failed"), True),
        (sqlite3.DataError("string or blob too big"), True),
        (sqlite3.InterfaceError("Error binding parameter 1"), True),
        (sqlite3.ProgrammingError("Incorrect number of bindings supplied"), True),
        (sqlite3.ProgrammingError("Cannot operate on a closed database."), False),
        (sqlite3.OperationalError("database is locked"), False),
        (sqlite3.OperationalError("database or disk is full"), False),
    ],
    ids=str,
)
def test_sqlite_refusals(error: sqlite3.Error, expected: bool) -> None:
    assert sqlite_refused(error) is expected
