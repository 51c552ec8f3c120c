"""Hostile input to the operator commands over HTTP, on both stores.

Each field a repair, fork, purge or re-encrypt request takes is sent empty, huge,
deeply nested, as bytes that are not UTF-8, with control characters, as negative,
zero or huge numbers, and as another tenant's ids. Every request must be refused with
a 4xx and a bounded message, write nothing, and leave the engine serving others.
"""

from __future__ import annotations

import json
import secrets
import threading
import uuid
from typing import Any

import httpx
import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.definitions import amount_hold
from tests.helpers.refusals import assert_refused, rows_in

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(180)

MB = "x" * 1_000_000
NESTED = "[" * 10_000 + "]" * 10_000  # JSON text 10,000 levels deep
NESTED_OBJECT = '{"a":' * 10_000 + "1" + "}" * 10_000
KEY = secrets.token_bytes(32)
_lock = threading.Lock()
broken: set[str] = set()


@wp.activity(retry=wp.Retry(max_attempts=1))
def at_fails(ctx: wp.ActivityContext, label: str) -> str:
    with _lock:
        fails = label in broken
    if fails:
        raise RuntimeError("downstream is down")
    return "ok"


@wp.workflow(name="at_failing")
async def failing(ctx: wp.WorkflowContext, label: str) -> str:
    return await ctx.run(at_fails, label)


@wp.workflow(name="at_waiter")
async def waiter(ctx: wp.WorkflowContext, _: Any) -> Any:
    return await ctx.wait_signal("go")


HOLD = amount_hold("at_hold")


def _written(db_url: str) -> dict[str, int]:
    """How many rows the tables a command could write hold."""
    return rows_in(db_url, ("runs", "events", "tasks", "purged_runs"))


@pytest.fixture
def scene(make_engine: Any, serve: Any) -> Any:
    label = uuid.uuid4().hex[:12]
    with _lock:
        broken.add(label)
    engine = make_engine(failing, waiter, at_fails, encryption=wp.Keys({"k1": KEY}))
    base = serve(engine)
    key = make_key(engine, "acme", "olga", "operator", "admin")
    other_key = make_key(engine, "globex", "gus", "operator", "admin")
    engine.publish(HOLD, tenant="acme")
    with engine.running():
        failed = engine.start(failing, label, tenant="acme")
        with pytest.raises(wp.WorkflowFailed):
            engine.result(failed.run_id, timeout=20, tenant="acme")
        held = engine.start("at_hold", {"amount": 5}, tenant="acme")
        theirs = engine.start(failing, label, tenant="globex")
        with pytest.raises(wp.WorkflowFailed):
            engine.result(theirs.run_id, timeout=20, tenant="globex")
        eventually(
            lambda: engine.get(held.run_id, tenant="acme").status == wp.RunStatus.WAITING,
            "waiting",
        )
        with Api(base, key) as api, Api(base, other_key) as other:
            yield engine, api, other, failed.run_id, held.run_id, theirs.run_id, label


