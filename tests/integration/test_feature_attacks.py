"""Hostile input to schedules, named queues, queries and updates over HTTP, on both stores.

Each field these routes take is sent empty, huge, deeply nested, as bytes that are not
UTF-8, with control characters, as negative, zero or huge numbers, and as another
tenant's ids. Every request must be refused with a 4xx and a bounded message, write
nothing, and leave the engine serving the tenant and the others.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.refusals import assert_refused, rows_in

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(240)

MB = "x" * 1_000_000
NESTED = "[" * 10_000 + "]" * 10_000  # JSON text 10,000 levels deep
NESTED_OBJECT = '{"a":' * 10_000 + "1" + "}" * 10_000
STRINGS = ("", MB, "a\x00b", "a\nb", "\x1b[31m", "\ud800")
NUMBERS = (-1, 0, 2**63, 10**400, True, "1", float("nan"))
WHOLE = (1.5,)  # refused where a whole number is asked for


@wp.workflow(name="fa_cart")
async def cart(ctx: wp.WorkflowContext, _: Any) -> Any:
    items: list[str] = []

    def refuse(sku: Any) -> None:
        if not isinstance(sku, str) or not sku or len(sku) > 20:
            raise ValueError("a sku is a short string")

    def add(sku: str) -> int:
        items.append(sku)
        return len(items)

    ctx.set_query("items", lambda: list(items))
    ctx.set_update("add", add, validator=refuse)
    await ctx.wait_signal("done")
    return items


def _written(db_url: str) -> dict[str, int]:
    """How many rows the tables a command could write hold."""
    return rows_in(db_url, ("runs", "events", "tasks", "schedules", "queues"))


def _send(api: Api, method: str, path: str, body: Any) -> Any:
    if isinstance(body, bytes | str):
        raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    else:  # JSON text as a client may write it: lone surrogates, NaN, long integers
        raw = json.dumps(body).encode()
    return api.request(method, path, content=raw, headers={"Content-Type": "application/json"})


@pytest.fixture
def scene(make_engine: Any, serve: Any) -> Any:
    engine = make_engine(cart)
    base = serve(engine)
    key = make_key(engine, "acme", "olga", "operator", "admin", "starter", "viewer")
    other_key = make_key(engine, "globex", "gus", "operator", "admin", "starter", "viewer")
    with engine.running():
        mine = engine.start(cart, None, tenant="acme").run_id
        theirs = engine.start(cart, None, tenant="globex").run_id
        for tenant, run in (("acme", mine), ("globex", theirs)):
            eventually(
                lambda t=tenant, r=run: engine.get(r, tenant=t).status == wp.RunStatus.WAITING,
                "waiting",
            )
        engine.schedule(cart, id="nightly", cron="0 2 * * *", tenant="globex")
        engine.configure_queue("slow", concurrency=2, tenant="globex")
        with Api(base, key) as api, Api(base, other_key) as other:
            yield engine, api, other, mine, theirs


def _attacks(mine: str, theirs: str) -> list[tuple[str, str, str, Any]]:
    """(method, path, what, JSON body or raw bytes) of requests that must be refused."""
    make = "/v1/schedules"
    queue = "/v1/queues/fast"
    update = f"/v1/runs/{mine}/updates/add"
    query = f"/v1/runs/{mine}/queries/items"
    good = {"id": "s1", "workflow": "fa_cart", "every": 3600}
    cases: list[tuple[str, str, str, Any]] = []
    for value in STRINGS:
        short = repr(value[:8])
        cases += [
            ("POST", make, f"schedule id {short}", {**good, "id": value}),
            ("POST", make, f"schedule workflow {short}", {**good, "workflow": value}),
            ("POST", make, f"schedule cron {short}", {**good, "every": None, "cron": value}),
            (
                "POST",
                make,
                f"schedule tz {short}",
                {**good, "every": None, "cron": "0 * * * *", "tz": value},
            ),
            ("POST", make, f"schedule overlap {short}", {**good, "overlap": value}),
            ("POST", make, f"schedule catchup {short}", {**good, "catchup": value}),
            ("POST", make, f"schedule version {short}", {**good, "version": value}),
            (
                "POST",
                f"{make}/nightly/backfill",
                f"backfill start {short}",
                {"start": value, "end": "2026-01-01T00:00:00Z"},
            ),
            ("POST", update, f"update id {short}", {"args": ["a"], "update_id": value}),
        ]
    for n in NUMBERS:
        cases += [
            ("POST", make, f"schedule every {n!r}", {**good, "every": n}),
            ("PUT", queue, f"queue concurrency {n!r}", {"concurrency": n}),
            ("PUT", queue, f"queue key_concurrency {n!r}", {"key_concurrency": n}),
            ("PUT", queue, f"queue rate [{n!r}, 1]", {"rate": [n, 1]}),
            ("PUT", queue, f"queue rate [1, {n!r}]", {"rate": [1, n]}),
        ]
        if n != 0:  # no catch-up window is a choice; a longer wait than allowed is capped
            cases.append(
                ("POST", make, f"schedule catchup_window {n!r}", {**good, "catchup_window": n})
            )
        if n not in (2**63, 10**400):
            cases.append(("POST", update, f"update timeout {n!r}", {"args": ["a"], "timeout": n}))
    for n in WHOLE:
        cases += [
            ("PUT", queue, f"queue concurrency {n!r}", {"concurrency": n}),
            ("PUT", queue, f"queue key_concurrency {n!r}", {"key_concurrency": n}),
            ("PUT", queue, f"queue rate [{n!r}, 1]", {"rate": [n, 1]}),
        ]
    cases += [
        ("POST", make, "schedule input 1 MB", {**good, "input": MB}),
        (
            "POST",
            make,
            "schedule input nested",
            f'{{"id": "s2", "workflow": "fa_cart", "every": 60, "input": {NESTED}}}',
        ),
        ("POST", make, "schedule both cron and every", {**good, "cron": "0 * * * *"}),
        ("POST", make, "schedule neither cron nor every", {**good, "every": None}),
        ("POST", make, "schedule of an unknown workflow", {**good, "workflow": "no-such"}),
        ("POST", make, "schedule cron never fires", {**good, "every": None, "cron": "0 0 30 2 *"}),
        (
            "POST",
            f"{make}/nightly/backfill",
            "another tenant's schedule: backfill",
            {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"},
        ),
        ("POST", f"{make}/nightly/pause", "another tenant's schedule: pause", {}),
        ("POST", f"{make}/nightly/resume", "another tenant's schedule: resume", {}),
        ("DELETE", f"{make}/nightly", "another tenant's schedule: delete", None),
        ("GET", f"{make}/nightly", "another tenant's schedule: read", None),
        ("GET", "/v1/queues/slow", "another tenant's queue: read", None),
        ("PUT", queue, "queue rate not a pair", {"rate": [1, 2, 3]}),
        ("PUT", queue, "queue rate nested", f'{{"rate": {NESTED}}}'),
        ("PUT", queue, "queue unknown field", {"concurrency": 1, "nope": 1}),
        ("PUT", "/v1/queues/" + "q" * 5_000, "queue name 5,000 long", {"concurrency": 1}),
        ("PUT", "/v1/queues/a%00b", "queue name with NUL", {"concurrency": 1}),
        ("POST", update, "update args 1 MB", {"args": [MB]}),
        ("POST", update, "update args nested", f'{{"args": {NESTED}}}'),
        ("POST", update, "update args nested object", f'{{"args": [{NESTED_OBJECT}]}}'),
        ("POST", update, "update rejected by its validator", {"args": [""]}),
        ("POST", f"/v1/runs/{mine}/updates/nope", "update without a handler", {"args": []}),
        ("POST", f"/v1/runs/{theirs}/updates/add", "another tenant's run: update", {"args": ["a"]}),
        ("POST", f"/v1/runs/{theirs}/queries/items", "another tenant's run: query", {}),
        ("POST", query, "query args nested", f'{{"args": {NESTED}}}'),
        ("POST", f"/v1/runs/{mine}/queries/nope", "query without a handler", {}),
        ("POST", "/v1/runs/" + "r" * 5_000 + "/queries/items", "run id 5,000 long", {}),
    ]
    for method, path in (("POST", make), ("PUT", queue), ("POST", update), ("POST", query)):
        cases += [
            (method, path, "not UTF-8", b'{"id": "\xff\xfe\xc3\x28", "args": ["\xc0\xaf"]}'),
            (method, path, "a bare nested array", NESTED),
            (method, path, "object nested 10,000 deep", f'{{"args": {NESTED_OBJECT}}}'),
            (method, path, "not JSON", b"id=1"),
            (method, path, "a JSON string", b'"id"'),
        ]
    return cases


def test_hostile_inputs_to_schedules_queues_and_updates_are_refused_and_write_nothing(
    scene: Any, db_url: str
) -> None:
    engine, api, other, mine, theirs = scene
    before = _written(db_url)
    histories = {
        r: len(engine.history(r, tenant=t)) for t, r in (("acme", mine), ("globex", theirs))
    }
    problems = []
    for method, path, what, body in _attacks(mine, theirs):
        try:
            answer = api.request(method, path) if body is None else _send(api, method, path, body)
            assert_refused(answer, what)
        except (AssertionError, httpx.HTTPError) as exc:
            problems.append(f"{what}: {str(exc)[:300]}")
    assert problems == [], "\n".join(problems)
    assert _written(db_url) == before
    assert {
        r: len(engine.history(r, tenant=t)) for t, r in (("acme", mine), ("globex", theirs))
    } == histories
    # The other tenant's schedule and queue are as they were.
    assert other.get("/v1/schedules/nightly").json()["paused"] is False
    assert other.get("/v1/queues/slow").json()["concurrency"] == 2
    # The routes serve well-formed requests: the refusals were the inputs'.
    answer = api.post(f"/v1/runs/{mine}/updates/add", json={"args": ["book"], "update_id": "u1"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"] == 1
    assert api.post(f"/v1/runs/{mine}/queries/items", json={}).json()["result"] == ["book"]
    answer = api.post("/v1/schedules", json={"id": "s1", "workflow": "fa_cart", "every": 3600})
    assert answer.status_code == 201, answer.text
    answer = api.put("/v1/queues/fast", json={"concurrency": 3, "rate": [10, 1]})
    assert answer.status_code == 200, answer.text


def test_concurrent_duplicate_updates_and_schedules_make_one_each(scene: Any) -> None:
    engine, api, other, mine, theirs = scene

    def add(_: int) -> Any:
        return api.post(f"/v1/runs/{mine}/updates/add", json={"args": ["pen"], "update_id": "same"})

    def make(_: int) -> Any:
        return api.post("/v1/schedules", json={"id": "twice", "workflow": "fa_cart", "every": 3600})

    with ThreadPoolExecutor(8) as pool:
        updates = list(pool.map(add, range(8)))
        schedules = list(pool.map(make, range(8)))
    assert {a.status_code for a in updates} == {200}, [a.text for a in updates]
    assert {a.json()["result"] for a in updates} == {1}
    assert engine.query(mine, "items", tenant="acme") == ["pen"]
    made = [a for a in schedules if a.status_code == 201]
    assert len(made) == 1, [(a.status_code, a.text[:200]) for a in schedules]
    for answer in schedules:
        if answer.status_code != 201:
            assert_refused(answer, "a second schedule with the same id")
            assert answer.status_code == 409, answer.text
    ids = [s["schedule_id"] for s in api.get("/v1/schedules").json()["schedules"]]
    assert ids.count("twice") == 1
    # The other tenant may use the same ids: they are per tenant.
    answer = other.post("/v1/schedules", json={"id": "twice", "workflow": "fa_cart", "every": 60})
    assert answer.status_code == 201, answer.text
