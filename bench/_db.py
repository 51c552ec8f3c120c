"""A fresh PostgreSQL database for one benchmark run (the benchmarks share this)."""

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
