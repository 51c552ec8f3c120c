"""Webhooks by correlation and signal-with-start, over the real HTTP server, on both stores.

Deliveries are signed here from the Standard Webhooks specification itself (HMAC-SHA256
with the bytes the `whsec_` secret encodes, over "id.timestamp.body"), not with
waypost's own helpers, so a sender using any library of that standard is what is tested.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.threads import in_threads
from tests.helpers.webhooks import sign, signed_headers
from waypost.errors import NondeterminismError

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(180)


@wp.workflow(name="wh_order")
async def order(ctx: wp.WorkflowContext, order_id: str) -> Any:
    return await ctx.wait_signal("paid", 3600, correlate=("order", order_id))


@wp.workflow(name="wh_twice")
async def twice(ctx: wp.WorkflowContext, order_id: str) -> list[Any]:
    first = await ctx.wait_signal("paid", correlate=("order", order_id))
    second = await ctx.wait_signal("paid", correlate=("order", order_id))
    return [first, second]


@wp.workflow(name="wh_collect")
async def collect(ctx: wp.WorkflowContext, count: int) -> list[Any]:
    return [await ctx.wait_signal("add") for _ in range(count)]


@wp.workflow(name="wh_other")
async def other_workflow(ctx: wp.WorkflowContext) -> None:
    await ctx.wait_signal("never")


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    return error


def signals_of(engine: wp.Engine, run_id: str, tenant: str) -> list[Any]:
    history = engine.history(run_id, tenant=tenant)
    return [e.data for e in history if e.type == "SignalReceived"]


def registered(engine: wp.Engine, run_id: str, tenant: str) -> int:
    """How many correlated waits the run has registered so far."""
    kinds = [e.type for e in engine.history(run_id, tenant=tenant)]
    return kinds.count("CorrelationRegistered")


def waits_with(engine: wp.Engine, run_id: str, tenant: str, value: str) -> bool:
    info = engine.get(run_id, tenant=tenant)
    return any(
        w.get("kind") == "signal" and w.get("correlate") == {"key": "order", "value": value}
        for w in info.waiting_for
    )


def start_waiting(
    engine: Any, workflow: Any, value: str, run_id: str, what: str = "the wait"
) -> None:
    """Start `run_id` of `workflow` in tenant acme, until it waits with `value`."""
    engine.start(workflow, value, run_id=run_id, tenant="acme")
    eventually(lambda: waits_with(engine, run_id, "acme", value), what)


@pytest.fixture
def setup(make_engine: Any, serve: Any) -> Iterator[dict[str, Any]]:
    engine = make_engine(order, twice, collect, other_workflow)
    running = engine.running()
    running.__enter__()
    base = serve(engine, max_body=64 * 1024)
    keys = {
        "admin": make_key(engine, "acme", "root", "admin"),
        "starter": make_key(engine, "acme", "sam", "starter"),
        "viewer": make_key(engine, "acme", "vic", "viewer"),
        "globex": make_key(engine, "globex", "gus", "admin"),
    }
    clients = {name: Api(base, key) for name, key in keys.items()}
    clients["anonymous"] = Api(base, None)
    sources, urls = {}, {}
    for name, client in (("acme-pay", clients["admin"]), ("globex-pay", clients["globex"])):
        made = client.post(
            "/v1/webhook-sources",
            json={
                "source": name,
                "signal": "paid",
                "correlate_key": "order",
                "correlate_path": "data.order.id",
            },
        )
        assert made.status_code == 201, made.text
        sources[name] = made.json()["secret"]
        urls[name] = made.json()["url_id"]
    yield {"engine": engine, "base": base, "secrets": sources, "urls": urls, **clients}
    for client in clients.values():
        client.http.close()
    running.__exit__(None, None, None)


def url(setup: dict[str, Any], source: str) -> str:
    """Where a source's deliveries go: its URL id (an unknown source: the name as it is)."""
    return f"/v1/webhooks/{setup.get('urls', {}).get(source, source)}"


def deliver(setup: dict[str, Any], source: str, delivery_id: str, body: Any, **kwargs: Any) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    secrets = setup["secrets"]
    secret = secrets[source] if source in secrets else secrets["acme-pay"]
    headers = signed_headers(secret, delivery_id, raw, **kwargs)
    return setup["anonymous"].post(url(setup, source), content=raw, headers=headers)


