"""Fixtures: every engine and store test runs on SQLite and on a real PostgreSQL server.

PostgreSQL tests get a database of their own, cloned from a template that has the
schema (so each test starts empty and tests never see each other's rows). The
server comes from WAYPOST_TEST_POSTGRES (default: postgres on 127.0.0.1:5432,
as CI provides).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import waypost as wp

# No time limit per generated example: speed is measured in bench/, and a loaded machine
# must not fail a property that holds.
settings.register_profile("waypost", deadline=None)
settings.load_profile("waypost")

POSTGRES = os.environ.get("WAYPOST_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
STORES = ["sqlite", "postgres"]


def _admin() -> Any:
    import psycopg

    return psycopg.connect(POSTGRES, autocommit=True)


def postgres_url(database: str) -> str:
    base, _, _ = POSTGRES.rpartition("/")
    return f"{base}/{database}"


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A database with the current schema, to clone for each test."""
    import psycopg

    from waypost.store.postgres import migrate_connection

    name = f"waypost_template_{os.getpid()}"
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(postgres_url(name)) as conn:
        migrate_connection(conn)
    yield name
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def scratch_postgres(prefix: str, template: str | None = None) -> Iterator[str]:
    """The URL of a new PostgreSQL database named `prefix` and a random suffix, a copy of
    `template` or else empty; dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template is not None else ""
    with _admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"{copy}')
    yield postgres_url(name)
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def fresh_postgres(request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database with the schema; dropped afterwards."""
    with scratch_postgres("waypost_test", request.getfixturevalue("postgres_template")) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite file for each test."""
    return f"sqlite:///{tmp_path / 'waypost.db'}"


@pytest.fixture(params=STORES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of each kind: the test runs once per store."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'waypost.db'}"
    url: str = request.getfixturevalue("fresh_postgres")
    return url


@pytest.fixture
def make_engine(db_url: str) -> Iterator[Any]:
    """Build engines on the test's database with test-friendly timings; closes them after."""
    engines: list[wp.Engine] = []

    def make(*items: object, url: str | None = None, **options: Any) -> wp.Engine:
        options.setdefault("lease", 2.0)
        options.setdefault("poll_interval", 0.05)
        options.setdefault("shutdown_grace", 5.0)
        engine = wp.Engine(url or db_url, **options)
        engine.register(*items)
        engines.append(engine)
        return engine

    yield make
    for engine in reversed(engines):
        engine.close()
