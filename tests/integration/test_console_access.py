"""The console's sign-in, sessions, CSRF and roles, over a real socket, on both stores.

A browser-like httpx client (console_fixtures.py) keeps the cookies and posts forms
with the page's CSRF token, as a browser does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from waypost.features import users as users_feature

from .console_fixtures import Browser
from .server_fixtures import make_key, make_keys, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)

PASSWORD = "correct horse battery"


@wp.workflow(name="waits_console")
async def waits(ctx: wp.WorkflowContext, n: int) -> int:
    await ctx.wait_signal("go")
    return n


@pytest.fixture
def site(make_engine: Any, serve: Any) -> Iterator[dict[str, Any]]:
    engine = make_engine(waits)
    with engine.running():
        base = serve(engine)
        keys = make_keys(engine, "admin", "ops", "viewer", "other")
        engine.create_user("rita", ["operator"], PASSWORD, tenant="acme")
        engine.create_user("vera", ["viewer"], PASSWORD, tenant="acme")
        yield {"engine": engine, "base": base, **keys}


def browser(site: dict[str, Any]) -> Browser:
    return Browser(site["base"])


def signed_in(site: dict[str, Any], user: str) -> Browser:
    """A browser signed in as `user` of tenant acme, with the password."""
    b = browser(site)
    b.sign_in_password("acme", user, PASSWORD)
    return b


def test_sign_in_with_a_key_opens_the_runs_page(site: dict[str, Any]) -> None:
    b = browser(site)
    assert b.get("/runs").status_code == 303  # signed out: sent to sign in
    answer = b.sign_in_key(site["ops"])
    assert answer.status_code == 303
    assert answer.headers["location"] == "/runs"
    page = b.get("/runs")
    assert page.status_code == 200
    assert "olga" in page.text


def test_sign_in_with_a_password_and_the_cookie_flags(site: dict[str, Any]) -> None:
    b = browser(site)
    answer = b.sign_in_password("acme", "Rita", PASSWORD)  # names in their normal form
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"].lower()
    assert "waypost_session=" in cookie
    assert "httponly" in cookie
    assert "samesite=lax" in cookie
    assert "max-age=" in cookie
    assert "secure" not in cookie  # plain http here; https sets Secure
    assert "rita" in b.get("/runs").text


def test_a_wrong_password_and_an_unknown_user_get_one_message(site: dict[str, Any]) -> None:
    b = browser(site)
    wrong = b.sign_in_password("acme", "rita", "not the password")
    unknown = b.sign_in_password("acme", "nobody", PASSWORD)
    other_tenant = b.sign_in_password("globex", "rita", PASSWORD)
    bad_key = b.sign_in_key("wpk_" + "0" * 16 + "_" + "0" * 64)
    texts = {r.status_code for r in (wrong, unknown, other_tenant, bad_key)}
    assert texts == {401}
    message = "Sign-in refused: the tenant, user name, password or API key is not right"
    for r in (wrong, unknown, other_tenant, bad_key):
        assert message in r.text
        assert "waypost_session" not in r.headers.get("set-cookie", "")


def test_an_operator_terminates_a_run_with_a_reason(site: dict[str, Any]) -> None:
    engine = site["engine"]
    run = engine.start(waits, 1, tenant="acme", run_id="r-term")
    b = signed_in(site, "rita")
    page = b.get("/runs/r-term")
    assert page.status_code == 200
    assert "signal go" in page.text  # what it waits for
    done = b.post_form(
        "/runs/r-term/commands/terminate", {"reason": "bad order"}, page="/runs/r-term"
    )
    assert done.status_code == 200, done.text[:2000]
    assert "Terminate: done." in done.text
    last = engine.history(run.run_id, tenant="acme")[-1]
    assert last.type == "RunTerminated"
    assert last.data["reason"] == "bad order"
    assert "terminated" in b.get("/runs/r-term").text
    assert b.get("/suspended").status_code == 200


def _cookie(b: Browser) -> str:
    value = b.http.cookies.get("waypost_session")
    assert value
    return str(value)


def _with_cookie(site: dict[str, Any], cookie: str) -> Browser:
    other = browser(site)
    other.http.cookies.set("waypost_session", cookie, domain="127.0.0.1")
    return other


def test_sign_out_ends_the_session_even_for_a_copied_cookie(site: dict[str, Any]) -> None:
    b = signed_in(site, "rita")
    copied = _with_cookie(site, _cookie(b))
    assert copied.get("/runs").status_code == 200
    out = b.post_form("/sign-out", {})
    assert out.status_code == 303
    assert b.get("/runs").status_code == 303
    assert copied.get("/runs").status_code == 303  # ended server-side, not just forgotten


def test_disabling_a_user_or_revoking_a_key_ends_their_sessions(site: dict[str, Any]) -> None:
    engine = site["engine"]
    user, by_key = browser(site), browser(site)
    user.sign_in_password("acme", "vera", PASSWORD)
    by_key.sign_in_key(site["viewer"])
    assert user.get("/runs").status_code == 200
    assert by_key.get("/runs").status_code == 200
    engine.disable_user("vera", "left", tenant="acme")
    key_id = next(k.key_id for k in engine.list_keys(tenant="acme") if k.principal == "vic")
    engine.revoke_key(key_id, tenant="acme")
    assert user.get("/runs").status_code == 303
    assert by_key.get("/runs").status_code == 303
    assert browser(site).sign_in_password("acme", "vera", PASSWORD).status_code == 401
    assert browser(site).sign_in_key(site["viewer"]).status_code == 401


def test_a_new_password_ends_the_old_sessions(site: dict[str, Any]) -> None:
    b = signed_in(site, "rita")
    site["engine"].set_password("rita", "another long password", tenant="acme")
    assert b.get("/runs").status_code == 303
    assert browser(site).sign_in_password("acme", "rita", PASSWORD).status_code == 401
    assert (
        browser(site).sign_in_password("acme", "rita", "another long password").status_code == 303
    )


def test_a_forged_or_tampered_cookie_is_not_a_session(site: dict[str, Any]) -> None:
    b = signed_in(site, "rita")
    token, _, mac = _cookie(b).rpartition(".")
    for forged in (f"{token}.{'A' * len(mac)}", f"x{token}.{mac}", token, "", "." * 300):
        assert _with_cookie(site, forged).get("/runs").status_code == 303, forged


def test_repeated_failures_hold_the_user_back(site: dict[str, Any]) -> None:
    b = browser(site)
    for _ in range(5):
        assert b.sign_in_password("acme", "rita", "wrong password!").status_code == 401
    held = b.sign_in_password("acme", "rita", PASSWORD)  # the right one, too soon
    assert held.status_code == 401
    assert "Sign-in refused" in held.text
    assert browser(site).sign_in_password("acme", "vera", PASSWORD).status_code == 303


def test_the_sign_in_form_needs_its_own_token_and_origin(site: dict[str, Any]) -> None:
    b = browser(site)
    token = b.csrf("/sign-in")
    form = {"tenant": "acme", "user": "rita", "password": PASSWORD}
    assert b.post("/sign-in", data=form).status_code == 403
    assert b.post("/sign-in", data={**form, "csrf": "forged"}).status_code == 403
    cross = b.post(
        "/sign-in", data={**form, "csrf": token}, headers={"Origin": "https://evil.example"}
    )
    assert cross.status_code == 403
    assert "waypost_session" not in cross.headers.get("set-cookie", "")
    # Each refusal sets a new form token; the page's latest one signs in.
    assert b.post("/sign-in", data={**form, "csrf": b.csrf("/sign-in")}).status_code == 303


def test_the_next_page_after_sign_in_is_never_another_site(site: dict[str, Any]) -> None:
    b = browser(site)
    for target in ("//evil.example/x", "https://evil.example", "/\\evil.example", "javascript:x"):
        form = {"csrf": b.csrf("/sign-in"), "key": site["ops"], "next": target}
        answer = b.post("/sign-in", data=form)
        assert answer.headers["location"] == "/runs", target
    form = {"csrf": b.csrf("/sign-in"), "key": site["ops"], "next": "/suspended"}
    answer = b.post("/sign-in", data=form)
    assert answer.headers["location"] == "/suspended"


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"tenant": "", "user": "", "password": ""},
        {"tenant": "acme", "user": "rita" * 10_000, "password": PASSWORD},
        {"tenant": "acme\x00", "user": "rita", "password": PASSWORD},
        {"tenant": "acme", "user": "ri\u202eta", "password": PASSWORD},
        {"tenant": "acme", "user": "rita", "password": PASSWORD * 1000},
        {"tenant": "acme", "user": "rita", "password": PASSWORD, "key": "wpk_x"},
        {"key": "wpk_" + "g" * 200},
        {"key": "\x00" * 50},
    ],
)
def test_hostile_sign_in_fields_get_the_one_refusal(
    site: dict[str, Any], fields: dict[str, str]
) -> None:
    b = browser(site)
    answer = b.post("/sign-in", data={"csrf": b.csrf("/sign-in"), **fields})
    assert answer.status_code == 401
    assert "Sign-in refused" in answer.text
    assert "waypost_session" not in answer.headers.get("set-cookie", "")


def test_sign_in_bytes_that_are_not_utf8_are_refused_cleanly(site: dict[str, Any]) -> None:
    b = browser(site)
    token = b.csrf("/sign-in")
    body = b"csrf=" + token.encode() + b"&tenant=acme&user=r%FF%FEita&password=" + b"\xff" * 20
    answer = b.post(
        "/sign-in", content=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert answer.status_code in (400, 401)
    assert "waypost_session" not in answer.headers.get("set-cookie", "")


# == CSRF, roles and tenants on the operator commands ======================================
def _terminate(b: Browser, run_id: str, **extra: Any) -> Any:
    data = {"reason": "stop it", **extra}
    return b.http.post(f"/runs/{run_id}/commands/terminate", data=data)


def test_a_command_without_the_right_csrf_token_does_nothing(site: dict[str, Any]) -> None:
    engine = site["engine"]
    engine.start(waits, 2, tenant="acme", run_id="r-csrf")
    rita, other = browser(site), browser(site)
    rita.sign_in_password("acme", "rita", PASSWORD)
    other.sign_in_key(site["ops"])
    others_token = other.csrf("/runs")
    before = len(engine.history("r-csrf", tenant="acme"))
    assert _terminate(rita, "r-csrf").status_code == 403  # none
    assert _terminate(rita, "r-csrf", csrf="x" * 43).status_code == 403  # wrong
    assert _terminate(rita, "r-csrf", csrf=others_token).status_code == 403  # another session's
    cross = _terminate(rita, "r-csrf", csrf=rita.csrf("/runs"))
    assert cross.status_code == 200  # the right one does it ...
    engine.start(waits, 3, tenant="acme", run_id="r-csrf2")
    forged_origin = rita.http.post(
        "/runs/r-csrf2/commands/terminate",
        data={"reason": "x", "csrf": rita.csrf("/runs")},
        headers={"Origin": "https://evil.example"},
    )
    assert forged_origin.status_code == 403  # ... but not from another site
    assert len(engine.history("r-csrf", tenant="acme")) == before + 1
    # Not terminated: it goes on to wait (its first step may not have landed yet).
    eventually(
        lambda: engine.get("r-csrf2", tenant="acme").status.value == "waiting", "r-csrf2 to wait"
    )


def test_a_viewer_sees_no_commands_and_is_refused_them(site: dict[str, Any]) -> None:
    engine = site["engine"]
    engine.start(waits, 4, tenant="acme", run_id="r-view")
    b = signed_in(site, "vera")
    page = b.get("/runs/r-view")
    assert page.status_code == 200
    assert "/commands/terminate" not in page.text
    refused = _terminate(b, "r-view", csrf=b.csrf("/runs"))
    assert refused.status_code == 403
    assert "needs one of the roles" in refused.text
    assert engine.get("r-view", tenant="acme").status.value == "waiting"


def test_another_tenants_run_is_not_found(site: dict[str, Any]) -> None:
    engine = site["engine"]
    engine.start(waits, 5, tenant="acme", run_id="r-acme")
    gus = browser(site)
    gus.sign_in_key(site["other"])  # an admin, of globex
    assert gus.get("/runs/r-acme").status_code == 404
    assert 'href="/runs/r-acme"' not in gus.get("/runs").text
    assert 'href="/runs/r-acme"' not in gus.get("/runs?q=r-acme").text
    refused = _terminate(gus, "r-acme", csrf=gus.csrf("/runs"))
    assert refused.status_code == 404
    assert engine.get("r-acme", tenant="acme").status.value == "waiting"


def test_a_post_after_the_session_ended_does_nothing(site: dict[str, Any]) -> None:
    engine = site["engine"]
    engine.start(waits, 6, tenant="acme", run_id="r-late")
    b = signed_in(site, "rita")
    token = b.csrf("/runs")
    engine.disable_user("rita", tenant="acme")
    answer = _terminate(b, "r-late", csrf=token)
    assert answer.status_code == 401
    assert engine.get("r-late", tenant="acme").status.value == "waiting"


def test_sign_in_attempts_are_logged_without_the_secret(
    site: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="waypost.console.access")
    browser(site).sign_in_password("acme", "rita", "the wrong one!")
    browser(site).sign_in_password("acme", "rita", PASSWORD)
    browser(site).sign_in_key(site["viewer"])
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "sign-in refused: user 'rita' of tenant 'acme' from 127.0.0.1" in text
    assert "rita of acme signed in (password)" in text
    assert "vic of acme signed in (key)" in text
    assert "the wrong one!" not in text
    assert PASSWORD not in text
    assert site["viewer"].rsplit("_", 1)[1] not in text  # the key's secret part


def test_too_many_failures_from_one_address_are_refused_before_any_check(
    site: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(users_feature, "ADDRESS_FAILURES", 3)
    b = browser(site)
    for name in ("nobody", "noone", "nemo"):
        assert b.sign_in_password("acme", name, PASSWORD).status_code == 401
    # from this address even a right password is refused now, whoever's it is
    assert b.sign_in_password("acme", "vera", PASSWORD).status_code == 401
    assert b.sign_in_key(site["ops"]).status_code == 401


def test_a_principal_without_a_reading_role_is_told_so(site: dict[str, Any]) -> None:
    engine = site["engine"]
    approver = make_key(engine, "acme", "ann", "approver")
    b = browser(site)
    b.sign_in_key(approver)
    page = b.get("/runs")
    assert page.status_code == 403
    assert "needs one of the roles" in page.text
    assert b.get("/suspended").status_code == 403
