"""docs/schema/<dialect>.sql is the schema the migrations give: written by
scripts/schema, checked here against a database the store migrated today."""

from __future__ import annotations

import asyncio
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

from waypost.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    path = ROOT / "scripts" / "schema"
    loader = SourceFileLoader("waypost_schema_script", str(path))
    module = ModuleType(loader.name)
    module.__file__ = str(path)
    loader.exec_module(module)
    return module


def _documented(dialect: str) -> str:
    return (ROOT / "docs" / "schema" / f"{dialect}.sql").read_text()


def test_the_sqlite_schema_document_is_what_the_migrations_give(tmp_path: Path) -> None:
    path = tmp_path / "migrated.db"
    store = SqliteStore(f"sqlite:///{path}")
    asyncio.run(store.open())
    asyncio.run(store.close())
    schema = _script().sqlite_schema_of(path)
    assert "CREATE TABLE runs" in schema and "CREATE INDEX" in schema
    assert schema == _documented("sqlite"), "run scripts/schema and commit docs/schema"


def test_the_postgres_schema_document_is_what_the_migrations_give(fresh_postgres: str) -> None:
    schema = _script().postgres_schema_of(fresh_postgres)  # the template applies every migration
    assert "CREATE TABLE runs" in schema and "CREATE INDEX" in schema
    assert schema == _documented("postgres"), "run scripts/schema and commit docs/schema"
