"""Webhook sources are the tenant's: another tenant's ids are neither seen nor taken, a
delivery's URL names an unguessable URL id, sources made before keep working after the
upgrade, and secrets are sealed under the encryption keys (both stores)."""

from __future__ import annotations

import base64
import json
import secrets
import sqlite3
import time
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, pg_connect
from tests.helpers.webhooks import webhook_headers
from waypost.store.sqlfile import load_migrations

pytestmark = pytest.mark.timeout(120)

K1 = secrets.token_bytes(32)


@wp.workflow(name="wt_order")
async def wt_order(ctx: wp.WorkflowContext, order_id: str) -> Any:
    return await ctx.wait_signal("paid", correlate=("order", order_id))


def body_for(order_id: str) -> bytes:
    return json.dumps({"data": {"id": order_id}}).encode()


def make_source(engine: wp.Engine, source: str, tenant: str) -> Any:
    return engine.create_webhook_source(
        source, signal="paid", key="order", path="data.id", tenant=tenant
    )


def waiting(engine: wp.Engine, run_id: str, tenant: str) -> bool:
    return any(w.get("kind") == "signal" for w in engine.get(run_id, tenant=tenant).waiting_for)


def test_two_tenants_each_have_a_source_of_the_same_id(make_engine: Any) -> None:
    engine = make_engine(wt_order)
    with engine.running():
        acme = make_source(engine, "stripe-acme", "acme")
        # Before: "a webhook source 'stripe-acme' exists already" (409), to another tenant.
        globex = make_source(engine, "stripe-acme", "globex")
        assert acme.url_id != globex.url_id
        for made in (acme, globex):
            assert made.url_id.startswith("wh_") and len(made.url_id) == 35
            assert made.url_path == f"/v1/webhooks/{made.url_id}"
            assert made.source not in made.url_id and made.tenant not in made.url_id
        with pytest.raises(wp.WebhookSourceExists) as taken:
            make_source(engine, "stripe-acme", "acme")  # only its own ids are taken
        assert "globex" not in str(taken.value)
        assert [s.source for s in engine.webhook_sources(tenant="globex")] == ["stripe-acme"]

        engine.start(wt_order, "o-1", run_id="a-run", tenant="acme")
        engine.start(wt_order, "o-1", run_id="g-run", tenant="globex")
        eventually(lambda: waiting(engine, "a-run", "acme") and waiting(engine, "g-run", "globex"))
        raw = body_for("o-1")
        # Each URL reaches its own tenant's run only, with its own source's secret.
        with pytest.raises(wp.WebhookRefused):
            engine.deliver_webhook(globex.url_id, webhook_headers(acme.secret, "e1", raw), raw)
        with pytest.raises(wp.WebhookRefused):  # the source's id is no URL
            engine.deliver_webhook("stripe-acme", webhook_headers(acme.secret, "e1", raw), raw)
        got = engine.deliver_webhook(acme.url_id, webhook_headers(acme.secret, "e1", raw), raw)
        assert got.runs == ("a-run",)
        assert engine.result("a-run", timeout=10, tenant="acme") == {"data": {"id": "o-1"}}
        assert waiting(engine, "g-run", "globex")
        # The same delivery id from the other tenant's sender is its own, not a duplicate.
        got = engine.deliver_webhook(globex.url_id, webhook_headers(globex.secret, "e1", raw), raw)
        assert (got.runs, got.duplicate) == (("g-run",), False)

        # A source deleted and made again has a new URL: the old one delivers nothing.
        engine.delete_webhook_source("stripe-acme", tenant="acme")
        again = make_source(engine, "stripe-acme", "acme")
        assert again.url_id != acme.url_id
        with pytest.raises(wp.WebhookRefused):
            engine.deliver_webhook(acme.url_id, webhook_headers(again.secret, "e2", raw), raw)


def _legacy_ddl(dialect: str) -> list[str]:
    """The webhook tables as version 7 made them (ids global, secrets as given)."""
    text = next(m.sql for m in load_migrations(dialect) if m.version == 7)
    start = text.index("CREATE TABLE webhook_sources")
    return [s.strip() for s in text[start:].split(";") if s.strip()]


def _downgrade_webhooks(db_url: str, secret: str) -> None:
    """The database as version 17 left it, with a source and a delivery id of then."""
    dialect = "sqlite" if db_url.startswith("sqlite:///") else "postgres"
    statements = [
        "DROP TABLE webhook_sources",
        "DROP TABLE webhook_deliveries",
        *_legacy_ddl(dialect),
        "ALTER TABLE runs DROP COLUMN history_bytes",
        "ALTER TABLE runs DROP COLUMN unread_signals",
        "ALTER TABLE runs DROP COLUMN signal_names",
        "INSERT INTO webhook_sources (source, tenant, signal, corr_key, corr_path, tolerance,"
        " secret, created_at, created_by) VALUES ('stripe-acme', 'acme', 'paid', 'order',"
        f" 'data.id', 300, '{secret}', 1.0, 'ada')",
        "INSERT INTO webhook_deliveries (source, delivery_id, tenant, received_at, outcome)"
        f" VALUES ('stripe-acme', 'old-1', 'acme', {time.time()}, '{{\"runs\": [\"x\"]}}')",
        "DROP TABLE sign_in_attempts",  # and what version 19 added
        "ALTER TABLE tenants DROP COLUMN disabled_at",
        "ALTER TABLE tenants DROP COLUMN disabled_by",
        "DELETE FROM waypost_migrations WHERE version >= 18",
    ]
    if dialect == "sqlite":
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            for statement in statements:
                conn.execute(statement)
        finally:
            conn.close()
        return
    with pg_connect(db_url, autocommit=True) as pg:
        for statement in statements:
            pg.execute(statement)