def paid(order_id: str, **extra: Any) -> dict[str, Any]:
    return {"type": "payment.succeeded", "data": {"order": {"id": order_id, **extra}}}


# == correlation ===========================================================================
def test_a_webhook_reaches_the_run_waiting_with_its_value_and_no_other_tenants(
    setup: dict[str, Any],
) -> None:
    engine = setup["engine"]
    engine.start(order, "o-1", run_id="acme-1", tenant="acme")
    engine.start(order, "o-2", run_id="acme-2", tenant="acme")
    engine.start(order, "o-1", run_id="globex-1", tenant="globex")  # the same pair, elsewhere
    for run_id, tenant, value in (
        ("acme-1", "acme", "o-1"),
        ("acme-2", "acme", "o-2"),
        ("globex-1", "globex", "o-1"),
    ):
        eventually(lambda r=run_id, t=tenant, v=value: waits_with(engine, r, t, v), "waits")

    answer = deliver(setup, "acme-pay", "evt-1", paid("o-1", cents=1299))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "source": "acme-pay",
        "delivery_id": "evt-1",
        "runs": ["acme-1"],
        "duplicate": False,
    }
    assert engine.result("acme-1", timeout=10, tenant="acme") == paid("o-1", cents=1299)
    (received,) = signals_of(engine, "acme-1", "acme")
    assert received["webhook"] == {"source": "acme-pay", "delivery_id": "evt-1"}
    # Another tenant's run waiting with the same pair, and another value, are untouched.
    assert waits_with(engine, "globex-1", "globex", "o-1")
    assert waits_with(engine, "acme-2", "acme", "o-2")
    assert signals_of(engine, "globex-1", "globex") == []

    theirs = deliver(setup, "globex-pay", "evt-1", paid("o-1"))
    assert theirs.status_code == 200, theirs.text
    assert theirs.json()["runs"] == ["globex-1"]
    assert engine.result("globex-1", timeout=10, tenant="globex") == paid("o-1")


def test_every_run_waiting_with_the_value_gets_the_signal(setup: dict[str, Any]) -> None:
    engine = setup["engine"]
    for n in range(3):
        engine.start(order, "shared", run_id=f"shared-{n}", tenant="acme")
    for n in range(3):
        eventually(lambda n=n: waits_with(engine, f"shared-{n}", "acme", "shared"), "waits")
    answer = deliver(setup, "acme-pay", "evt-all", paid("shared"))
    assert answer.status_code == 200, answer.text
    assert sorted(answer.json()["runs"]) == ["shared-0", "shared-1", "shared-2"]
    for n in range(3):
        assert engine.result(f"shared-{n}", timeout=10, tenant="acme") == paid("shared")


