"""Fixtures several integration modules share."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.mail import Mailbox
from waypost.store import open_store
from waypost.store.base import Store


@pytest.fixture
def label() -> str:
    """A name no other test uses: for the gates, records and runs of this test."""
    return uuid.uuid4().hex[:12]


@pytest.fixture
def mailbox(tmp_path: Path) -> Mailbox:
    """The notifications file of the test's `file` sender."""
    return Mailbox(tmp_path / "notifications.jsonl")


# == the store suite: an open store of each kind on a fresh database ==========

STORES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("sqlite-inline", id="sqlite-inline"),
    pytest.param("sqlite-thread", id="sqlite-thread"),
    pytest.param("postgres", id="postgres"),
]


def _fresh_database_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite-thread":  # every write through the writer thread
        return f"sqlite:///{tmp_path / 'store.db'}?commits=thread"
    if kind.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'store.db'}"
    if kind == "postgres":
        url: str = request.getfixturevalue("fresh_postgres")
        return url
    raise AssertionError(f"no database for store kind {kind!r}")


def _prepare(kind: str, store: Store) -> Store:
    if kind == "sqlite-inline":
        # As under an engine at low load: a commit with nothing to group with
        # runs on the caller's thread instead of the writer thread.
        store.inline_probe = lambda: True  # type: ignore[attr-defined]
    return store


@pytest.fixture
def aio() -> Iterator[asyncio.Runner]:
    """One event loop for the whole test (a store may bind connections to its loop)."""
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path, aio: asyncio.Runner) -> Iterator[Store]:
    """An open store on a fresh, empty database."""
    kind: str = request.param
    s = _prepare(kind, open_store(_fresh_database_url(kind, request, tmp_path)))
    aio.run(s.open())
    yield s
    aio.run(s.close())


@pytest.fixture
def other_store(
    request: pytest.FixtureRequest, store: Store, aio: asyncio.Runner
) -> Iterator[Store]:
    """A second, independent store on the same database (another process, in effect)."""
    kind = request.node.callspec.params["store"]
    s = _prepare(kind, open_store(store.url))
    aio.run(s.open())
    yield s
    aio.run(s.close())
