"""Tenants and API keys on both stores: a key authenticates as its principal and nothing
else does; keys are tenant-walled, admin-made, and their secrets are stored nowhere."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, db_write
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role
from waypost.testing import TestClock

pytestmark = pytest.mark.timeout(120)


def as_(subject: str, *roles: Role, tenant: str = "acme") -> Principal:
    """A principal as a key would give it: not local."""
    return Principal(tenant, subject, frozenset(roles))


@pytest.fixture
def clock() -> TestClock:
    return TestClock()


@pytest.fixture
def engine(make_engine: Callable[..., wp.Engine], clock: TestClock) -> wp.Engine:
    eng = make_engine(clock=clock)
    eng.create_tenant("acme")
    return eng


def refusal(engine: wp.Engine, key: Any) -> str:
    with pytest.raises(wp.Unauthenticated) as caught:
        engine.authenticate(key)
    return str(caught.value)


# == authenticating ==================================================================
def test_a_key_authenticates_as_its_principal_with_its_roles(engine: wp.Engine) -> None:
    made = engine.create_key("CI-Bot", ["viewer", "operator"], tenant="acme")
    assert made.key.startswith(f"wpk_{made.key_id}_") and made.tenant == "acme"
    assert made.principal == "ci-bot"  # an identity in its normal form
    assert made.roles == (Role.OPERATOR, Role.VIEWER)
    assert made.expires_at is None

    principal = engine.authenticate(made.key)
    assert principal == Principal("acme", "ci-bot", frozenset({Role.OPERATOR, Role.VIEWER}))
    assert not principal.local
    # What the principal may do is what its roles allow, in its own tenant.
    assert engine.execute(ops.ListRuns(), principal) == []
    with pytest.raises(wp.PermissionDenied, match="add to group"):
        engine.execute(ops.AddToGroup(group="managers", members=["eve"]), principal)
    [info] = engine.list_keys(tenant="acme")
    assert info.last_used_at is not None and info.revoked_at is None
    assert info.created_by == engine.aio.local().subject


def test_every_bad_key_is_refused_with_one_and_the_same_message(
    engine: wp.Engine, clock: TestClock, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="waypost")
    good = engine.create_key("bot", ["viewer"], tenant="acme")
    revoked = engine.create_key("bot", ["viewer"], tenant="acme")
    engine.revoke_key(revoked.key_id, tenant="acme")
    soon = datetime.fromtimestamp(clock(), UTC) + timedelta(seconds=60)
    expiring = engine.create_key("bot", ["viewer"], tenant="acme", expires_at=soon)
    engine.create_tenant("gone")
    orphan = engine.create_key("bot", ["viewer"], tenant="gone")
    assert engine.authenticate(expiring.key).tenant == "acme"
    assert engine.authenticate(orphan.key).tenant == "gone"
    db_write(db_url, "DELETE FROM tenants WHERE tenant = ?", ("gone",))
    clock.advance(61)

    key_id, secret = good.key_id, good.key.rsplit("_", 1)[1]
    other_secret = ("0" if secret[0] != "0" else "1") + secret[1:]
    bad: list[Any] = [
        revoked.key,
        expiring.key,
        orphan.key,
        f"wpk_{'0' * 16}_{secret}",  # unknown id, the right shape
        f"wpk_{key_id}_{other_secret}",  # the id of a live key with another secret
        "",
        "wpk_",
        good.key[:-1],
        good.key + "0",
        good.key.upper(),
        good.key.replace("wpk_", "wpx_"),
        " " + good.key[1:],
        good.key[:-1] + "\n",
        good.key[:20] + "\x00" + good.key[21:],
        good.key[:-1] + "\u0660",  # an Arabic-Indic digit zero: a digit, not hex
        good.key[:-1] + "\udcff",  # what an undecodable byte becomes in a str
        "wpk_" + "a" * 1_000_000,
        good.key.encode(),
        None,
        12345,
    ]
    messages = {refusal(engine, key) for key in bad}
    assert len(messages) == 1
    [message] = messages
    assert secret not in message and key_id not in message
    assert engine.authenticate(good.key).subject == "bot"  # the good key still works
    for made in (good, revoked, expiring, orphan):
        assert made.key.rsplit("_", 1)[1] not in caplog.text


def test_expiry_is_judged_by_the_later_of_the_engines_and_the_databases_clock(
    make_engine: Callable[..., wp.Engine],
) -> None:
    lagging = make_engine(clock=TestClock(time.time() - 3600))  # an engine an hour behind
    lagging.create_tenant("acme")
    in_a_minute_for_it = datetime.fromtimestamp(time.time() - 3600 + 60, UTC)
    made = lagging.create_key("bot", ["viewer"], tenant="acme", expires_at=in_a_minute_for_it)
    with pytest.raises(wp.Unauthenticated):
        lagging.authenticate(made.key)


# == walls between tenants and roles =================================================
def test_an_admin_of_another_tenant_can_neither_list_nor_revoke_a_key(
    engine: wp.Engine,
) -> None:
    engine.create_tenant("globex")
    theirs = engine.create_key("bot", ["viewer"], tenant="acme")
    boss = engine.authenticate(engine.create_key("boss", ["admin"], tenant="globex").key)
    assert boss == Principal("globex", "boss", frozenset({Role.ADMIN}))

    assert [k.principal for k in engine.execute(ops.ListKeys(), boss)] == ["boss"]
    with pytest.raises(wp.KeyNotFound) as foreign:
        engine.execute(ops.RevokeKey(key_id=theirs.key_id), boss)
    with pytest.raises(wp.KeyNotFound) as missing:
        engine.execute(ops.RevokeKey(key_id="0" * 16), boss)
    assert str(foreign.value).replace(theirs.key_id, "0" * 16) == str(missing.value)
    assert engine.authenticate(theirs.key).tenant == "acme"  # still alive
    assert [k.revoked_at for k in engine.list_keys(tenant="acme")] == [None]

    # A key made by globex's admin is globex's, whatever it names.
    made = engine.execute(ops.CreateKey(principal="helper", roles=["viewer"]), boss)
    assert made.tenant == "globex" and engine.authenticate(made.key).tenant == "globex"


def test_tenants_are_created_and_listed_by_the_platform_operator_only(
    engine: wp.Engine,
) -> None:
    admin = engine.authenticate(engine.create_key("boss", ["admin"], tenant="acme").key)
    with pytest.raises(wp.PermissionDenied, match="platform operator"):
        engine.execute(ops.CreateTenant(tenant="initech"), admin)
    with pytest.raises(wp.PermissionDenied, match="platform operator"):
        engine.execute(ops.ListTenants(), admin)
    assert [t.tenant for t in engine.list_tenants()] == ["acme"]


@pytest.mark.parametrize("role", [r for r in Role if r is not Role.ADMIN])
def test_only_an_admin_makes_lists_or_revokes_keys(engine: wp.Engine, role: Role) -> None:
    existing = engine.create_key("bot", ["viewer"], tenant="acme")
    caller = as_("mallory", role)
    # Asking for a key with one's own role is no way around it.
    with pytest.raises(wp.PermissionDenied, match=r"create key.*admin"):
        engine.execute(ops.CreateKey(principal="mallory", roles=[role]), caller)
    with pytest.raises(wp.PermissionDenied):
        engine.execute(ops.ListKeys(), caller)
    with pytest.raises(wp.PermissionDenied):
        engine.execute(ops.RevokeKey(key_id=existing.key_id), caller)
    assert [k.key_id for k in engine.list_keys(tenant="acme")] == [existing.key_id]
    assert engine.authenticate(existing.key).subject == "bot"


# == bad requests write nothing ======================================================
@pytest.mark.parametrize(
    ("principal", "roles", "expires_at", "match"),
    [
        ("bot", [], None, "at least one role"),
        ("bot", "admin", None, "list of role names"),
        ("bot", ["root"], None, "unknown role 'root'"),
        ("bot", ["admin", {"a": 1}], None, "unknown role"),
        ("bot", ["viewer"] * 7, None, "roles: 7 given"),
        ("bot", ["viewer"], datetime(2020, 1, 1, tzinfo=UTC), "in the future"),
        ("bot", ["viewer"], datetime(2999, 1, 1), "time zone"),
        ("bot", ["viewer"], "2999-01-01", "time zone"),
        ("", ["viewer"], None, "principal must not be empty"),
        ("b\not", ["viewer"], None, "control or invisible"),
        ("x" * 201, ["viewer"], None, "too long"),
    ],
)
def test_a_bad_key_request_is_refused_and_writes_nothing(
    engine: wp.Engine, principal: Any, roles: Any, expires_at: Any, match: str
) -> None:
    with pytest.raises(wp.InvalidRequest, match=match):
        engine.create_key(principal, roles, expires_at=expires_at, tenant="acme")
    assert engine.list_keys(tenant="acme") == []


def test_keys_need_a_tenant_that_exists(engine: wp.Engine) -> None:
    with pytest.raises(wp.TenantNotFound, match="tenant 'initech' does not exist"):
        engine.create_key("bot", ["viewer"], tenant="initech")
    assert engine.list_keys(tenant="initech") == []


@pytest.mark.parametrize(
    ("tenant", "quotas", "match"),
    [
        ("", None, "must not be empty"),
        ("a\u202eb", None, "control or invisible"),
        ("t" * 201, None, "too long"),
        ("ok", {"runs": -1}, "whole number"),
        ("ok", {"runs": True}, "whole number"),
        ("ok", {"": 1}, "must not be empty"),
        ("ok", ["runs"], "map quota names"),
        ("ok", {f"q{i}": 1 for i in range(51)}, "at most 50"),
    ],
)
def test_a_bad_tenant_is_refused_and_writes_nothing(
    engine: wp.Engine, tenant: str, quotas: Any, match: str
) -> None:
    with pytest.raises(wp.InvalidRequest, match=match):
        engine.create_tenant(tenant, quotas=quotas)
    assert [t.tenant for t in engine.list_tenants()] == ["acme"]


def test_a_tenant_keeps_its_quotas(engine: wp.Engine) -> None:
    made = engine.create_tenant("globex", quotas={"max_runs": 10})
    assert made.quotas == {"max_runs": 10} and made.tenant == "globex"
    listed = {t.tenant: t for t in engine.list_tenants()}
    assert listed["globex"].quotas == {"max_runs": 10}
    assert listed["acme"].quotas == {}


def test_a_duplicate_tenant_is_refused_and_concurrent_duplicates_leave_one_row(
    make_engine: Callable[..., wp.Engine], db_url: str
) -> None:
    first = make_engine()
    first.create_tenant("acme")
    with pytest.raises(wp.TenantExists, match="tenant 'acme' exists already"):
        first.create_tenant("acme")

    engines = [first, make_engine()]
    start = threading.Barrier(8)

    def create(i: int) -> str:
        start.wait()
        try:
            engines[i % 2].create_tenant("initech")
        except wp.TenantExists:
            return "exists"
        return "created"

    with ThreadPoolExecutor(8) as pool:
        outcomes = sorted(pool.map(create, range(8)))
    assert outcomes == ["created"] + ["exists"] * 7
    assert db_query(db_url, "SELECT count(*) FROM tenants WHERE tenant = ?", ("initech",)) == [(1,)]


def test_revoking_again_keeps_the_first_revocation(engine: wp.Engine, clock: TestClock) -> None:
    made = engine.create_key("bot", ["viewer"], tenant="acme")
    engine.revoke_key(made.key_id, tenant="acme")
    [first] = engine.list_keys(tenant="acme")
    clock.advance(100)
    engine.revoke_key(made.key_id, tenant="acme")
    [again] = engine.list_keys(tenant="acme")
    assert again.revoked_at == first.revoked_at is not None
    assert again.revoked_by == engine.aio.local().subject


# == the secret is stored nowhere ====================================================
def _every_row(db_url: str) -> str:
    if db_url.startswith("sqlite:///"):
        tables = [
            r[0] for r in db_query(db_url, "SELECT name FROM sqlite_schema WHERE type='table'")
        ]
    else:
        tables = [
            r[0]
            for r in db_query(db_url, "SELECT tablename FROM pg_tables WHERE schemaname='waypost'")
        ]
    assert {"tenants", "api_keys"} <= set(tables)
    return repr([db_query(db_url, f"SELECT * FROM {t}") for t in tables])


def test_the_secret_is_in_no_row_and_no_repr_but_the_new_keys_key(
    engine: wp.Engine, db_url: str
) -> None:
    made = engine.create_key("bot", ["admin"], tenant="acme")
    secret = made.key.rsplit("_", 1)[1]
    principal = engine.authenticate(made.key)
    engine.revoke_key(made.key_id, tenant="acme")

    rows = _every_row(db_url)
    assert made.key_id in rows  # the search does see the key's row
    assert secret not in rows and secret.upper() not in rows
    stored = hashlib.sha256(bytes.fromhex(secret)).hexdigest()
    assert stored in rows  # what is kept is the hash
    if db_url.startswith("sqlite:///"):
        path = Path(db_url.removeprefix("sqlite:///"))
        for file in path.parent.glob(path.name + "*"):  # the database, its WAL
            data = file.read_bytes()
            assert secret.encode() not in data and bytes.fromhex(secret) not in data

    shown = [made, principal, engine.list_keys(tenant="acme"), engine.list_tenants()]
    for value in shown:
        assert secret not in repr(value) and secret not in str(value)
        assert stored not in repr(value)
    assert made.key.endswith(secret)