def test_a_number_at_the_path_is_its_text(setup: dict[str, Any]) -> None:
    engine = setup["engine"]
    start_waiting(engine, order, "4711", "numbered")
    answer = deliver(setup, "acme-pay", "evt-num", {"data": {"order": {"id": 4711}}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["runs"] == ["numbered"]


# == refusals ==============================================================================
def _refusals(setup: dict[str, Any]) -> list[tuple[str, int, str, Any]]:
    """(what, status, code, the response) for every malformed delivery."""
    anonymous, secret = setup["anonymous"], setup["secrets"]["acme-pay"]
    body = json.dumps(paid("o-r")).encode()
    now = int(time.time())
    out = []

    def post(what: str, status: int, code: str, source: str, raw: bytes, headers: Any) -> None:
        response = anonymous.post(url(setup, source), content=raw, headers=headers)
        out.append((what, status, code, response))

    good = signed_headers(secret, "evt-r", body)
    post(
        "bad signature",
        401,
        "webhook_refused",
        "acme-pay",
        body,
        {
            **good,
            "webhook-signature": sign(
                "whsec_" + base64.b64encode(b"k" * 32).decode(), "evt-r", now, body
            ),
        },
    )
    post(
        "signature of another body",
        401,
        "webhook_refused",
        "acme-pay",
        body.replace(b"o-r", b"o-x"),
        good,
    )
    post("unknown source", 401, "webhook_refused", "no-such-source", body, good)
    post(
        "another tenant's source with this secret", 401, "webhook_refused", "globex-pay", body, good
    )
    post("a source id that is no id", 401, "webhook_refused", "x" * 80, body, good)
    stale = signed_headers(secret, "evt-r", body, timestamp=now - 600)
    post("stale timestamp", 401, "webhook_refused", "acme-pay", body, stale)
    ahead = signed_headers(secret, "evt-r", body, timestamp=now + 600)
    post("timestamp ahead", 401, "webhook_refused", "acme-pay", body, ahead)
    post(
        "no signature",
        401,
        "webhook_refused",
        "acme-pay",
        body,
        {k: v for k, v in good.items() if k != "webhook-signature"},
    )
    post(
        "timestamp not a number",
        401,
        "webhook_refused",
        "acme-pay",
        body,
        {**good, "webhook-timestamp": "soon"},
    )
    post(
        "id with a control character",
        401,
        "webhook_refused",
        "acme-pay",
        body,
        signed_headers(secret, "evt\x1b[2J", body),
    )

    def signed(what: str, status: int, code: str, raw: bytes) -> None:
        post(what, status, code, "acme-pay", raw, signed_headers(secret, "evt-r", raw))

    signed("not JSON", 422, "invalid_request", b"order=o-r")
    signed("not UTF-8", 422, "invalid_request", b'{"data": "\xff\xfe"}')
    signed("too deep", 422, "invalid_request", b'{"data":' + b"[" * 100_00 + b"]" * 100_00 + b"}")
    signed(
        "a NUL character",
        422,
        "invalid_request",
        json.dumps({"data": {"order": {"id": "o-r"}}, "x": "\x00"}).encode(),
    )
    signed("no correlation value", 422, "invalid_request", json.dumps({"data": {}}).encode())
    signed(
        "an object as the value",
        422,
        "invalid_request",
        json.dumps({"data": {"order": {"id": {"o": 1}}}}).encode(),
    )
    signed(
        "an empty value",
        422,
        "invalid_request",
        json.dumps({"data": {"order": {"id": ""}}}).encode(),
    )
    signed(
        "a value too long",
        422,
        "invalid_request",
        json.dumps({"data": {"order": {"id": "o" * 201}}}).encode(),
    )
    huge = json.dumps({"data": {"order": {"id": "o-r"}}, "pad": "x" * 100_000}).encode()
    signed("over the server's body limit", 413, "too_large", huge)
    return out


def test_every_bad_delivery_is_one_clear_refusal_and_delivers_nothing(
    setup: dict[str, Any],
) -> None:
    engine = setup["engine"]
    start_waiting(engine, order, "o-r", "refusals")
    answers = _refusals(setup)
    for what, status, code, response in answers:
        assert response.status_code == status, (what, response.text)
        error = error_of(response) if code != "too_large" else response.json()["error"]
        assert error["code"] == code, (what, error)
        assert len(error["message"]) < 400, what
        assert "acme" not in response.text and "globex" not in response.text, what
    # Nothing reached the run, and the delivery id was not kept: it still delivers.
    assert signals_of(engine, "refusals", "acme") == []
    assert waits_with(engine, "refusals", "acme", "o-r")
    ok = deliver(setup, "acme-pay", "evt-r", paid("o-r"))
    assert ok.status_code == 200, ok.text
    assert ok.json()["runs"] == ["refusals"]


def test_an_unknown_source_and_a_wrong_signature_answer_the_same(
    setup: dict[str, Any],
) -> None:
    by_what = {what: response for what, _, _, response in _refusals(setup)}
    same = {
        by_what[w].text
        for w in (
            "bad signature",
            "unknown source",
            "another tenant's source with this secret",
            "a source id that is no id",
        )
    }
    assert len(same) == 1
    assert "stale" not in next(iter(same))


def test_a_payload_over_the_tenants_limit_is_413(make_engine: Any, serve: Any) -> None:
    engine = make_engine(order, limits=wp.Limits(max_payload_bytes=200))
    with engine.running():
        base = serve(engine)
        made = engine.create_webhook_source(
            "p", signal="paid", key="order", path="data.order.id", tenant="acme"
        )
        start_waiting(engine, order, "o-big", "big")
        raw = json.dumps(paid("o-big", pad="x" * 500)).encode()
        anonymous = Api(base, None)
        try:
            response = anonymous.post(
                made.url_path, content=raw, headers=signed_headers(made.secret, "e", raw)
            )
        finally:
            anonymous.http.close()
        assert response.status_code == 413, response.text
        assert error_of(response)["details"] == {"quota": "max_payload_bytes"}
        assert signals_of(engine, "big", "acme") == []


# == deduplication =========================================================================
def test_a_replayed_delivery_answers_its_first_outcome_and_delivers_once(
    setup: dict[str, Any],
) -> None:
    engine = setup["engine"]
    start_waiting(engine, twice, "o-d", "dedup", "the first wait")
    raw = json.dumps(paid("o-d", n=1)).encode()
    headers = signed_headers(setup["secrets"]["acme-pay"], "evt-d", raw)
    first = setup["anonymous"].post(url(setup, "acme-pay"), content=raw, headers=headers)
    assert first.status_code == 200, first.text
    # The run waits again with the same pair: a replay that were not deduplicated would
    # reach it. (Its snapshot still shows the first wait until the run has taken the
    # signal in: the second wait is there once the run registered it.)
    eventually(
        lambda: (
            len(signals_of(engine, "dedup", "acme")) == 1
            and registered(engine, "dedup", "acme") == 2
            and waits_with(engine, "dedup", "acme", "o-d")
        ),
        "the second wait",
    )
    again = setup["anonymous"].post(url(setup, "acme-pay"), content=raw, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json() == {**first.json(), "duplicate": True}
    assert len(signals_of(engine, "dedup", "acme")) == 1
    assert waits_with(engine, "dedup", "acme", "o-d")

    second = deliver(setup, "acme-pay", "evt-d2", paid("o-d", n=2))
    assert second.status_code == 200, second.text
    assert engine.result("dedup", timeout=10, tenant="acme") == [
        paid("o-d", n=1),
        paid("o-d", n=2),
    ]


def test_concurrent_copies_of_one_delivery_deliver_once(setup: dict[str, Any]) -> None:
    engine = setup["engine"]
    start_waiting(engine, twice, "o-c", "copies")
    raw = json.dumps(paid("o-c")).encode()
    headers = signed_headers(setup["secrets"]["acme-pay"], "evt-c", raw)
    answers: list[Any] = []
    barrier = threading.Barrier(6)

    def send() -> None:
        client = Api(setup["base"], None)
        barrier.wait()
        answers.append(client.post(url(setup, "acme-pay"), content=raw, headers=headers))
        client.http.close()

    in_threads([send] * 6, timeout=60)
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert sorted(a.json()["duplicate"] for a in answers) == [False] + [True] * 5
    assert {tuple(a.json()["runs"]) for a in answers} == {("copies",)}
    eventually(lambda: waits_with(engine, "copies", "acme", "o-c"), "the second wait")
    assert len(signals_of(engine, "copies", "acme")) == 1


def test_no_waiting_run_is_404_and_the_id_is_not_kept(setup: dict[str, Any]) -> None:
    engine = setup["engine"]
    raw = json.dumps(paid("o-late")).encode()
    headers = signed_headers(setup["secrets"]["acme-pay"], "evt-late", raw)
    early = setup["anonymous"].post(url(setup, "acme-pay"), content=raw, headers=headers)
    assert early.status_code == 404, early.text
    assert error_of(early)["code"] == "no_run_waiting"
    start_waiting(engine, order, "o-late", "late")
    retried = setup["anonymous"].post(url(setup, "acme-pay"), content=raw, headers=headers)
    assert retried.status_code == 200, retried.text
    assert retried.json()["runs"] == ["late"]


def test_a_finished_or_timed_out_wait_is_no_longer_found(
    setup: dict[str, Any],
) -> None:
    engine = setup["engine"]
    start_waiting(engine, order, "o-gone", "gone")
    engine.cancel("gone", "no longer needed", tenant="acme")
    with pytest.raises(wp.WorkflowCancelled):
        engine.result("gone", timeout=10, tenant="acme")
    answer = deliver(setup, "acme-pay", "evt-gone", paid("o-gone"))
    assert answer.status_code == 404, answer.text


# == sources ===============================================================================
def test_sources_are_an_admins_and_their_ids_the_tenants_own(
    setup: dict[str, Any],
) -> None:
    admin, starter, globex = setup["admin"], setup["starter"], setup["globex"]
    body = {"source": "s2", "signal": "paid", "correlate_key": "order", "correlate_path": "id"}
    refused = starter.post("/v1/webhook-sources", json=body)
    assert refused.status_code == 403, refused.text
    # Another tenant's id is neither seen nor taken: acme makes its own "globex-pay"...
    mine = admin.post("/v1/webhook-sources", json={**body, "source": "globex-pay"})
    assert mine.status_code == 201, mine.text
    assert mine.json()["url_id"] != setup["urls"]["globex-pay"]
    # ...and only its own ids are "taken".
    taken = admin.post("/v1/webhook-sources", json={**body, "source": "globex-pay"})
    assert taken.status_code == 409, taken.text
    assert error_of(taken)["code"] == "webhook_source_exists"
    assert admin.delete("/v1/webhook-sources/globex-pay").status_code == 200
    assert [s["source"] for s in globex.get("/v1/webhook-sources").json()["sources"]] == [
        "globex-pay"
    ]
    for bad in (
        {"source": "a/b"},
        {"source": ""},
        {"correlate_path": "data..id"},
        {"correlate_path": "data.$id"},
        {"tolerance_seconds": 0},
        {"tolerance_seconds": 86_400},
        {"signal": "bad\nsignal"},
    ):
        response = admin.post("/v1/webhook-sources", json={**body, **bad})
        assert response.status_code == 422, (bad, response.text)
    listed = admin.get("/v1/webhook-sources").json()["sources"]
    assert [s["source"] for s in listed] == ["acme-pay"]
    assert "secret" not in listed[0] and "whsec_" not in json.dumps(listed)
    assert globex.delete("/v1/webhook-sources/acme-pay").status_code == 404
    assert admin.delete("/v1/webhook-sources/acme-pay").status_code == 200
    gone = deliver(setup, "acme-pay", "evt-x", paid("o-x"))
    assert gone.status_code == 401, gone.text


# == signal-with-start =====================================================================
def test_signal_with_start_creates_then_signals_the_existing_run(setup: dict[str, Any]) -> None:
    starter, engine = setup["starter"], setup["engine"]
    body = {"workflow": "wh_collect", "input": 2, "run_id": "sws", "signal": "add"}
    created = starter.post("/v1/runs/signal-with-start", json={**body, "payload": "a"})
    assert created.status_code == 201, created.text
    assert created.json()["run_id"] == "sws"
    existing = starter.post(
        "/v1/runs/signal-with-start", json={**body, "input": 99, "payload": "b"}
    )
    assert existing.status_code == 200, existing.text
    assert engine.result("sws", timeout=10, tenant="acme") == ["a", "b"]
    history = engine.history("sws", tenant="acme")
    assert [e.type for e in history][:2] == ["RunStarted", "SignalReceived"]
    assert history[0].data["input"] == 2

    finished = starter.post("/v1/runs/signal-with-start", json={**body, "payload": "c"})
    assert finished.status_code == 409, finished.text
    assert error_of(finished)["code"] == "run_not_active"
    other = starter.post(
        "/v1/runs/signal-with-start", json={**body, "workflow": "wh_other", "payload": "c"}
    )
    assert other.status_code == 409, other.text
    assert error_of(other)["code"] == "run_id_conflict"
    viewer = setup["viewer"].post("/v1/runs/signal-with-start", json={**body, "run_id": "v"})
    assert viewer.status_code == 403
    assert signals_of(engine, "sws", "acme") == [
        {"name": "add", "payload": "a", "by": "sam"},
        {"name": "add", "payload": "b", "by": "sam"},
    ]


def test_concurrent_signal_with_start_creates_one_run_and_delivers_every_signal(
    setup: dict[str, Any],
) -> None:
    engine, count = setup["engine"], 6
    answers: list[Any] = []
    barrier = threading.Barrier(count)

    def call(n: int) -> None:
        client = Api(setup["base"], setup["starter"].key)
        barrier.wait()
        answers.append(
            client.post(
                "/v1/runs/signal-with-start",
                json={
                    "workflow": "wh_collect",
                    "input": count,
                    "run_id": "race",
                    "signal": "add",
                    "payload": n,
                },
            )
        )
        client.http.close()

    in_threads([partial(call, n) for n in range(count)], timeout=60)
    assert sorted(a.status_code for a in answers) == [200] * (count - 1) + [201], [
        a.text for a in answers
    ]
    assert sorted(engine.result("race", timeout=20, tenant="acme")) == list(range(count))
    types = [e.type for e in engine.history("race", tenant="acme")]
    assert types.count("RunStarted") == 1
    assert types.count("SignalReceived") == count


def test_the_python_client_signals_with_start(setup: dict[str, Any]) -> None:
    with wp.Client(setup["base"], setup["starter"].key) as client:
        first = client.signal_with_start("wh_collect", 2, run_id="cl", signal="add", payload=1)
        again = client.signal_with_start("wh_collect", 2, run_id="cl", signal="add", payload=2)
        assert (first.run_id, first.created, again.created) == ("cl", True, False)
        assert client.result("cl", timeout=10) == [1, 2]


# == replay ================================================================================
def test_a_run_that_waited_with_correlate_replays_deterministically(
    make_engine: Any, serve: Any
) -> None:
    engine = make_engine(twice, cache_size=0)  # every step replays from the store
    with engine.running():
        made = engine.create_webhook_source(
            "r", signal="paid", key="order", path="data.order.id", tenant="acme"
        )
        engine.start(twice, "o-rp", run_id="replayed", tenant="acme")
        with Api(serve(engine), None) as anonymous:
            setup = {
                "anonymous": anonymous,
                "secrets": {"r": made.secret},
                "urls": {"r": made.url_id},
            }
            for n in (1, 2):
                # the n-th wait is registered (and the one before withdrawn), not
                # merely still shown while the run takes the previous delivery
                eventually(lambda n=n: registered(engine, "replayed", "acme") == n, "a wait")
                assert deliver(setup, "r", f"evt-{n}", paid("o-rp", n=n)).status_code == 200
        assert engine.result("replayed", timeout=10, tenant="acme") == [
            paid("o-rp", n=1),
            paid("o-rp", n=2),
        ]
    history = engine.history("replayed", tenant="acme")
    kinds = [(e.type, e.data.get("step")) for e in history if "Correlation" in e.type]
    assert kinds == [
        ("CorrelationRegistered", "1"),
        ("CorrelationWithdrawn", "1"),
        ("CorrelationRegistered", "2"),
        ("CorrelationWithdrawn", "2"),
    ]
    assert not [e for e in history if e.type == "RunSuspended"]
    assert engine.verify("replayed", tenant="acme") == []


def test_code_that_correlates_by_another_value_on_replay_is_suspended(
    make_engine: Any,
) -> None:
    engine = make_engine(order, cache_size=0)
    with engine.running():
        start_waiting(engine, order, "o-1", "changed")
    engine.close()

    @wp.workflow(name="wh_order")
    async def changed(ctx: wp.WorkflowContext, order_id: str) -> Any:
        return await ctx.wait_signal("paid", 3600, correlate=("order", order_id + "!"))

    later = make_engine(changed, cache_size=0)
    with later.running():
        later.signal("changed", "poke", tenant="acme")  # wakes the run: it replays
        info = eventually(
            lambda: (i := later.get("changed", tenant="acme")).status == "suspended" and i,
            "the run suspended",
        )
    assert info.error is not None
    assert info.error["type"] == NondeterminismError.__name__
    assert "CorrelationRegistered" in info.error["message"]


SHIPMENT = """
name: wh_shipment
input: {type: object, required: [order], properties: {order: {type: string}}}
start: wait_paid
steps:
  wait_paid:
    type: wait
    signal: paid
    correlate: {key: order, value: order}
    output: $.payment
    timeout: PT1H
    next: done
  done:
    type: succeed
"""


def test_a_definitions_wait_step_correlates_too(setup: dict[str, Any]) -> None:
    engine = setup["engine"]
    engine.publish(SHIPMENT, tenant="acme")
    bad = SHIPMENT.replace("value: order", "value: 'order[('")
    with pytest.raises(wp.DefinitionError, match=r"correlate\.value"):
        engine.publish(bad, tenant="acme")
    with pytest.raises(wp.DefinitionError, match="correlate"):
        engine.publish(SHIPMENT.replace("signal: paid\n", "duration: PT1H\n"), tenant="acme")
    engine.start("wh_shipment", {"order": "o-def"}, run_id="def", tenant="acme")
    eventually(lambda: waits_with(engine, "def", "acme", "o-def"), "the wait")
    answer = deliver(setup, "acme-pay", "evt-def", paid("o-def"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["runs"] == ["def"]
    result = engine.result("def", timeout=10, tenant="acme")
    assert result == {"order": "o-def", "payment": paid("o-def")}
