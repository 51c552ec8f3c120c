"""The HTTP server's walls against hostile requests, over a real socket, on both stores:
cookies and form tokens of any text, what its logs show of a credential in a path.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import eventually
from tests.helpers.definitions import ask_ann
from waypost.features.senders import FileSender
from waypost.server.errors import logged_path

from .console_fixtures import Browser
from .server_fixtures import Api, make_keys, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)

PASSWORD = "correct horse battery"

ASK = ask_ann("ask_walls")


@pytest.fixture
def site(make_engine: Any, serve: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    notes = tmp_path / "notes.jsonl"
    engine = make_engine(notifier=FileSender(notes))
    with engine.running():
        base = serve(engine)
        keys = make_keys(engine, "admin", "ops")
        engine.create_user("rita", ["operator"], PASSWORD, tenant="acme")
        yield {"engine": engine, "base": base, "notes": notes, **keys}


def _approval_path(site: dict[str, Any]) -> str:
    """The path of a new approval link (for ann) of a run waiting on it."""
    ops = Api(site["base"], site["ops"])
    assert ops.post("/v1/definitions", content=ASK.encode()).status_code in (200, 201)
    assert ops.post("/v1/runs", json={"workflow": "ask_walls"}).status_code == 201

    def link() -> str | None:
        if not site["notes"].exists():
            return None
        for line in site["notes"].read_text().splitlines():
            note: dict[str, Any] = json.loads(line)
            return str(note["approve_url"])
        return None

    url: str = eventually(link, "an approval link")
    return "/approve/" + url.rpartition("/approve/")[2]


def _raw_cookie(name: str, value: bytes) -> dict[str, bytes]:
    """A Cookie header of raw bytes, as a hostile client may send (not ASCII)."""
    return {"Cookie": name.encode() + b"=" + value}


# == cookies and tokens of any text ======================================================
def test_a_non_ascii_session_cookie_is_no_session_not_an_error(site: dict[str, Any]) -> None:
    b = Browser(site["base"])
    for value in ("é".encode(), "é.ü".encode(), b"\xff\xfe.\xc3\xa9", "x.\u2603".encode()):
        answer = b.http.get("/runs", headers=_raw_cookie("waypost_session", value))
        assert answer.status_code == 303, (value, answer.status_code)
        assert answer.headers["location"].startswith("/sign-in")


def test_a_non_ascii_csrf_token_is_refused_not_an_error(site: dict[str, Any]) -> None:
    b = Browser(site["base"])
    assert b.sign_in_password("acme", "rita", PASSWORD).status_code == 303
    refused = b.http.post("/sign-out", data={"csrf": "é" * 43})
    assert refused.status_code == 403
    assert b.get("/runs").status_code == 200  # still signed in: nothing was done
    # The sign-in form's token: a non-ASCII field, and a non-ASCII cookie beside it.
    signin = Browser(site["base"])
    token = signin.csrf("/sign-in")
    form = {"tenant": "acme", "user": "rita", "password": PASSWORD}
    assert signin.post("/sign-in", data={**form, "csrf": "é" + token[1:]}).status_code == 403
    odd_cookie = signin.http.post(
        "/sign-in",
        content=f"csrf={token}&tenant=acme&user=rita&password=x".encode(),
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            **_raw_cookie("waypost_signin", "é".encode() + token.encode()),
        },
    )
    assert odd_cookie.status_code == 403


def test_the_approval_pages_token_of_any_text_is_refused_and_nothing_recorded(
    site: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    path = _approval_path(site)
    anonymous = Api(site["base"], None)
    page = anonymous.get(path)
    assert page.status_code == 200
    kept = anonymous.http.cookies["waypost_csrf"]
    refused = anonymous.http.post(
        path,
        content=f"csrf={kept}&comment=".encode(),
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            **_raw_cookie("waypost_csrf", "é".encode() + kept.encode()),
        },
    )
    assert refused.status_code == 403, refused.status_code
    assert anonymous.http.post(path, data={"csrf": "ü" * 43, "comment": ""}).status_code == 403
    engine = site["engine"]
    assert engine.approvals(tenant="acme")[0].status == "pending"
    credential = path.rpartition("/")[2]
    assert credential not in _server_log(caplog)


def _server_log(caplog: pytest.LogCaptureFixture) -> str:
    """What the server's own loggers wrote (the test's HTTP client logs its URLs too)."""
    return "\n".join(
        r.getMessage() for r in caplog.records if r.name.startswith(("waypost", "uvicorn"))
    )


# == what the log shows of a path ========================================================
def test_an_unexpected_error_on_the_approval_page_logs_no_credential(
    site: dict[str, Any], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _approval_path(site)
    credential = path.rpartition("/")[2]
    engine = site["engine"].aio
    real = engine.execute

    async def failing(request: Any, principal: Any) -> Any:
        if type(request).__name__ == "ResolveCredential":
            raise RuntimeError("a bug on the approval page")
        return await real(request, principal)

    monkeypatch.setattr(engine, "execute", failing)
    caplog.set_level(logging.ERROR, logger="waypost.server")
    answer = Api(site["base"], None).get(path)
    assert answer.status_code == 500
    lines = [r.getMessage() for r in caplog.records if r.name == "waypost.server"]
    assert any("GET /approve/[credential]" in line for line in lines), lines
    assert credential not in _server_log(caplog)


def test_logged_paths_leave_out_the_credential_of_an_approval_link() -> None:
    assert logged_path("/approve/abc.def-ghi") == "/approve/[credential]"
    assert logged_path("/approve/") == "/approve/[credential]"
    assert logged_path("/v1/runs/approve/x") == "/v1/runs/approve/x"
    assert logged_path("/runs/r-1") == "/runs/r-1"
    assert re.fullmatch(r"/approve/\[credential\]", logged_path("/approve/" + "x" * 500))


# == the OpenAPI description ===============================================================
def test_every_route_that_takes_a_body_declares_its_400_and_413(site: dict[str, Any]) -> None:
    document = Api(site["base"], None).get("/openapi.json").json()
    with_body = {
        (method, path)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if "requestBody" in operation
    }
    named = {  # the routes the description lacked them on
        ("post", "/v1/schedules"),
        ("post", "/v1/schedules/{schedule_id}/backfill"),
        ("post", "/v1/runs/{run_id}/queries/{name}"),
        ("post", "/v1/runs/{run_id}/updates/{name}"),
        ("post", "/v1/users"),
        ("post", "/v1/users/{name}/disable"),
        ("put", "/v1/users/{name}/password"),
    }
    assert named <= with_body
    for method, path in sorted(with_body):
        answers = document["paths"][path][method]["responses"]
        assert {"400", "413"} <= set(answers), (method, path, sorted(answers))
        assert answers["413"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorBody"
        }, (method, path)


# == numbers are numbers ===================================================================
@pytest.mark.parametrize("priority", [True, False, "7", 7.0, "high", None])
def test_a_start_refuses_a_priority_that_is_not_a_whole_number(
    site: dict[str, Any], priority: Any
) -> None:
    api = Api(site["base"], site["ops"])
    assert api.post("/v1/definitions", content=ASK.encode()).status_code in (200, 201)
    body = {"workflow": "ask_walls", "run_id": "r-prio", "priority": priority}
    answer = api.post("/v1/runs", json=body)
    assert answer.status_code == 422, (priority, answer.status_code, answer.text)
    assert answer.json()["error"]["code"] == "invalid_request"
    assert api.get("/v1/runs/r-prio").status_code == 404
    refused_version = api.post("/v1/runs", json={"workflow": "ask_walls", "version": True})
    assert refused_version.status_code == 422
    started = api.post("/v1/runs", json={**body, "priority": 7})
    assert started.status_code == 201, started.text
    assert site["engine"].get("r-prio", tenant="acme").priority == 7


# == the approval page's form comes from this site =========================================
def test_the_approval_pages_post_from_another_origin_records_nothing(
    site: dict[str, Any],
) -> None:
    path = _approval_path(site)
    anonymous = Api(site["base"], None)
    page = anonymous.get(path)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    form = {"csrf": csrf.group(1), "comment": "from elsewhere"}
    for headers in (
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": site["base"].replace("127.0.0.1", "localhost")},
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
    ):
        refused = anonymous.post(path, data=form, headers=headers)
        assert refused.status_code == 403, headers
        assert "Not recorded" in refused.text
    engine = site["engine"]
    assert engine.approvals(tenant="acme")[0].status == "pending"
    # The page's own form: its no-referrer policy makes a browser send the origin as "null",
    # with Sec-Fetch-Site saying the form came from this site.
    decided = anonymous.post(
        path, data=form, headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"}
    )
    assert decided.status_code == 200, decided.text
    assert engine.approvals(tenant="acme", status=None)[0].status == "approved"