def _attacks(failed: str, held: str, theirs: str) -> list[tuple[str, str, Any]]:
    """(path, what, JSON body or raw bytes) of requests each of which must be refused."""
    retry = f"/v1/runs/{failed}/retry"
    skip = f"/v1/runs/{failed}/skip"
    update = f"/v1/runs/{held}/update-input"
    fork = f"/v1/runs/{failed}/fork"
    purge = "/v1/runs/purge"
    crypt = "/v1/encryption/re-encrypt"
    cases: list[tuple[str, str, Any]] = []
    for value in ("", MB, "a\x00b", "a\nb", "\x1b[31m", "\ud800"):
        cases += [
            (retry, f"retry step {value[:8]!r}", {"reason": "r", "step": value}),
            (skip, f"skip step {value[:8]!r}", {"reason": "r", "step": value, "output": "x"}),
            (fork, f"fork step {value[:8]!r}", {"reason": "r", "step": value}),
            (fork, f"fork run_id {value[:8]!r}", {"reason": "r", "step": "1", "run_id": value}),
            (crypt, f"re-encrypt run_id {value[:8]!r}", {"run_id": value}),
            (crypt, f"re-encrypt after {value[:8]!r}", {"after": value}),
            (purge, f"purge older_than {value[:8]!r}", {"older_than": value}),
        ]
        # A reason may span lines; purge's is optional, so "" there is no reason.
        if value != "a\nb":
            cases += [
                (retry, f"retry reason {value[:8]!r}", {"reason": value}),
                (skip, f"skip reason {value[:8]!r}", {"reason": value, "step": "1"}),
                (fork, f"fork reason {value[:8]!r}", {"reason": value, "step": "1"}),
            ]
        if value not in ("", "a\nb"):
            cases.append((purge, f"purge reason {value[:8]!r}", {"older_than": 1, "reason": value}))
    cases += [
        (skip, "skip output 1 MB", {"reason": "r", "step": "1", "output": MB}),
        (skip, "skip output with NUL", {"reason": "r", "step": "1", "output": "a\x00b"}),
        (update, "update-input empty", {"reason": "r", "data": {}}),
        (update, "update-input 1 MB", {"reason": "r", "data": {"amount": MB}}),
        (update, "update-input control", {"reason": "r", "data": {"amount\x00": 1}}),
        (update, "update-input bad value", {"reason": "r", "data": {"amount": -1}}),
        (update, "update-input not an object", {"reason": "r", "data": [1]}),
        (update, "update-input unknown field", {"reason": "r", "data": {"nope": 1}}),
        (update, "update-input huge number", {"reason": "r", "data": {"amount": 1e400}}),
    ]
    for n in (-1, 0, 2**63, 10**400, 1.5, True, "1"):
        cases += [
            (fork, f"fork seq {n!r}", {"reason": "r", "seq": n}),
            (purge, f"purge limit {n!r}", {"older_than": 86_400, "limit": n}),
            (crypt, f"re-encrypt limit {n!r}", {"limit": n}),
        ]
        if n is not True:
            cases += [
                (purge, f"purge dry_run {n!r}", {"older_than": 1, "dry_run": n}),
                (crypt, f"re-encrypt dry_run {n!r}", {"dry_run": n}),
            ]
    for n in (-1, 2**63, 10**400, float("nan"), True):
        cases.append((purge, f"purge older_than {n!r}", {"older_than": n}))
    cases += [
        (f"/v1/runs/{theirs}/retry", "another tenant's run: retry", {"reason": "r"}),
        (f"/v1/runs/{theirs}/skip", "another tenant's run: skip", {"reason": "r", "step": "1"}),
        (
            f"/v1/runs/{theirs}/update-input",
            "another tenant's run: update-input",
            {"reason": "r", "data": {"amount": 1}},
        ),
        (f"/v1/runs/{theirs}/fork", "another tenant's run: fork", {"reason": "r", "step": "1"}),
        (crypt, "another tenant's run: re-encrypt", {"run_id": theirs}),
        (fork, "fork onto its own id", {"reason": "r", "step": "1", "run_id": failed}),
        (fork, "fork onto a run of the tenant", {"reason": "r", "step": "1", "run_id": held}),
        (fork, "fork past the history", {"reason": "r", "seq": 10_000}),
        (fork, "fork at an unknown step", {"reason": "r", "step": "no such step"}),
        (crypt, "re-encrypt run_id and after", {"run_id": failed, "after": "a"}),
    ]
    # Values 10,000 levels deep where a route takes any JSON.
    cases += [
        (skip, "skip output nested", f'{{"reason": "r", "step": "1", "output": {NESTED}}}'),
        (update, "update-input nested", f'{{"reason": "r", "data": {{"amount": {NESTED}}}}}'),
        (update, "update-input nested object", f'{{"reason": "r", "data": {NESTED_OBJECT}}}'),
    ]
    # Bodies that are not JSON objects a route can read.
    for path in (retry, skip, update, fork, purge, crypt):
        cases += [
            (path, "not UTF-8", b'{"reason": "\xff\xfe\xc3\x28", "step": "\xc0\xaf"}'),
            (path, "nested 10,000 deep", f'{{"reason": "r", "step": "1", "output": {NESTED}}}'),
            (path, "object nested 10,000 deep", f'{{"reason": {NESTED_OBJECT}}}'),
            (path, "a bare nested array", NESTED),
            (path, "not JSON", b"reason=r"),
            (path, "a JSON string", b'"reason"'),
            (path, "unknown field", {"reason": "r", "older_than": 1, "nope": 1}),
        ]
    return cases


