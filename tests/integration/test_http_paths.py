"""Ids with `/` over HTTP, on both stores: a run (or schedule) whose id holds slashes is
reached with them percent-encoded (`%2F`) by the remote client and by hand, its suffix
routes (`/history`, `/signals/...`) stay its own, and an encoded slash is never read as
a path separator or confused with a control character. And `GET /v1/definitions/{name}`
answers that name's versions alone."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from waypost.model import operations as ops

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)

SLASHED = "orders/2026/o-1"


@wp.workflow(name="paths_wait")
async def waits(ctx: wp.WorkflowContext, label: str) -> str:
    got = await ctx.wait_signal("go/on")
    return f"{label}:{got}"


@pytest.fixture
def site(make_engine: Any, serve: Any) -> Any:
    engine = make_engine(waits)
    with engine.running():
        base = serve(engine)
        yield engine, base, make_key(engine, "acme", "olga", "operator", "starter")


def test_a_run_id_with_slashes_is_reachable_by_the_remote_client(site: Any) -> None:
    engine, base, key = site
    with wp.Client(base, key) as client:
        assert client.start("paths_wait", "s", run_id=SLASHED) == SLASHED
        # its neighbours on the path are other runs
        client.start("paths_wait", "o", run_id="orders")
        client.start("paths_wait", "h", run_id="orders/history")
        eventually(lambda: client.get(SLASHED).waiting_for, "the signal wait")
        assert client.get(SLASHED).run_id == SLASHED
        assert client.history(SLASHED)[0].data["input"] == "s"
        client.signal(SLASHED, "go/on", "yes")  # a signal name with a slash too
        assert client.result(SLASHED, timeout=30) == "s:yes"
        eventually(lambda: client.get("orders").status == "waiting", "orders waiting")
        assert client.get("orders/history").run_id == "orders/history"


def test_encoded_slashes_by_hand(site: Any) -> None:
    engine, base, key = site
    engine.start(waits, "s", run_id=SLASHED, tenant="acme")
    engine.start(waits, "a", run_id="a", tenant="acme")
    with Api(base, key) as api:
        for encoded in ("orders%2F2026%2Fo-1", "orders%2f2026%2fo-1"):
            shown = api.get(f"/v1/runs/{encoded}")
            assert shown.status_code == 200, shown.text
            assert shown.json()["run_id"] == SLASHED
            history = api.get(f"/v1/runs/{encoded}/history")
            assert history.status_code == 200 and history.json()["events"][0]["seq"] == 1
        # run "a/history" is not run "a"'s history
        other = api.get("/v1/runs/a%2Fhistory")
        assert other.status_code == 404 and other.json()["error"]["code"] == "run_not_found"
        # unencoded, the slashes are path separators: no such route
        plain = api.get(f"/v1/runs/{SLASHED}")
        assert plain.status_code == 404 and plain.json()["error"]["code"] == "not_found"
        # a NUL is a control character in an id, never a slash
        nul = api.get("/v1/runs/orders%002026%2Fo-1")
        assert nul.status_code in (404, 422) and nul.json()["error"]["code"] != "internal"
        assert engine.get(SLASHED, tenant="acme").status == "waiting"
        sent = api.post("/v1/runs/orders%2F2026%2Fo-1/signals/go%2Fon", json={"payload": 1})
        assert sent.status_code == 202, sent.text
    assert engine.result(SLASHED, timeout=30, tenant="acme") == "s:1"


def test_a_schedule_id_with_slashes(site: Any) -> None:
    engine, base, key = site
    with wp.Client(base, key) as client:
        client.schedule("paths_wait", id="eu/nightly", every=3600, input="n")
        assert client.describe_schedule("eu/nightly").schedule_id == "eu/nightly"
        assert client.pause_schedule("eu/nightly").paused
        client.delete_schedule("eu/nightly")
        assert client.schedules() == []


def test_a_definitions_versions_are_read_by_name(make_engine: Any, serve: Any) -> None:
    engine = make_engine()
    body = "name: {}\nstart: done\nsteps:\n  done: {{type: succeed, output: {}}}\n"
    for name, outputs in (("bill", ("a", "b")), ("billing", ("c",))):
        for out in outputs:
            engine.publish(body.format(name, out), tenant="acme")
    asked = ops.ListDefinitions(definition="bill")
    found = engine.execute(asked, engine.aio.local("acme"))
    assert [(d.name, d.version) for d in found] == [("bill", 1), ("bill", 2)]
    with pytest.raises(wp.InvalidRequest, match="definition"):
        engine.execute(ops.ListDefinitions(definition="bad\x07"), engine.aio.local("acme"))
    base = serve(engine)
    with Api(base, make_key(engine, "acme", "vic", "viewer")) as api:
        answer = api.get("/v1/definitions/bill")
        assert answer.status_code == 200, answer.text
        assert [v["version"] for v in answer.json()["versions"]] == [1, 2]
        assert api.get("/v1/definitions/nothing").status_code == 404
