"""SQL kept in files: named queries, written once for every dialect; numbered migrations.

`sql/queries.sql` holds the queries that every dialect runs as written: SQL that both
SQLite and PostgreSQL accept, with `:name` parameters. `sql/<dialect>/queries.sql`
holds the dialect's queries that differ (JSON functions, byte lengths, `min` or `LEAST`,
row locks, index hints, the clock), in the dialect's own parameter style. A query that a
dialect's file names and the shared file also has is that dialect's override: it
replaces the shared text for that dialect only.

For PostgreSQL the shared file's parameters become psycopg's `%(name)s` as it is
read. Only code is converted: string literals, quoted identifiers, comments and `::`
casts are kept as written, and a `%` anywhere is doubled, since psycopg reads every
`%` of a statement as the start of a parameter.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# What `pyformat` tells apart: a string literal, a quoted identifier or a comment (kept),
# a `::` cast (kept), a `:name` parameter, a `%`; last, a quote or comment left open.
_TOKEN = re.compile(
    r"'(?:[^']|'')*'"
    r'|"(?:[^"]|"")*"'
    r"|--[^\n]*|/\*.*?\*/"
    r"|::|:([A-Za-z_][A-Za-z0-9_]*)|%"
    r"|('|\"|/\*)",
    re.DOTALL,
)


def pyformat(sql: str) -> str:
    """`sql` with its `:name` parameters written as psycopg's `%(name)s`."""

    def convert(m: re.Match[str]) -> str:
        if m.group(2) is not None:
            raise ValueError(f"{m.group(2)} left open at offset {m.start()} of {sql!r}")
        if m.group(1) is not None:
            return f"%({m.group(1)})s"
        return m.group(0).replace("%", "%%")

    return _TOKEN.sub(convert, sql)


def _as_written(sql: str) -> str:
    return sql


# How each dialect writes the shared file's `:name` parameters.
_PARAMETERS: dict[str, Callable[[str], str]] = {"sqlite": _as_written, "postgres": pyformat}


def read_queries(path: str) -> dict[str, str]:
    """The `-- name: x` sections of the file `sql/<path>`, as written."""
    text = resources.files("waypost.store").joinpath(f"sql/{path}").read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice in {path}")
        lines = body.strip().splitlines()
        # A section's heading (a comment before the next query) is no part of this one.
        while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
            lines.pop()
        queries[name] = "\n".join(lines).rstrip(";")
    return queries


def load_queries(dialect: str, file: str = "queries.sql") -> dict[str, str]:
    """The named queries of `dialect`: for `queries.sql`, the shared ones in the dialect's
    parameters, with those of `sql/<dialect>/queries.sql` over them; any other file's
    (`steps.sql`) as written."""
    own = read_queries(f"{dialect}/{file}")
    if file != "queries.sql":
        return own
    parameters = _PARAMETERS[dialect]
    queries = {name: parameters(sql) for name, sql in read_queries("queries.sql").items()}
    queries.update(own)
    return queries


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
