"""What the benchmarks share: a fresh PostgreSQL database for a run, and a count of the
completed runs of a store."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def fresh_postgres(db: str, prefix: str = "waypost_bench") -> Iterator[str]:
    """A new database on `db`'s server, dropped afterwards; its URL keeps `db`'s query,
    where waypost's own options (pool_size, group_commit, step_statement) go."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    server, _, options = db.partition("?")
    base = server.rsplit("/", 1)[0]
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{base}/{name}" + (f"?{options}" if options else "")
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def completed_runs(url: str) -> int:
    """How many runs of the store at `url` have completed (one query, no engine)."""
    query = "SELECT count(*) FROM runs WHERE status = 'completed'"
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///").split("?")[0])
        try:
            return int(conn.execute(query).fetchone()[0])
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url.partition("?")[0], options="-c search_path=waypost") as conn:
        row = conn.execute(query).fetchone()
        return int(row[0]) if row else 0
