"""Helpers the tests share, a module per theme; what most tests use is here too.

A test module imports what it needs from here, never from another test module
(`tests/unit/test_test_layout.py` keeps it so).
"""

from __future__ import annotations

from .db import db_query, db_write, db_write_all, pg_connect, write_lock
from .history import of_type
from .polling import eventually, eventually_async, run_reaches, until_event

__all__ = [
    "db_query",
    "db_write",
    "db_write_all",
    "eventually",
    "eventually_async",
    "of_type",
    "pg_connect",
    "run_reaches",
    "until_event",
    "write_lock",
]
