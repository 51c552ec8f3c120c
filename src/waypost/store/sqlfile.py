"""SQL kept in files: named queries per dialect, numbered migrations."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def load_queries(dialect: str, file: str = "queries.sql") -> dict[str, str]:
    """The `-- name: x` sections of `sql/<dialect>/<file>`."""
    text = resources.files("waypost.store").joinpath(f"sql/{dialect}/{file}").read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice in {dialect}/{file}")
        queries[name] = body.strip().rstrip(";")
    return queries


def load_schema(dialect: str) -> str:
    return resources.files("waypost.store").joinpath(f"sql/{dialect}/schema.sql").read_text()


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(dialect: str) -> list[Migration]:
    folder = resources.files("waypost.store").joinpath(f"migrations/{dialect}")
    found = []
    for entry in folder.iterdir():
        m = _MIGRATION.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    found.sort(key=lambda mig: mig.version)
    for expected, mig in enumerate(found, start=1):
        if mig.version != expected:
            raise ValueError(f"{dialect} migrations are not numbered 1..n: missing {expected:04d}")
    return found
