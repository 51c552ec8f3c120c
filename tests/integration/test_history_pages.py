"""A run's history is read a page at a time, bounded in events and in bytes: through the
embedded API, `GET /v1/runs/{id}/history` (`after_seq`, `limit`, `next_after`), the Python
client and `waypost runs history` (both stores). The server never answers a whole large
history at once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.integration.server_fixtures import Api, make_key, serve  # noqa: F401
from waypost.model.operations_runs import (
    DEFAULT_HISTORY_PAGE,
    HISTORY_PAGE_BYTES,
    MAX_HISTORY_PAGE,
)
from waypost.store import open_store

pytestmark = pytest.mark.timeout(180)

WAYPOST = Path(sys.executable).with_name("waypost")
ROOMY = {"acme": wp.Limits(max_pending_signals=5_000)}  # signals pile up: nobody serves them


@wp.workflow(name="hp_sink")
async def hp_sink(ctx: wp.WorkflowContext, _: Any = None) -> None:
    await ctx.wait_signal("never")


@pytest.fixture
def engine(make_engine: Any) -> Any:
    return make_engine(hp_sink, limits=ROOMY)


@pytest.fixture
def key(engine: Any) -> str:
    """An API key of a viewer in tenant acme."""
    return make_key(engine, "acme", "vic", "viewer")


def _signalled(engine: wp.Engine, n: int, payload: Any = None, tenant: str = "acme") -> str:
    """A run (not served: its signals pile up) with `n` signals after its RunStarted."""
    run = engine.start(hp_sink, tenant=tenant)
    for i in range(n):
        engine.signal(run.run_id, "item", payload if payload is not None else i, tenant=tenant)
    return run.run_id


def test_pages_follow_each_other_to_the_end_of_the_history(engine: Any) -> None:
    run_id = _signalled(engine, 30)
    whole = engine.history(run_id, tenant="acme")
    assert len(whole) == 31
    seen: list[int] = []
    after: int | None = 0
    while after is not None:
        page = engine.history_page(run_id, after_seq=after, limit=7, tenant="acme")
        assert 1 <= len(page.events) <= 7
        seen += [e.seq for e in page.events]
        after = page.next_after
        if after is not None:
            assert after == page.events[-1].seq
    assert seen == [e.seq for e in whole]
    last = engine.history_page(run_id, after_seq=31, tenant="acme")
    assert (last.events, last.next_after) == ([], None)
    exact = engine.history_page(run_id, after_seq=24, limit=7, tenant="acme")
    assert [e.seq for e in exact.events] == list(range(25, 32)) and exact.next_after is None
    assert engine.history_page(run_id, tenant="acme").events == whole  # the default page


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": MAX_HISTORY_PAGE + 1}, "limit"),
        ({"limit": True}, "limit"),
        ({"after_seq": -1}, "after_seq"),
        ({"after_seq": 2**40}, "after_seq"),
        ({"after_seq": "3"}, "after_seq"),
    ],
)
def test_a_page_out_of_bounds_is_refused(engine: Any, fields: Any, field: str) -> None:
    run_id = _signalled(engine, 1)
    with pytest.raises(wp.InvalidRequest) as refused:
        engine.history_page(run_id, **fields, tenant="acme")
    assert refused.value.field == field


def test_another_tenants_history_is_not_found(engine: Any) -> None:
    run_id = _signalled(engine, 2)
    with pytest.raises(wp.RunNotFound):
        engine.history_page(run_id, tenant="globex")
    with pytest.raises(wp.RunNotFound):
        engine.history_page("no-such-run", tenant="acme")


def test_a_page_stops_before_its_bytes_pass_the_bound_and_holds_one_event_at_least(
    engine: Any, db_url: str
) -> None:
    big = "z" * 900_000
    run_id = _signalled(engine, 10, payload=big)  # about 9 MB of history
    page = engine.history_page(run_id, limit=MAX_HISTORY_PAGE, tenant="acme")
    size = sum(len(e.data_json.encode()) for e in page.events)
    assert size <= HISTORY_PAGE_BYTES and len(page.events) == 5  # RunStarted and 4 signals
    assert page.next_after == page.events[-1].seq
    # The store's bound, lower than any event: a page still holds one.
    store = open_store(db_url)

    async def pages() -> list[tuple[list[int], bool]]:
        await store.open()
        try:
            out = []
            for after in (0, 1, 10):
                found, events, more = await store.history_page("acme", run_id, after, 50, 10)
                assert found
                out.append(([e.seq for e in events], more))
            return out
        finally:
            await store.close()

    assert asyncio.run(pages()) == [([1], True), ([2], True), ([11], False)]


def test_the_http_history_is_paged_and_never_whole(
    engine: Any,
    key: str,
    serve: Any,  # noqa: F811
) -> None:
    small = _signalled(engine, 3)
    long = _signalled(engine, DEFAULT_HISTORY_PAGE + 20)
    huge = _signalled(engine, 10, payload="z" * 900_000)
    with Api(serve(engine), key) as api:
        # A small history: the call without parameters answers it whole, as before.
        answer = api.get(f"/v1/runs/{small}/history").json()
        assert [e["seq"] for e in answer["events"]] == [1, 2, 3, 4]
        assert answer["next_after"] is None
        # A long one: the default page, then the rest.
        first = api.get(f"/v1/runs/{long}/history").json()
        assert len(first["events"]) == DEFAULT_HISTORY_PAGE
        assert first["next_after"] == DEFAULT_HISTORY_PAGE
        rest = api.get(
            f"/v1/runs/{long}/history", params={"after_seq": first["next_after"], "limit": 1000}
        ).json()
        assert [e["seq"] for e in rest["events"]] == list(range(501, 522))
        assert rest["next_after"] is None
        # A huge one: a page of a few MB, whatever the limit asked.
        response = api.get(f"/v1/runs/{huge}/history", params={"limit": 1000})
        assert response.status_code == 200
        assert len(response.content) < HISTORY_PAGE_BYTES + 100_000
        assert response.json()["next_after"] is not None
        for params, field in (
            ({"limit": 0}, "limit"),
            ({"limit": 5000}, "limit"),
            ({"after_seq": -1}, "after_seq"),
        ):
            refused = api.get(f"/v1/runs/{long}/history", params=params)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["details"]["field"] == field
        assert api.get(f"/v1/runs/{long}/history", params={"limit": "x"}).status_code == 422


def test_the_python_client_reads_a_long_history_page_by_page(
    engine: Any,
    key: str,
    serve: Any,  # noqa: F811
) -> None:
    run_id = _signalled(engine, MAX_HISTORY_PAGE + 5)
    with wp.Client(serve(engine), key) as client:

        def facts(events: list[Any]) -> list[tuple[Any, ...]]:
            return [(e.seq, e.type, e.data, e.hash) for e in events]

        assert facts(client.history(run_id)) == facts(engine.history(run_id, tenant="acme"))
        page = client.history_page(run_id, after_seq=10, limit=3)
        assert [e.seq for e in page.events] == [11, 12, 13] and page.next_after == 13
        with pytest.raises(wp.RunNotFound):
            client.history_page("nope")


def test_the_command_line_prints_a_history_page_by_page(engine: Any, db_url: str) -> None:
    run_id = _signalled(engine, MAX_HISTORY_PAGE + 10)
    engine.close()
    env = {k: v for k, v in os.environ.items() if k not in ("WAYPOST_DB", "WAYPOST_DEBUG")}

    def history(*args: str) -> list[dict[str, Any]]:
        done = subprocess.run(
            [str(WAYPOST), "runs", "history", run_id, "--tenant", "acme", "--db", db_url, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    everything = history()
    assert [e["seq"] for e in everything] == list(range(1, MAX_HISTORY_PAGE + 12))
    assert [e["seq"] for e in history("--after", "995", "--limit", "10")] == list(range(996, 1006))
    assert history("--after", str(MAX_HISTORY_PAGE + 11)) == []
