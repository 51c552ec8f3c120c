"""Reads of many runs are bounded in bytes, on both stores: a page of runs (`page_runs`,
`GET /v1/runs`, `list_runs`), a search and a batch migration stop before their runs'
stored payloads pass `RUN_PAGE_BYTES` (one run at least, whatever its size), a cursor
continues after the last run a page holds, and the runs a page leaves out are never
brought out of the database (what the store's statements fetched is watched)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query
from tests.helpers.definitions import waits_then_succeeds
from tests.integration.server_fixtures import Api, make_key, serve  # noqa: F401
from waypost.model.operations_runs import RUN_PAGE_BYTES
from waypost.store import open_store
from waypost.store.tx import Row, Tx

pytestmark = pytest.mark.timeout(240)

NEAR_LIMIT = "x" * 990_000  # an input near the default payload limit (1,000,000 bytes)
PER_PAGE = RUN_PAGE_BYTES // 990_020  # such runs a page holds: 8


@wp.workflow(name="rp_hold")
async def rp_hold(ctx: wp.WorkflowContext, _: Any = None) -> None:
    await ctx.wait_signal("never")


class Fetched:
    """The runs whose payloads the store's statements brought into the process, by
    statement: every row with an `input` column that `Tx.one` or `Tx.all` returned."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.statements: list[tuple[str, list[tuple[str, str, int]]]] = []

    def took(self, name: str, rows: list[Row]) -> None:
        runs = [
            (row["tenant"], row["run_id"], _stored_size(row))
            for row in rows
            if "input" in row.keys()  # noqa: SIM118 (sqlite3.Row has no __contains__ by name)
        ]
        if runs:
            with self._lock:
                self.statements.append((name, runs))

    def clear(self) -> None:
        with self._lock:
            self.statements.clear()

    def run_ids(self) -> list[str]:
        """Every run fetched since the last `clear`, as often as it was fetched (sorted)."""
        with self._lock:
            return sorted(run_id for _, runs in self.statements for _, run_id, _ in runs)

    def most_in_one_statement(self) -> int:
        """The most bytes of payloads one statement fetched since the last `clear`."""
        with self._lock:
            return max((sum(s for *_, s in runs) for _, runs in self.statements), default=0)


def _stored_size(row: Row) -> int:
    return sum(len((row[c] or "").encode()) for c in ("input", "result", "error"))


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> Fetched:
    """Watch the rows every store transaction fetches (both dialects go through `Tx`)."""
    seen = Fetched()
    real_one, real_all = Tx.one, Tx.all

    def one(self: Tx, name: str, params: dict[str, Any]) -> Row | None:
        row = real_one(self, name, params)
        seen.took(name, [row] if row is not None else [])
        return row

    def all_(self: Tx, name: str, params: dict[str, Any]) -> list[Row]:
        rows = real_all(self, name, params)
        seen.took(name, rows)
        return rows

    monkeypatch.setattr(Tx, "one", one)
    monkeypatch.setattr(Tx, "all", all_)
    return seen


def _sizes(db_url: str, tenant: str) -> dict[str, int]:
    """The stored bytes of each of the tenant's runs' payloads, read straight from SQL."""
    rows = db_query(
        db_url, "SELECT run_id, input, result, error FROM runs WHERE tenant = ?", (tenant,)
    )
    return {r[0]: sum(len((v or "").encode()) for v in r[1:]) for r in rows}


def _start(engine: wp.Engine, n: int, tenant: str = "acme", blob: str = NEAR_LIMIT) -> list[str]:
    return [
        engine.start_run("rp_hold", {"blob": blob, "i": i}, tenant=tenant).run_id for i in range(n)
    ]


def _walk(engine: wp.Engine, fetched: Fetched, tenant: str = "acme") -> list[list[str]]:
    """Every page of the tenant's runs (asked 1,000 at a time), each checked as it comes:
    what the store fetched for it is the page's runs, each once."""
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        fetched.clear()
        page = engine.page_runs(tenant=tenant, cursor=cursor, limit=1000)
        ids = [r.run_id for r in page.runs]
        assert ids, "a page holds one run at least"
        assert fetched.run_ids() == sorted(ids)  # nothing left out was read; nothing read twice
        pages.append(ids)
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


