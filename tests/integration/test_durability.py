"""Durable by default: the connections that write run in WAL with synchronous=FULL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from waypost.store.sqlite import SqliteStore


@pytest.mark.parametrize(
    ("query", "synchronous"),
    [("", 2), ("?synchronous=full", 2), ("?synchronous=normal", 1)],
    ids=["default", "full", "normal"],
)
def test_write_connections_use_wal_and_the_chosen_sync_mode(
    tmp_path: Path, query: str, synchronous: int
) -> None:
    async def check() -> None:
        store = SqliteStore(f"sqlite:///{tmp_path / 'd.db'}{query}")
        await store.open()
        try:
            writer = store._writer
            assert writer is not None
            for conn in (writer.conn, writer.inline_conn):
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
                assert conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous
        finally:
            await store.close()

    asyncio.run(check())
