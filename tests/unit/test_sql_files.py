"""The SQL is written once: the shared query file, and dialect files holding what differs.

`sql/queries.sql` is read by every dialect, its `:name` parameters converted for
PostgreSQL; `sql/<dialect>/queries.sql` overrides it. An override identical to the
shared text is a copy that would drift, and the dialect files stay small. Parts
(`-- part: x`, put in where a query names `{x}`) are merged the same way.
"""

from __future__ import annotations

import pytest

from waypost.store.sqlfile import load_queries, pyformat, read_queries, read_sections, with_parts

DIALECTS = ("sqlite", "postgres")
# The queries a dialect writes itself (its own and its overrides), at most.
MOST_OWN = 40


def _normal(sql: str) -> str:
    return " ".join(sql.split())


def _shared(dialect: str, kind: str = "name") -> dict[str, str]:
    """The shared queries (or parts) in `dialect`'s parameters."""
    convert = pyformat if dialect == "postgres" else str
    return {name: convert(sql) for name, sql in read_sections("queries.sql")[kind].items()}


@pytest.mark.parametrize(
    ("sql", "converted"),
    [
        (
            "SELECT 1 FROM runs WHERE tenant = :tenant",
            "SELECT 1 FROM runs WHERE tenant = %(tenant)s",
        ),
        ("(:a, :b_2,:c)", "(%(a)s, %(b_2)s,%(c)s)"),
        # a cast is not a parameter, and a parameter may be cast
        ("x::jsonb -> 'k'", "x::jsonb -> 'k'"),
        (":since::double precision", "%(since)s::double precision"),
        ("CAST(:n AS BIGINT)", "CAST(%(n)s AS BIGINT)"),
        # string literals, quoted identifiers and comments are kept as written
        ("WHERE at = '12:30' AND t = :t", "WHERE at = '12:30' AND t = %(t)s"),
        ("'it''s :x' || :y", "'it''s :x' || %(y)s"),
        ('SELECT 1 AS "a:b"', 'SELECT 1 AS "a:b"'),
        ("-- at most :limit rows\nLIMIT :limit", "-- at most :limit rows\nLIMIT %(limit)s"),
        ("/* :x\n:y */ :z", "/* :x\n:y */ %(z)s"),
        ("'-- :x' :y", "'-- :x' %(y)s"),
        # psycopg reads every % as a parameter's start: a literal one is doubled anywhere
        ("name LIKE 'a%' AND n % 2 = :r", "name LIKE 'a%%' AND n %% 2 = %(r)s"),
        ("-- 100% sure\nSELECT 1", "-- 100%% sure\nSELECT 1"),
    ],
)
def test_shared_parameters_become_psycopgs(sql: str, converted: str) -> None:
    assert pyformat(sql) == converted


@pytest.mark.parametrize("sql", ["SELECT 'open", 'SELECT "open', "SELECT 1 /* open"])
def test_a_quote_or_comment_left_open_is_refused(sql: str) -> None:
    with pytest.raises(ValueError, match="left open"):
        pyformat(sql)


def test_the_shared_file_is_written_with_colon_parameters() -> None:
    for name, sql in read_queries("queries.sql").items():
        assert "%(" not in sql, name


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_dialects_own_queries_replace_the_shared_ones(dialect: str) -> None:
    shared = _shared(dialect)
    own = read_queries(f"{dialect}/queries.sql")
    parts = _shared(dialect, "part") | read_sections(f"{dialect}/queries.sql")["part"]
    expected = {name: with_parts(sql, parts).rstrip() for name, sql in (shared | own).items()}
    assert load_queries(dialect) == expected


def test_parts_are_put_in_and_a_missing_one_is_refused() -> None:
    parts = {"size": "length({col})", "col": "input"}
    assert (
        with_parts("SELECT {size} AS n FROM runs", parts) == "SELECT length(input) AS n FROM runs"
    )
    with pytest.raises(ValueError, match="no part 'other'"):
        with_parts("SELECT {other}", parts)
    with pytest.raises(ValueError, match="part 'loop' holds itself"):
        with_parts("{loop}", {"loop": "x {loop}"})


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_part_is_put_in_somewhere(dialect: str) -> None:
    sections = [read_sections("queries.sql"), read_sections(f"{dialect}/queries.sql")]
    texts = [sql for found in sections for kind in found.values() for sql in kind.values()]
    for found in sections:
        for name in found["part"]:
            assert any("{" + name + "}" in sql for sql in texts), name


def test_both_dialects_have_the_same_queries() -> None:
    assert load_queries("sqlite").keys() == load_queries("postgres").keys()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_no_override_repeats_the_shared_text(dialect: str) -> None:
    shared = _shared(dialect)
    own = read_queries(f"{dialect}/queries.sql")
    copies = [
        name for name in own if name in shared and _normal(own[name]) == _normal(shared[name])
    ]
    assert not copies, f"{dialect}/queries.sql repeats the shared text of {copies}"


def test_the_dialects_write_few_queries_themselves() -> None:
    shared = read_queries("queries.sql").keys()
    own = {dialect: read_queries(f"{dialect}/queries.sql").keys() for dialect in DIALECTS}
    for dialect in DIALECTS:
        print(
            f"{dialect}/queries.sql: {len(own[dialect])} queries"
            f" ({len(own[dialect] & shared)} of them override shared ones)"
        )
    print(f"in both dialects' files: {len(own['sqlite'] & own['postgres'])}; shared: {len(shared)}")
    for dialect in DIALECTS:
        assert len(own[dialect]) <= MOST_OWN, (dialect, sorted(own[dialect]))
