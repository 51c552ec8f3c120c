"""The HTTP API over a real socket, on both stores: auth, definitions, runs, approvals.

The server runs on the engine's own event loop (see server_fixtures.py); the
black-box tests of the `waypost server` process are in tests/acceptance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from waypost.features.senders import FileSender

from .server_fixtures import Api, make_keys, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="greet_api")
async def greet(ctx: wp.WorkflowContext, name: str) -> str:
    extra = await ctx.wait_signal("go")
    return f"hello {name}{extra or ''}"


SPEND = """
name: spend
input:
  type: object
  required: [amount]
  properties:
    amount: {type: number}
start: ask
steps:
  ask:
    type: approval
    approvers: {users: [ann, bob], quorum: 1}
    input: {amount: amount}
    on_reject: refused
    next: granted
  granted:
    type: succeed
    output: "{granted: amount}"
  refused:
    type: fail
    error: refused
    message: Not granted.
"""


@pytest.fixture
def setup(make_engine: Any, serve: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    notes = tmp_path / "notes.jsonl"
    engine = make_engine(greet, notifier=FileSender(notes))
    running = engine.running()
    running.__enter__()
    base = serve(engine)
    keys = make_keys(
        engine,
        "admin",
        "ops",
        "viewer",
        "other",
        ann=("acme", "ann", "approver"),
        eve=("acme", "eve", "starter", "approver"),
    )
    clients = {name: Api(base, key) for name, key in keys.items()}
    clients["anonymous"] = Api(base, None)
    yield {"engine": engine, "base": base, "notes": notes, **clients}
    for client in clients.values():
        client.http.close()
    running.__exit__(None, None, None)


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    error: dict[str, Any] = body["error"]
    return error


def test_health_and_the_openapi_document(setup: dict[str, Any]) -> None:
    anonymous = setup["anonymous"]
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    assert anonymous.get("/readyz").json() == {"status": "ready"}
    document = anonymous.get("/openapi.json").json()
    assert {"/v1/runs", "/v1/runs/{run_id}", "/v1/definitions", "/v1/approvals"} <= set(
        document["paths"]
    )
    assert "HTTPBearer" in document["components"]["securitySchemes"]


def test_no_key_or_a_bad_key_is_401_with_one_answer(setup: dict[str, Any]) -> None:
    answers = []
    for headers in (
        {},
        {"Authorization": "Bearer nonsense"},
        {"Authorization": "Bearer " + "x" * 10_000},
        {"Authorization": "Basic dXNlcjpwdw=="},
        {"Authorization": "Bearer wpk_0000_\u2028".encode()},
    ):
        response = setup["anonymous"].get("/v1/runs", headers=headers)
        assert response.status_code == 401, response.text
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        answers.append(error_of(response))
    assert all(a == answers[0] for a in answers)
    assert answers[0]["code"] == "unauthenticated"


def test_roles_decide_and_another_tenants_objects_are_not_found(setup: dict[str, Any]) -> None:
    ops, viewer, other = setup["ops"], setup["viewer"], setup["other"]
    started = ops.post("/v1/runs", json={"workflow": "greet_api", "input": "ann"})
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]

    refused = viewer.post("/v1/runs", json={"workflow": "greet_api", "input": "x"})
    assert refused.status_code == 403
    assert error_of(refused)["code"] == "permission_denied"
    assert viewer.get(f"/v1/runs/{run_id}").status_code == 200

    missing = ops.get("/v1/runs/no-such-run")
    for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/history", f"/v1/runs/{run_id}/verify"):
        foreign = other.get(path)
        assert foreign.status_code == 404, (path, foreign.text)
        assert error_of(foreign)["code"] == "run_not_found"
    assert (
        error_of(missing)["message"].replace("no-such-run", run_id).replace("acme", "globex")
        == error_of(other.get(f"/v1/runs/{run_id}"))["message"]
    )
    signal = other.post(f"/v1/runs/{run_id}/signals/go", json={"payload": "!"})
    assert signal.status_code == 404
    cancel = other.post(f"/v1/runs/{run_id}/cancel", json={"reason": "mine now"})
    assert cancel.status_code == 404
    assert setup["engine"].get(run_id, tenant="acme").status == "waiting"


def test_a_run_started_found_again_signalled_and_read_over_http(setup: dict[str, Any]) -> None:
    ops = setup["ops"]
    body = {"workflow": "greet_api", "input": "ann", "run_id": "order-1"}
    first = ops.post("/v1/runs", json=body)
    assert first.status_code == 201
    assert first.json()["run_id"] == "order-1"
    again = ops.post("/v1/runs", json=body)
    assert again.status_code == 200
    assert again.json()["run_id"] == "order-1"
    clash = ops.post("/v1/runs", json={**body, "input": "bob"})
    assert clash.status_code == 409
    assert error_of(clash)["code"] == "run_id_conflict"

    def waiting() -> dict[str, Any] | None:
        shown: dict[str, Any] = ops.get("/v1/runs/order-1").json()
        return shown if shown["status"] == "waiting" else None

    shown = eventually(waiting, "the run to wait")
    assert {"kind": "signal", "name": "go"} in shown["waiting_for"]
    not_yet = ops.get("/v1/runs/order-1/result")
    assert not_yet.status_code == 202
    assert ops.post("/v1/runs/order-1/signals/go", json={"payload": "!"}).status_code == 202
    done = ops.get("/v1/runs/order-1/result", params={"wait": 10})
    assert done.status_code == 200
    assert done.json()["status"] == "completed"
    assert done.json()["result"] == "hello ann!"
    events = ops.get("/v1/runs/order-1/history").json()["events"]
    assert events[0]["type"] == "RunStarted"
    assert events[-1]["type"] == "RunCompleted"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert ops.get("/v1/runs/order-1/verify").json() == {
        "run_id": "order-1",
        "intact": True,
        "problems": [],
    }


def test_bad_requests_are_clear_and_write_nothing(setup: dict[str, Any]) -> None:
    ops, engine = setup["ops"], setup["engine"]
    bad_json = ops.post(
        "/v1/runs", content=b'{"workflow": ', headers={"Content-Type": "application/json"}
    )
    assert bad_json.status_code == 400
    assert error_of(bad_json)["code"] == "bad_json"
    extra = ops.post("/v1/runs", json={"workflow": "greet_api", "color": "red"})
    assert extra.status_code == 422
    assert error_of(extra)["details"]["problems"][0]["path"] == "color"
    unknown = ops.post("/v1/runs", json={"workflow": "nope"})
    assert unknown.status_code == 422
    assert error_of(unknown)["code"] == "unknown_workflow"
    bad_id = ops.post("/v1/runs", json={"workflow": "greet_api", "run_id": "a\u2028b"})
    assert bad_id.status_code == 422
    assert error_of(bad_id)["details"]["field"] == "run_id"
    huge = ops.post("/v1/runs", content=b"x" * (5 * 1024 * 1024))
    assert huge.status_code == 413
    assert error_of(huge)["code"] == "too_large"
    deep = "[" * 3000 + "1" + "]" * 3000
    nested = ops.post(
        "/v1/runs",
        content='{"workflow": "greet_api", "input": ' + deep + "}",
        headers={"Content-Type": "application/json"},
    )
    assert nested.status_code in (400, 422), nested.text
    no_reason = ops.post("/v1/runs/x/cancel", json={})
    assert no_reason.status_code == 422
    assert engine.list_runs(tenant="acme") == []


def test_definitions_are_published_listed_and_refused_with_located_errors(
    setup: dict[str, Any],
) -> None:
    ops, other, viewer = setup["ops"], setup["other"], setup["viewer"]
    yaml = {"Content-Type": "application/yaml"}
    published = ops.post("/v1/definitions", content=SPEND.encode(), headers=yaml)
    assert published.status_code == 201, published.text
    assert published.json()["name"] == "spend"
    assert published.json()["version"] == 1
    assert re.fullmatch(r"[0-9a-f]{64}", published.json()["digest"])
    same = ops.post("/v1/definitions", content=SPEND.encode(), headers=yaml)
    assert same.status_code == 200
    assert same.json()["version"] == 1

    broken = SPEND.replace("next: granted", "next: nowhere")
    refused = ops.post("/v1/definitions", content=broken.encode(), headers=yaml)
    assert refused.status_code == 422
    problems = error_of(refused)["details"]["problems"]
    assert any("nowhere" in p["message"] and p["path"] for p in problems), problems
    latin1 = ops.post("/v1/definitions", content="name: caf\xe9\n".encode("latin-1"))
    assert latin1.status_code == 422
    assert viewer.post("/v1/definitions", content=SPEND.encode()).status_code == 403

    listed = viewer.get("/v1/definitions").json()["definitions"]
    assert [(d["name"], d["version"]) for d in listed] == [("spend", 1)]
    versions = viewer.get("/v1/definitions/spend").json()
    assert [v["version"] for v in versions["versions"]] == [1]
    one = viewer.get("/v1/definitions/spend/1").json()
    assert one["definition"]["start"] == "ask"
    assert other.get("/v1/definitions/spend").status_code == 404
    assert other.get("/v1/definitions/spend/1").status_code == 404
    assert other.get("/v1/definitions").json() == {"definitions": []}


def _note(notes: Path, who: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        if not notes.exists():
            return None
        for line in notes.read_text().splitlines():
            note: dict[str, Any] = json.loads(line)
            if note["approver"] == who:
                return note
        return None

    found: dict[str, Any] = eventually(find, f"a notification for {who}")
    return found


def test_an_approver_with_a_key_decides_without_a_token(setup: dict[str, Any]) -> None:
    ops, ann = setup["ops"], setup["ann"]
    ops.post("/v1/definitions", content=SPEND.encode())
    run_id = ops.post("/v1/runs", json={"workflow": "spend", "input": {"amount": 5}}).json()[
        "run_id"
    ]
    inbox = eventually(lambda: ann.get("/v1/approvals").json()["approvals"], "ann's inbox")
    assert [a["run_id"] for a in inbox] == [run_id]
    approval_id = inbox[0]["approval_id"]
    assert setup["other"].get(f"/v1/approvals/{approval_id}").status_code == 404
    decided = ann.post(
        f"/v1/approvals/{approval_id}/decision", json={"decision": "approve", "comment": "ok"}
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["principal"] == "ann"
    done = ops.get(f"/v1/runs/{run_id}/result", params={"wait": 10}).json()
    assert done["status"] == "completed"
    assert done["result"] == {"granted": 5}
    again = ann.post(f"/v1/approvals/{approval_id}/decision", json={"decision": "approve"})
    assert again.status_code in (404, 409), again.text


def test_the_approval_page_shows_then_decides_once(setup: dict[str, Any]) -> None:
    ops, anonymous, engine = setup["ops"], setup["anonymous"], setup["engine"]
    ops.post("/v1/definitions", content=SPEND.encode())
    run_id = ops.post("/v1/runs", json={"workflow": "spend", "input": {"amount": 7}}).json()[
        "run_id"
    ]
    note = _note(setup["notes"], "bob")
    link = note["approve_url"]  # on the engine's approval_url (the server's address)
    assert link.startswith("http://127.0.0.1:8080/approve/")
    path = "/approve/" + link.rpartition("/approve/")[2]
    before = [e.type for e in engine.history(run_id, tenant="acme")]

    page = anonymous.get(path)
    assert page.status_code == 200
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert "bob" in page.text and run_id in page.text and "7" in page.text
    assert "<script" not in page.text
    assert [
        e.type for e in engine.history(run_id, tenant="acme")
    ] == before  # a GET decides nothing
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None

    forged = anonymous.post(path, data={"csrf": "guess", "comment": ""})
    assert forged.status_code == 403
    assert [e.type for e in engine.history(run_id, tenant="acme")] == before

    too_long = anonymous.post(path, data={"csrf": csrf.group(1), "comment": "x" * 5000})
    assert too_long.status_code == 422
    assert "comment" in too_long.text and "Not recorded" in too_long.text
    control = anonymous.post(path, data={"csrf": csrf.group(1), "comment": "a\x00b"})
    assert control.status_code == 422
    assert [e.type for e in engine.history(run_id, tenant="acme")] == before

    decided = anonymous.post(path, data={"csrf": csrf.group(1), "comment": "fine"})
    assert decided.status_code == 200, decided.text
    assert "Recorded" in decided.text
    assert engine.result(run_id, tenant="acme", timeout=10) == {"granted": 7}

    again = anonymous.get(path)
    assert again.status_code == 410
    spent = anonymous.post(path, data={"csrf": csrf.group(1), "comment": ""})
    assert spent.status_code in (403, 410)
    for wrong in ("nonsense", "a.b", "x" * 5000, note["reject_token"][:-2] + "AA"):
        unusable = anonymous.get(f"/approve/{wrong}")
        assert unusable.status_code in (404, 410)
