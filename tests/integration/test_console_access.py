"""The console's sign-in, sessions, CSRF and roles, over a real socket, on both stores.

A browser-like httpx client (console_fixtures.py) keeps the cookies and posts forms
with the page's CSRF token, as a browser does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import waypost as wp

from .console_fixtures import Browser
from .server_fixtures import make_key, serve

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
        keys = {
            "admin": make_key(engine, "acme", "root", "admin"),
            "ops": make_key(engine, "acme", "olga", "operator"),
            "viewer": make_key(engine, "acme", "vic", "viewer"),
            "other": make_key(engine, "globex", "gus", "admin"),
        }
        engine.create_user("rita", ["operator"], PASSWORD, tenant="acme")
        engine.create_user("vera", ["viewer"], PASSWORD, tenant="acme")
        yield {"engine": engine, "base": base, **keys}


def browser(site: dict[str, Any]) -> Browser:
    return Browser(site["base"])


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
    b = browser(site)
    b.sign_in_password("acme", "rita", PASSWORD)
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
