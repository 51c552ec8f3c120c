"""Half a surrogate pair over HTTP, on both stores: refused on every route that takes a
JSON body before anything is written; and where one is stored already (by the embedded
API, or an older server), every read and listing of it still answers, with the JSON
escape of the same string.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually

from .console_fixtures import Browser
from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)

LONE = "\udc00"


@wp.workflow(name="echo_sur")
async def echo(ctx: wp.WorkflowContext, value: Any) -> Any:
    got = await ctx.wait_signal("go")
    return {"input": value, "signal": got}


@pytest.fixture
def site(make_engine: Any, serve: Any, db_url: str) -> Iterator[dict[str, Any]]:
    engine = make_engine(echo)
    with engine.running():
        base = serve(engine)
        ops = make_key(engine, "acme", "olga", "operator", "starter")
        yield {"engine": engine, "base": base, "ops": ops, "api": Api(base, ops), "db": db_url}


def _post_raw(api: Api, path: str, text: str) -> Any:
    """POST a JSON text exactly as written (its escapes are not ours to normalise)."""
    return api.post(path, content=text.encode(), headers={"Content-Type": "application/json"})


def _refused(answer: Any, where: str) -> None:
    assert answer.status_code == 422, (answer.status_code, answer.text)
    error = answer.json()["error"]
    assert error["code"] == "invalid_request"
    assert "surrogate" in error["message"]
    assert error["details"]["field"] == where


# == refused before anything is written ==================================================
@pytest.mark.parametrize(
    "escape",
    [r"\udc00", r"\ud800", r"x\ud83d", r"\ude00y", r"\ud800\ud800"],
)
def test_a_start_with_half_a_surrogate_pair_is_refused_and_no_run_exists(
    site: dict[str, Any], escape: str
) -> None:
    api = site["api"]
    text = '{"workflow": "echo_sur", "run_id": "r-bad", "input": {"x": "' + escape + '"}}'
    _refused(_post_raw(api, "/v1/runs", text), "$.input.x")
    assert api.get("/v1/runs/r-bad").status_code == 404
    assert api.get("/v1/runs").json()["runs"] == []
    # A whole pair is text, and starts the run.
    pair = '{"workflow": "echo_sur", "run_id": "r-ok", "input": "\\ud83d\\ude00"}'
    assert _post_raw(api, "/v1/runs", pair).status_code == 201
    assert api.get("/v1/runs/r-ok").json()["input"] == "\U0001f600"


def test_the_raw_bytes_of_a_surrogate_are_refused_too(site: dict[str, Any]) -> None:
    api = site["api"]
    body = b'{"workflow": "echo_sur", "run_id": "r-raw", "input": "\xed\xb0\x80"}'
    answer = api.post("/v1/runs", content=body, headers={"Content-Type": "application/json"})
    _refused(answer, "$.input")
    assert api.get("/v1/runs/r-raw").status_code == 404


def test_a_key_with_half_a_surrogate_pair_is_refused(site: dict[str, Any]) -> None:
    api = site["api"]
    text = '{"workflow": "echo_sur", "run_id": "r-key", "input": {"\\udc00": 1}}'
    _refused(_post_raw(api, "/v1/runs", text), "$.input (a key)")
    assert api.get("/v1/runs/r-key").status_code == 404


def test_every_body_route_refuses_it_and_no_run_changes(site: dict[str, Any]) -> None:
    api, engine = site["api"], site["engine"]
    assert api.post("/v1/runs", json={"workflow": "echo_sur", "run_id": "r-1"}).status_code == 201
    eventually(lambda: engine.get("r-1", tenant="acme").status.value == "waiting", "r-1 to wait")
    before = [e.seq for e in engine.history("r-1", tenant="acme")]
    bad = '"\\udc00"'
    attempts = {
        "/v1/runs/r-1/signals/go": ('{"payload": ' + bad + "}", "$.payload"),
        "/v1/runs/signal-with-start": (
            '{"workflow": "echo_sur", "run_id": "r-2", "signal": "go", "input": 1, '
            '"payload": {"a": [' + bad + "]}}",
            "$.payload.a[0]",
        ),
        "/v1/runs/r-1/queries/state": ('{"args": [' + bad + "]}", "$.args[0]"),
        "/v1/runs/r-1/updates/set": ('{"args": [' + bad + "]}", "$.args[0]"),
        "/v1/runs/r-1/skip": ('{"step": "1", "reason": "x", "output": ' + bad + "}", "$.output"),
        "/v1/runs/r-1/cancel": ('{"reason": ' + bad + "}", "$.reason"),
        "/v1/schedules": (
            '{"id": "s-1", "workflow": "echo_sur", "every": 3600, "input": ' + bad + "}",
            "$.input",
        ),
    }
    for path, (text, where) in attempts.items():
        _refused(_post_raw(api, path, text), where)
    assert [e.seq for e in engine.history("r-1", tenant="acme")] == before
    assert api.get("/v1/runs/r-2").status_code == 404
    assert api.get("/v1/schedules").json()["schedules"] == []
    assert engine.get("r-1", tenant="acme").status.value == "waiting"


# == what is stored already is read and listed ============================================
# Stored through the engine's own writes, below any HTTP check: what an older server, or
# the embedded API, keeps. (A row edited by SQL behind the engine's back is refused on
# read as an edit: tests/integration/test_record_checks.py.)
def test_a_stored_lone_surrogate_is_read_listed_and_shown(site: dict[str, Any]) -> None:
    engine, api = site["engine"], site["api"]
    # Stored through the embedded API (no HTTP check in the way): input, signal, result.
    engine.start(echo, {"x": LONE, LONE: "key"}, tenant="acme", run_id="r-emb")
    engine.signal("r-emb", "go", [LONE, "ok"], tenant="acme")
    assert engine.result("r-emb", tenant="acme", timeout=10)["signal"] == [LONE, "ok"]
    engine.start(echo, [LONE], tenant="acme", run_id="r-two")

    run = api.get("/v1/runs/r-emb")
    assert run.status_code == 200, run.text
    assert run.json()["input"] == {"x": LONE, LONE: "key"}  # the escape reads back the same
    assert b"\\udc00" in run.content  # written as the JSON escape, valid UTF-8
    run.content.decode("utf-8")
    result = api.get("/v1/runs/r-emb/result")
    assert result.status_code == 200
    assert result.json()["result"] == {"input": {"x": LONE, LONE: "key"}, "signal": [LONE, "ok"]}
    history = api.get("/v1/runs/r-emb/history")
    assert history.status_code == 200
    assert any(e["data"].get("payload") == [LONE, "ok"] for e in history.json()["events"])
    second = api.get("/v1/runs/r-two")
    assert second.status_code == 200
    assert second.json()["input"] == [LONE]
    listed = api.get("/v1/runs")
    assert listed.status_code == 200
    assert {r["run_id"] for r in listed.json()["runs"]} == {"r-emb", "r-two"}
    assert api.get("/v1/runs/r-two/history").status_code == 200

    b = Browser(site["base"])
    assert b.sign_in_key(site["ops"]).status_code == 303
    for path in ("/runs", "/runs/r-emb", "/runs/r-two", "/runs/r-emb?at=2"):
        page = b.get(path)
        assert page.status_code == 200, (path, page.status_code)
        page.content.decode("utf-8")
    assert "\\udc00" in b.get("/runs/r-emb").text
