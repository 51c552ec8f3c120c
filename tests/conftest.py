from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import waypost as wp


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh SQLite file for each test."""
    return f"sqlite:///{tmp_path / 'waypost.db'}"


@pytest.fixture
def make_engine(db_url: str) -> Iterator[object]:
    """Build engines on the test's database with test-friendly timings; closes them after."""
    engines: list[wp.Engine] = []

    def make(*items: object, url: str | None = None, **options: object) -> wp.Engine:
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
