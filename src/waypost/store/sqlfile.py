"""SQL kept in files: named queries, written once for every dialect; numbered migrations.

`sql/queries.sql` holds the queries that every dialect runs as written: SQL that both
SQLite and PostgreSQL accept, with `:name` parameters. `sql/<dialect>/queries.sql`
holds the dialect's queries that differ (JSON functions, byte lengths, `min` or `LEAST`,
row locks, index hints, the clock), in the dialect's own parameter style. A query that a
dialect's file names and the shared file also has is that dialect's override: it
replaces the shared text for that dialect only.

A piece of SQL that many queries hold is written once as a part (a section headed
`-- part: <name>`) and named in a query, or in another part, as `{name}`. A part is
written where its text is the same for every dialect (the shared file) or in each
dialect's file where it differs (the size of a run's payloads, a row lock): a query
of the shared file can so hold what differs by dialect. Parts are put in as a
dialect's queries are loaded; a `{name}` that names no part is refused then.

For PostgreSQL the shared file's parameters become psycopg's `%(name)s` as it is
read. Only code is converted: string literals, quoted identifiers, comments and `::`
casts are kept as written, and a `%` anywhere is doubled, since psycopg reads every
`%` of a statement as the start of a parameter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources

_SECTION = re.compile(r"^--\s*(name|part):\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_PART = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
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


def read_sections(path: str) -> dict[str, dict[str, str]]:
    """The sections of the file `sql/<path>`, as written: its queries (`-- name: x`) under
    "name", its parts (`-- part: x`) under "part"."""
    text = resources.files("waypost.store").joinpath(f"sql/{path}").read_text()
    parts = _SECTION.split(text)
    sections: dict[str, dict[str, str]] = {"name": {}, "part": {}}
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in sections[kind]:
            raise ValueError(f"{kind} {name!r} is defined twice in {path}")
        lines = body.strip().splitlines()
        # A section's heading (a comment before the next section) is no part of this one.
        while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
            lines.pop()
        # A part's comment says what it is; what it puts in a query is its SQL alone.
        while kind == "part" and lines and lines[0].lstrip().startswith("--"):
            lines.pop(0)
        sections[kind][name] = "\n".join(lines).rstrip(";")
    return sections


def read_queries(path: str) -> dict[str, str]:
    """The `-- name: x` sections of the file `sql/<path>`, as written."""
    return read_sections(path)["name"]


def with_parts(sql: str, parts: Mapping[str, str], within: tuple[str, ...] = ()) -> str:
    """`sql` with each `{name}` replaced by the part `name` (with its own parts in)."""

    def put(m: re.Match[str]) -> str:
        name = m.group(1)
        if name in within:
            raise ValueError(f"part {name!r} holds itself")
        if name not in parts:
            raise ValueError(f"no part {name!r} to put in {sql!r}")
        return with_parts(parts[name], parts, (*within, name))

    return _PART.sub(put, sql)


def load_queries(dialect: str, file: str = "queries.sql") -> dict[str, str]:
    """The named queries of `dialect`, their parts put in: for `queries.sql`, the shared
    ones in the dialect's parameters, with those of `sql/<dialect>/queries.sql` over them
    (parts likewise); any other file's (`steps.sql`) as written, with its own parts."""
    own = read_sections(f"{dialect}/{file}")
    if file != "queries.sql":
        return {name: with_parts(sql, own["part"]) for name, sql in own["name"].items()}
    parameters = _PARAMETERS[dialect]
    shared = read_sections("queries.sql")
    parts = {name: parameters(sql) for name, sql in shared["part"].items()} | own["part"]
    queries = {name: parameters(sql) for name, sql in shared["name"].items()} | own["name"]
    return {name: with_parts(sql, parts).rstrip() for name, sql in queries.items()}


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