def test_a_source_made_before_keeps_its_url_and_its_deliveries_after_the_upgrade(
    make_engine: Any, db_url: str
) -> None:
    make_engine(wt_order).close()  # the database at the newest version
    secret = "whsec_" + base64.b64encode(b"s" * 32).decode()
    _downgrade_webhooks(db_url, secret)
    engine = make_engine(wt_order)  # opening it migrates
    [source] = engine.webhook_sources(tenant="acme")
    assert (source.source, source.url_id, source.url_path) == (
        "stripe-acme",
        "stripe-acme",
        "/v1/webhooks/stripe-acme",
    )
    with engine.running():
        engine.start(wt_order, "o-9", run_id="old-url", tenant="acme")
        eventually(lambda: waiting(engine, "old-url", "acme"))
        raw = body_for("o-9")
        # The delivery id kept before the upgrade is still a duplicate...
        again = engine.deliver_webhook("stripe-acme", webhook_headers(secret, "old-1", raw), raw)
        assert (again.duplicate, again.runs) == (True, ("x",))
        # ...and the sender's URL of then still delivers.
        got = engine.deliver_webhook("stripe-acme", webhook_headers(secret, "new-1", raw), raw)
        assert got.runs == ("old-url",)
        # Now another tenant may have that id too.
        assert make_source(engine, "stripe-acme", "globex").url_id != "stripe-acme"


def test_a_sources_secret_is_sealed_under_the_encryption_keys(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(wt_order, encryption=wp.Keys({"k1": K1}))
    with engine.running():
        made = make_source(engine, "stripe", "acme")
        [(stored,)] = db_query(db_url, "SELECT secret FROM webhook_sources")
        assert stored.startswith("wpe1:k1:")
        assert made.secret not in stored
        assert made.secret.removeprefix("whsec_")[:12] not in stored
        engine.start(wt_order, "o-2", run_id="sealed", tenant="acme")
        eventually(lambda: waiting(engine, "sealed", "acme"))
        raw = body_for("o-2")
        got = engine.deliver_webhook(made.url_id, webhook_headers(made.secret, "e", raw), raw)
        assert got.runs == ("sealed",)


def test_a_sealed_secret_moved_to_another_tenants_source_verifies_nothing(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(wt_order, encryption=wp.Keys({"k1": K1}))
    acme = make_source(engine, "stripe", "acme")
    globex = make_source(engine, "stripe", "globex")
    # A database writer without the key copies acme's sealed secret into globex's row.
    [(sealed,)] = db_query(db_url, "SELECT secret FROM webhook_sources WHERE tenant = 'acme'")
    update = "UPDATE webhook_sources SET secret = ? WHERE tenant = 'globex'"
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        with conn:
            conn.execute(update, (sealed,))
        conn.close()
    else:
        with pg_connect(db_url, autocommit=True) as pg:
            pg.execute(update.replace("?", "%s"), (sealed,))
    raw = body_for("o-3")
    with pytest.raises(wp.WebhookRefused):
        engine.deliver_webhook(globex.url_id, webhook_headers(acme.secret, "e", raw), raw)


def test_secrets_stored_before_encryption_are_sealed_by_reencrypt(
    make_engine: Any, db_url: str
) -> None:
    plain = make_engine(wt_order)
    made = make_source(plain, "stripe", "acme")
    plain.close()
    assert db_query(db_url, "SELECT secret FROM webhook_sources") == [(made.secret,)]
    # Plaintext where a sealed value belongs is read only in the migration mode, while
    # re-encrypt seals it.
    engine = make_engine(wt_order, encryption=wp.Keys({"k1": K1}, accept_plaintext=True))
    dry = engine.reencrypt(dry_run=True, tenant="acme")
    assert (dry.webhook_sources, dry.webhook_secrets_resealed) == (1, 1)
    assert db_query(db_url, "SELECT secret FROM webhook_sources") == [(made.secret,)]
    report = engine.reencrypt(tenant="acme")
    assert (report.webhook_sources, report.webhook_secrets_resealed) == (1, 1)
    [(stored,)] = db_query(db_url, "SELECT secret FROM webhook_sources")
    assert stored.startswith("wpe1:k1:") and made.secret not in stored
    again = engine.reencrypt(tenant="acme")
    assert (again.webhook_sources, again.webhook_secrets_resealed) == (1, 0)
    engine.close()
    engine = make_engine(wt_order, encryption=wp.Keys({"k1": K1}))  # sealed: no mode needed
    with engine.running():
        engine.start(wt_order, "o-4", run_id="resealed", tenant="acme")
        eventually(lambda: waiting(engine, "resealed", "acme"))
        raw = body_for("o-4")
        got = engine.deliver_webhook(made.url_id, webhook_headers(made.secret, "e", raw), raw)
        assert got.runs == ("resealed",)