# == pages of runs ========================================================================
def test_pages_of_runs_near_the_payload_limit_stay_in_the_bound_and_give_each_run_once(
    make_engine: Any, db_url: str, fetched: Fetched
) -> None:
    engine = make_engine(rp_hold)  # not serving: the runs stay as started
    big = _start(engine, 2 * PER_PAGE + 3)
    small = [engine.start_run("rp_hold", {"i": i}, tenant="acme").run_id for i in range(4)]
    theirs = _start(engine, 3, tenant="globex")
    sizes = _sizes(db_url, "acme")
    assert min(sizes[r] for r in big) > 990_000

    pages = _walk(engine, fetched)
    # Newest first: the small runs and the newest big ones, then big ones, then the rest.
    assert [len(p) for p in pages] == [4 + PER_PAGE, PER_PAGE, 3]
    for ids in pages:
        assert sum(sizes[r] for r in ids) <= RUN_PAGE_BYTES
    seen = [r for ids in pages for r in ids]
    assert len(seen) == len(set(seen)) == len(big) + len(small)
    assert set(seen) == set(big) | set(small) and not set(seen) & set(theirs)

    # The limit still counts: pages of 5 hold 5 (under the bound), and end where they end.
    walked: list[str] = []
    cursor: str | None = None
    while True:
        page = engine.page_runs(tenant="acme", cursor=cursor, limit=5)
        assert len(page.runs) <= 5
        walked += [r.run_id for r in page.runs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert walked == seen

    # ListRuns with a cursor gives the page PageRuns gives, bounded the same way.
    first = engine.page_runs(tenant="acme", limit=1000)
    listed = engine.list_runs(tenant="acme", cursor=first.next_cursor, limit=1000)
    assert [r.run_id for r in listed] == pages[1]


def test_a_run_over_the_bound_is_a_page_of_its_own(
    make_engine: Any, db_url: str, fetched: Fetched
) -> None:
    roomy = {"acme": wp.Limits(max_payload_bytes=RUN_PAGE_BYTES + 1_000_000)}
    engine = make_engine(rp_hold, limits=roomy)
    older = _start(engine, 3)
    huge = _start(engine, 1, blob="y" * (RUN_PAGE_BYTES + 10))
    newer = _start(engine, 3)
    assert _sizes(db_url, "acme")[huge[0]] > RUN_PAGE_BYTES

    pages = _walk(engine, fetched)
    assert pages == [newer[::-1], huge, older[::-1]]

    # The store's bound, below any run: every page still holds one, and the walk gives
    # each run once, newest first.
    store = open_store(db_url)

    async def store_pages() -> list[tuple[list[str], bool]]:
        await store.open()
        try:
            out, after = [], None
            while True:
                runs, more = await store.page_runs("acme", None, None, after, 50, 10)
                out.append(([r.run_id for r in runs], more))
                if not more:
                    return out
                after = (runs[-1].created_at, runs[-1].run_id)
        finally:
            await store.close()

    one_each = asyncio.run(store_pages())
    assert [ids for ids, _ in one_each] == [[r] for r in newer[::-1] + huge + older[::-1]]
    assert [more for _, more in one_each] == [True] * 6 + [False]


def test_a_run_left_out_of_a_page_is_not_read_and_is_checked_when_its_page_comes(
    make_engine: Any, db_url: str, fetched: Fetched
) -> None:
    engine = make_engine(rp_hold)
    ids = _start(engine, PER_PAGE + 2)
    first = engine.page_runs(tenant="acme", limit=1000)
    assert len(first.runs) == PER_PAGE
    # The first run of the next page edited in the database (same size, other bytes):
    # the first page never reads it, so it still answers; the next page refuses it.
    edited = ids[1]
    assert first.runs[-1].run_id == ids[2]
    statement = "UPDATE runs SET input = replace(input, 'x', 'z') WHERE tenant = ? AND run_id = ?"
    if db_url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        with conn:
            conn.execute(statement, ("acme", edited))
        conn.close()
    else:
        from tests.helpers import pg_connect

        with pg_connect(db_url, autocommit=True) as pg:
            pg.execute(statement.replace("?", "%s"), ("acme", edited))
    again = engine.page_runs(tenant="acme", limit=1000)
    assert [r.run_id for r in again.runs] == [r.run_id for r in first.runs]
    with pytest.raises(wp.BrokenRecord):
        engine.page_runs(tenant="acme", cursor=again.next_cursor, limit=1000)


def test_the_http_list_of_runs_is_bounded_and_its_cursors_give_each_run_once(
    make_engine: Any,
    fetched: Fetched,
    serve: Any,  # noqa: F811
) -> None:
    engine = make_engine(rp_hold)
    key = make_key(engine, "acme", "vic", "viewer")
    ids = _start(engine, PER_PAGE + 3)
    seen: list[str] = []
    with Api(serve(engine), key) as api:
        params: dict[str, Any] = {"limit": 1000}
        while True:
            fetched.clear()
            response = api.get("/v1/runs", params=params)
            assert response.status_code == 200, response.text
            assert len(response.content) < RUN_PAGE_BYTES + 100_000
            answer = response.json()
            page = [r["run_id"] for r in answer["runs"]]
            assert page and fetched.run_ids() == sorted(page)
            seen += page
            if answer["next_cursor"] is None:
                break
            params = {"limit": 1000, "cursor": answer["next_cursor"]}
    assert seen == ids[::-1]


# == other reads of many runs ================================================================
def test_a_search_answers_no_more_than_the_bound_and_reads_nothing_else(
    make_engine: Any, db_url: str, fetched: Fetched
) -> None:
    engine = make_engine(rp_hold)
    ids = [
        engine.start_run("rp_hold", {"blob": NEAR_LIMIT}, run_id=f"big-{i}", tenant="acme").run_id
        for i in range(PER_PAGE + 3)
    ]
    fetched.clear()
    found = engine.search_runs("big-", limit=50, tenant="acme")
    assert [r.run_id for r in found] == ids[::-1][:PER_PAGE]  # the newest that fit
    assert fetched.run_ids() == sorted(r.run_id for r in found)
    sizes = _sizes(db_url, "acme")
    assert sum(sizes[r.run_id] for r in found) <= RUN_PAGE_BYTES
    # A search by a whole id still finds that run, whatever the others weigh.
    assert [r.run_id for r in engine.search_runs(ids[0], tenant="acme")] == [ids[0]]


def test_every_tenants_list_is_bounded_too(make_engine: Any, db_url: str, fetched: Fetched) -> None:
    engine = make_engine(rp_hold)
    mine = _start(engine, PER_PAGE // 2 + 1)
    theirs = _start(engine, PER_PAGE // 2 + 1, tenant="globex")
    fetched.clear()
    listed = engine.list_runs(tenant=None, limit=1000)
    assert [r.run_id for r in listed] == (mine + theirs)[::-1][:PER_PAGE]
    assert fetched.run_ids() == sorted(r.run_id for r in listed)
    sizes = {**_sizes(db_url, "acme"), **_sizes(db_url, "globex")}
    assert sum(sizes[r.run_id] for r in listed) <= RUN_PAGE_BYTES


HOLDER = """
name: holder
input:
  type: object
  properties:
    blob: {type: string}
start: hold
steps:
""" + waits_then_succeeds(("hold", "go"))


def test_a_batch_migration_reads_the_runs_a_page_at_a_time(
    make_engine: Any, fetched: Fetched
) -> None:
    engine = make_engine()
    engine.publish(HOLDER)
    ids = [engine.start("holder", {"blob": NEAR_LIMIT}).run_id for _ in range(PER_PAGE + 3)]
    engine.publish(HOLDER.replace("signal: go", "signal: went"))
    fetched.clear()
    reports = engine.migrate_all("holder", 1, 2, reason="check", dry_run=True)
    assert sorted(r.run_id for r in reports) == sorted(ids)  # each run once
    # No statement brought more than a page's bound of runs into the process.
    assert 990_000 < fetched.most_in_one_statement() <= RUN_PAGE_BYTES