def _post(api: Api, path: str, body: Any) -> Any:
    if isinstance(body, bytes | str):
        raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
        return api.post(path, content=raw, headers={"Content-Type": "application/json"})
    # As JSON text the way a client may write it: escapes for lone surrogates, NaN and
    # Infinity (which Python's parser reads), integers of any length.
    raw = json.dumps(body).encode()
    return api.post(path, content=raw, headers={"Content-Type": "application/json"})


def test_hostile_operator_inputs_are_refused_write_nothing_and_others_are_served(
    scene: Any, db_url: str
) -> None:
    engine, api, other, failed, held, theirs, label = scene
    before = _written(db_url)
    histories = {
        (t, r): len(engine.history(r, tenant=t))
        for t, r in (("acme", failed), ("acme", held), ("globex", theirs))
    }
    problems = []
    for path, what, body in _attacks(failed, held, theirs):
        try:
            assert_refused(_post(api, path, body), what)
        except (AssertionError, httpx.HTTPError) as exc:
            problems.append(f"{what}: {str(exc)[:300]}")
    assert problems == [], "\n".join(problems)
    # The routes answer such requests well formed (dry runs write nothing): the refusals
    # above are the inputs', not the routes'.
    for path, body in (
        ("/v1/runs/purge", {"older_than": 86_400, "dry_run": True, "limit": 10}),
        ("/v1/runs/purge", {"older_than": "30d", "dry_run": True, "reason": "a\nb"}),
        ("/v1/encryption/re-encrypt", {"run_id": failed, "dry_run": True}),
        ("/v1/encryption/re-encrypt", {"after": "a", "limit": 1000, "dry_run": True}),
    ):
        answer = api.post(path, json=body)
        assert answer.status_code == 200, (body, answer.text)
    assert _written(db_url) == before
    assert {
        (t, r): len(engine.history(r, tenant=t))
        for t, r in (("acme", failed), ("acme", held), ("globex", theirs))
    } == histories
    # The engine serves on: the other tenant repairs its run, acme its own.
    with _lock:
        broken.discard(label)
    answer = other.post(f"/v1/runs/{theirs}/retry", json={"reason": "the downstream is fixed"})
    assert answer.status_code == 202, answer.text
    assert engine.result(theirs, timeout=20, tenant="globex") == "ok"
    answer = api.post(f"/v1/runs/{failed}/retry", json={"reason": "the downstream is fixed"})
    assert answer.status_code == 202, answer.text
    assert engine.result(failed, timeout=20, tenant="acme") == "ok"


def test_a_fork_to_another_tenants_run_id_is_a_run_of_the_caller_only(
    scene: Any, db_url: str
) -> None:
    # Run ids are per tenant: acme may name its fork as globex named a run; globex's run
    # is not touched, and acme cannot reach globex's through it.
    engine, api, other, failed, held, theirs, label = scene
    history = engine.history(theirs, tenant="globex")
    answer = api.post(
        f"/v1/runs/{failed}/fork", json={"reason": "try again", "step": "1", "run_id": theirs}
    )
    assert answer.status_code == 201, answer.text
    assert engine.history(theirs, tenant="globex") == history
    mine = engine.history(theirs, tenant="acme")
    assert mine[0].data["forked_from"]["run_id"] == failed
    assert other.get(f"/v1/runs/{theirs}").json()["status"] == "failed"
