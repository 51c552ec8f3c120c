"""Console users over HTTP (`/v1/users...`) and the remote client's user calls, on both
stores: the same answers and refusals as the embedded engine's calls, admin only,
another tenant's users not found, hostile fields refused, and a password set over the
API is the one the console's sign-in takes."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from waypost.model import operations as ops

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)

PASSWORD = "correct horse battery"


@pytest.fixture
def site(make_engine: Any, serve: Any) -> Any:
    engine = make_engine()
    base = serve(engine)
    admin_key = make_key(engine, "acme", "ann", "admin")
    with (
        wp.Client(base, admin_key) as admin,
        wp.Client(base, make_key(engine, "acme", "olga", "operator")) as operator,
        wp.Client(base, make_key(engine, "globex", "gus", "admin")) as outsider,
        Api(base, admin_key) as api,
    ):
        yield engine, admin, operator, outsider, api


def _signs_in(engine: wp.Engine, user: str, password: str) -> bool:
    request = ops.SignIn(tenant="acme", user=user, password=password)
    try:
        engine.execute(request, engine.aio.local("acme"))
    except wp.WaypostError:
        return False
    return True


def test_an_admin_manages_users_remotely_as_embedded(site: Any) -> None:
    engine, admin, operator, outsider, _ = site
    made = admin.create_user("rita", ["operator", "viewer"], PASSWORD)
    assert (made.tenant, made.name, made.created_by) == ("acme", "rita", "ann")
    assert set(made.roles) == {wp.Role.OPERATOR, wp.Role.VIEWER}
    listed = admin.list_users()
    assert listed == engine.list_users(tenant="acme")
    assert [u.name for u in listed] == ["rita"]
    assert _signs_in(engine, "rita", PASSWORD)
    admin.set_password("rita", "another long secret")
    assert not _signs_in(engine, "rita", PASSWORD)
    assert _signs_in(engine, "rita", "another long secret")
    admin.disable_user("rita", "left the company")
    (rita,) = admin.list_users()
    assert rita.disabled and rita.disabled_by == "ann"
    assert not _signs_in(engine, "rita", "another long secret")
    # The same refusals as the embedded calls.
    with pytest.raises(wp.UserExists):
        admin.create_user("rita", ["viewer"], PASSWORD)
    with pytest.raises(wp.UserExists):
        engine.create_user("rita", ["viewer"], PASSWORD, tenant="acme")
    with pytest.raises(wp.UserNotFound):
        admin.disable_user("nobody")
    with pytest.raises(wp.UserNotFound):
        engine.disable_user("nobody", tenant="acme")


def test_only_admins_and_only_their_tenant(site: Any) -> None:
    engine, admin, operator, outsider, _ = site
    admin.create_user("rita", ["viewer"], PASSWORD)
    with pytest.raises(wp.PermissionDenied):
        operator.create_user("olive", ["admin"], PASSWORD)
    with pytest.raises(wp.PermissionDenied):
        operator.list_users()
    with pytest.raises(wp.PermissionDenied):
        operator.set_password("rita", "taken over by olga")
    # globex's admin does not see acme's users and cannot touch them.
    assert outsider.list_users() == []
    with pytest.raises(wp.UserNotFound):
        outsider.set_password("rita", "taken over by gus")
    with pytest.raises(wp.UserNotFound):
        outsider.disable_user("rita")
    assert _signs_in(engine, "rita", PASSWORD)
    assert [u.name for u in engine.list_users(tenant="acme")] == ["rita"]


@pytest.mark.parametrize(
    "body",
    [
        {"name": "", "roles": ["viewer"], "password": PASSWORD},
        {"name": "x" * 5_000, "roles": ["viewer"], "password": PASSWORD},
        {"name": "a\x00b", "roles": ["viewer"], "password": PASSWORD},
        {"name": "a\u202eb", "roles": ["viewer"], "password": PASSWORD},
        {"name": "rita", "roles": "admin", "password": PASSWORD},
        {"name": "rita", "roles": ["root"], "password": PASSWORD},
        {"name": "rita", "roles": [["admin"]], "password": PASSWORD},
        {"name": "rita", "roles": ["viewer"], "password": "short"},
        {"name": "rita", "roles": ["viewer"], "password": "p" * 1_000_000},
        {"name": "rita", "roles": ["viewer"], "password": 12345678},
        {"name": "rita", "roles": ["viewer"]},
        {"name": "rita", "roles": ["viewer"], "password": PASSWORD, "admin": True},
        {"name": {"a": [1]}, "roles": ["viewer"], "password": PASSWORD},
    ],
    ids=lambda body: repr(body)[:40],
)
def test_hostile_user_fields_are_refused_and_write_nothing(site: Any, body: Any) -> None:
    engine, admin, operator, outsider, api = site
    answer = api.post("/v1/users", json=body)
    assert answer.status_code in (400, 413, 422), answer.text[:300]
    error = answer.json()["error"]
    assert error["message"] and len(error["message"]) < 2_000
    assert PASSWORD not in answer.text
    assert engine.list_users(tenant="acme") == []


def test_no_answer_holds_a_password_or_its_hash(site: Any) -> None:
    engine, admin, operator, outsider, api = site
    made = api.post("/v1/users", json={"name": "rita", "roles": ["viewer"], "password": PASSWORD})
    assert made.status_code == 201, made.text
    listed = api.get("/v1/users")
    for answer in (made, listed):
        assert PASSWORD not in answer.text and "argon2" not in answer.text
    answer = api.put("/v1/users/rita/password", json={"password": "short"})
    assert answer.status_code == 422 and "short" not in answer.json()["error"]["message"]
