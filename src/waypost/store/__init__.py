"""Stores: where runs, events, tasks and timers live."""

from __future__ import annotations

from waypost.errors import ConfigurationError

from .base import Store
from .urls import redact_url

DEFAULT_URL = "sqlite:///waypost.db"


def open_store(url: str | None = None) -> Store:
    """The store for a database URL: `sqlite:///path.db` or `postgresql://...`."""
    url = url or DEFAULT_URL
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from .sqlite import SqliteStore

        return SqliteStore(url)
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresStore

        return PostgresStore(url)
    raise ConfigurationError(
        f"unsupported database URL {redact_url(url)!r}: use sqlite:///path/to/file.db "
        "or postgresql://user@host:port/database"
    )


__all__ = ["DEFAULT_URL", "Store", "open_store", "redact_url"]
