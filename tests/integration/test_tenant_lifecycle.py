"""A tenant disabled, enabled and deleted, on both stores: a disabled tenant's keys,
console sessions and approval links are refused at once (403 `tenant_disabled`) and its
runs' work is not claimed; enabling lets them go on; deleting removes every row of it,
a batch at a time, and never one of another tenant.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, pg_connect
from tests.helpers.definitions import ask_ann
from tests.helpers.webhooks import signed_headers
from waypost.features.senders import FileSender
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role
from waypost.store.tenants import TENANT_TABLES

from .console_fixtures import Browser
from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(180)

PASSWORD = "correct horse battery"

ASK = ask_ann("ask_tl")


@wp.activity()
async def stamp_tl(ctx: wp.ActivityContext, n: int) -> int:
    return n + 1


@wp.workflow(name="steps_tl")
async def steps(ctx: wp.WorkflowContext, n: int) -> int:
    return int(await ctx.run(stamp_tl, n))


@wp.workflow(name="naps_tl")
async def naps(ctx: wp.WorkflowContext, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"


@wp.workflow(name="waits_tl")
async def waits(ctx: wp.WorkflowContext) -> str:
    got = await ctx.wait_signal("go")
    return str(got)


@wp.workflow(name="paid_tl")
async def paid(ctx: wp.WorkflowContext, order_id: str) -> Any:
    return await ctx.wait_signal("paid", 3600, correlate=("order", order_id))


def _error_code(answer: Any) -> str:
    code: str = answer.json()["error"]["code"]
    return code


# == disabled: keys, sessions and links refused at once =====================================
@pytest.fixture
def site(make_engine: Any, serve: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    notes = tmp_path / "notes.jsonl"
    engine = make_engine(waits, paid, notifier=FileSender(notes))
    with engine.running():
        base = serve(engine)
        keys = {
            "acme": make_key(engine, "acme", "olga", "operator", "starter"),
            "globex": make_key(engine, "globex", "gus", "operator", "starter"),
        }
        engine.create_user("rita", ["operator"], PASSWORD, tenant="acme")
        yield {"engine": engine, "base": base, "notes": notes, **keys}


def test_a_disabled_tenants_keys_sessions_and_links_are_refused_at_once(
    site: dict[str, Any],
) -> None:
    engine, base = site["engine"], site["base"]
    acme, globex = Api(base, site["acme"]), Api(base, site["globex"])
    assert acme.post("/v1/definitions", content=ASK.encode()).status_code == 201
    assert acme.post("/v1/runs", json={"workflow": "ask_tl", "run_id": "r-ask"}).status_code == 201
    link = eventually(lambda: site["notes"].exists() and site["notes"].read_text(), "a link")
    path = "/approve/" + json.loads(link.splitlines()[0])["approve_url"].rpartition("/approve/")[2]
    rita, keyed = Browser(base), Browser(base)
    assert rita.sign_in_password("acme", "rita", PASSWORD).status_code == 303
    assert keyed.sign_in_key(site["acme"]).status_code == 303
    form_token = rita.csrf("/runs")

    info = engine.disable_tenant("acme", reason="unpaid")
    assert info.disabled and info.disabled_by

    for answer in (
        acme.get("/v1/runs"),
        acme.get("/v1/runs/r-ask"),
        acme.post("/v1/runs", json={"workflow": "ask_tl", "run_id": "r-new"}),
        acme.get("/v1/tenant"),
    ):
        assert answer.status_code == 403, answer.text
        assert _error_code(answer) == "tenant_disabled"
    for browser in (rita, keyed):
        page = browser.get("/runs")
        assert page.status_code == 403
        assert "disabled" in page.text
    posted = rita.http.post(
        "/runs/r-ask/commands/terminate", data={"csrf": form_token, "reason": "x"}
    )
    assert posted.status_code == 403
    assert Browser(base).sign_in_key(site["acme"]).status_code == 403
    assert Browser(base).sign_in_password("acme", "rita", PASSWORD).status_code == 403
    # A wrong password learns nothing new: the one refusal.
    assert Browser(base).sign_in_password("acme", "rita", "wrong password!").status_code == 401
    anonymous = Api(base, None)
    assert anonymous.get(path).status_code == 403
    assert engine.approvals(tenant="acme")[0].status == "pending"
    # Another tenant is not touched.
    assert globex.get("/v1/runs").status_code == 200
    assert (
        globex.post("/v1/runs", json={"workflow": "waits_tl", "run_id": "g-1"}).status_code == 201
    )

    engine.enable_tenant("acme")
    assert acme.get("/v1/runs/r-ask").status_code == 200
    assert rita.get("/runs").status_code == 200  # the same session works again
    assert anonymous.get(path).status_code == 200
    assert not engine.list_tenants()[0].disabled


def test_a_disabled_tenants_webhook_sources_deliver_nothing(site: dict[str, Any]) -> None:
    engine = site["engine"]
    made = engine.create_webhook_source(
        "acme-pay", signal="paid", key="order", path="order", tenant="acme"
    )
    engine.start(paid, "o-1", tenant="acme", run_id="r-paid")
    eventually(lambda: engine.get("r-paid", tenant="acme").waiting_for, "r-paid to wait")
    body = json.dumps({"order": "o-1"}).encode()
    anonymous = Api(site["base"], None)
    engine.disable_tenant("acme")
    refused = anonymous.post(
        f"/v1/webhooks/{made.url_id}",
        content=body,
        headers=signed_headers(made.secret, "d-1", body),
    )
    assert refused.status_code == 401  # the one answer of an unknown source
    assert not [e for e in engine.history("r-paid", tenant="acme") if e.type == "SignalReceived"]
    engine.enable_tenant("acme")
    delivered = anonymous.post(
        f"/v1/webhooks/{made.url_id}",
        content=body,
        headers=signed_headers(made.secret, "d-2", body),
    )
    assert delivered.status_code == 200, delivered.text
    assert engine.result("r-paid", tenant="acme", timeout=30) == {"order": "o-1"}


def test_only_the_platform_operator_changes_a_tenants_state(site: dict[str, Any]) -> None:
    engine = site["engine"].aio
    admin = Principal("acme", "root", frozenset({Role.ADMIN}), local=False)
    for request in (
        ops.DisableTenant(tenant="acme"),
        ops.EnableTenant(tenant="acme"),
        ops.DeleteTenant(tenant="acme"),
    ):
        with pytest.raises(wp.PermissionDenied, match="only the platform operator"):
            site["engine"].execute(request, admin)
    assert not any(t.disabled for t in site["engine"].list_tenants())
    with pytest.raises(wp.TenantNotFound):
        site["engine"].disable_tenant("nobody")
    assert engine is not None


# == disabled: its runs' work is not claimed ===============================================
def test_a_disabled_tenants_tasks_and_timers_are_not_claimed_until_it_is_enabled(
    make_engine: Any,
) -> None:
    engine = make_engine(steps, stamp_tl, naps)
    for tenant in ("acme", "globex"):
        engine.create_tenant(tenant)
    # A timer of acme's due before globex's, and work of acme's ready before globex's.
    with engine.running():
        engine.start(naps, 1.0, tenant="acme", run_id="a-nap")
        eventually(
            lambda: engine.get("a-nap", tenant="acme").status.value == "waiting", "a-nap to wait"
        )
    engine.start(steps, 1, tenant="acme", run_id="a-steps")
    engine.disable_tenant("acme")
    a_nap = [e.type for e in engine.history("a-nap", tenant="acme")]
    a_steps = [e.type for e in engine.history("a-steps", tenant="acme")]
    with engine.running():
        engine.start(naps, 1.5, tenant="globex", run_id="g-nap")
        engine.start(steps, 1, tenant="globex", run_id="g-steps")
        # globex's later timer fires and its work is done: acme's would have been claimed too.
        assert engine.result("g-nap", tenant="globex", timeout=30) == "woke"
        assert engine.result("g-steps", tenant="globex", timeout=30) == 2
        assert [e.type for e in engine.history("a-nap", tenant="acme")] == a_nap
        assert [e.type for e in engine.history("a-steps", tenant="acme")] == a_steps
        engine.enable_tenant("acme")
        assert engine.result("a-nap", tenant="acme", timeout=30) == "woke"
        assert engine.result("a-steps", tenant="acme", timeout=30) == 2


# == deleted: every row of it, none of another's ===========================================
def _tenant_tables(db_url: str) -> set[str]:
    """Every table of the schema with a `tenant` column."""
    if db_url.startswith("sqlite:///"):
        tables = [
            r[0] for r in db_query(db_url, "SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        try:
            return {
                t
                for t in tables
                if any(c[1] == "tenant" for c in conn.execute(f"PRAGMA table_info({t})"))
            }
        finally:
            conn.close()
    with pg_connect(db_url) as pg:
        rows = pg.execute(
            "SELECT table_name FROM information_schema.columns "
            "WHERE table_schema = 'waypost' AND column_name = 'tenant'"
        ).fetchall()
    return {r[0] for r in rows}


def _counts(db_url: str, tenant: str) -> dict[str, int]:
    counts = {}
    for table in sorted(_tenant_tables(db_url)):
        [(n,)] = db_query(db_url, f"SELECT count(*) FROM {table} WHERE tenant = ?", (tenant,))
        if n:
            counts[table] = n
    return counts


def _fill(engine: Any, tenant: str) -> None:
    """Rows of `tenant` in as many tables as a tenant can have them."""
    engine.create_tenant(tenant)
    make_key(engine, tenant, "olga", "operator")
    engine.create_user("rita", ["operator"], PASSWORD, tenant=tenant)
    engine.execute(
        ops.SignIn(tenant=tenant, user="rita", password=PASSWORD, address="198.51.100.1"),
        Principal.anonymous(),
    )  # a session
    with pytest.raises(wp.WaypostError):
        engine.execute(
            ops.SignIn(
                tenant=tenant, user="rita", password="not it at all", address="198.51.100.2"
            ),
            Principal.anonymous(),
        )  # sign-in attempts
    engine.publish(ASK, tenant=tenant)
    engine.add_to_group("managers", "ann", tenant=tenant)
    engine.configure_queue("payments", concurrency=2, tenant=tenant)
    engine.create_webhook_source(f"hook-{tenant}", signal="go", key="k", path="id", tenant=tenant)
    engine.schedule("waits_tl", id="nightly", every=86400, tenant=tenant)
    with engine.running():
        engine.start("ask_tl", tenant=tenant, run_id="ask-1")
        for n in range(12):
            engine.start(waits, tenant=tenant, run_id=f"w-{n}")
        engine.start(naps, 3600.0, tenant=tenant, run_id="nap")
        eventually(
            lambda: engine.get("nap", tenant=tenant).status.value == "waiting", "the nap to wait"
        )
        eventually(lambda: engine.approvals(tenant=tenant), "the approval")
        engine.signal("w-0", "go", "x", tenant=tenant)
        assert engine.result("w-0", tenant=tenant, timeout=30) == "x"
    engine.purge_runs(0, tenant=tenant)


def test_a_deleted_tenant_leaves_no_row_and_another_tenant_keeps_all_of_its(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(waits, naps)
    _fill(engine, "acme")
    _fill(engine, "globex")
    before = _counts(db_url, "acme")
    theirs = _counts(db_url, "globex")
    assert {"runs", "events", "tasks", "timers", "approvals", "api_keys", "users"} <= set(before)
    assert {"console_sessions", "sign_in_attempts", "schedules", "definitions"} <= set(before)

    with pytest.raises(wp.TenantNotDisabled, match="disable it first"):
        engine.delete_tenant("acme")
    assert _counts(db_url, "acme") == before  # nothing deleted

    engine.disable_tenant("acme")
    batches, total = 0, 0
    while True:
        done = engine.delete_tenant("acme", batch=25)
        batches += 1
        total += done.rows
        assert done.rows <= 25
        if done.done:
            break
    assert batches > 2
    assert total == sum(before.values())
    assert _counts(db_url, "acme") == {}
    assert "acme" not in {t.tenant for t in engine.list_tenants()}
    assert _counts(db_url, "globex") == theirs
    with pytest.raises(wp.TenantNotFound):
        engine.delete_tenant("acme")
    with pytest.raises(wp.RunNotFound):
        engine.get("w-1", tenant="acme")
    assert engine.get("w-1", tenant="globex").status.value == "waiting"


def test_deletion_knows_every_table_that_holds_a_tenants_rows(
    db_url: str, make_engine: Any
) -> None:
    make_engine().list_tenants()  # the schema, made when the engine opens
    assert _tenant_tables(db_url) == set(TENANT_TABLES) | {"tenants"}
