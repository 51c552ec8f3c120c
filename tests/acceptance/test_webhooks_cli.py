"""`waypost webhooks` as real processes on a SQLite file."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers.cli import failed, ok, waypost

pytestmark = pytest.mark.timeout(180)


def test_a_source_made_listed_used_and_deleted(tmp_path: Path) -> None:
    assert "no database at" in failed(waypost(tmp_path, "webhooks", "list", "--tenant", "acme"))
    ok(waypost(tmp_path, "db", "migrate"))
    args = ("--signal", "paid", "--key", "order", "--path", "data.id")
    made = ok(waypost(tmp_path, "webhooks", "create", "--tenant", "acme", "stripe", *args))
    secret = made.stdout.strip()
    assert made.stdout == secret + "\n"  # the secret alone: SECRET=$(waypost webhooks create ...)
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    assert "shown this once" in made.stderr and secret not in made.stderr
    again = waypost(tmp_path, "webhooks", "create", "--tenant", "acme", "stripe", *args)
    assert "already" in failed(again)
    # Another tenant's ids are its own: globex makes a "stripe" of its own.
    theirs = ok(waypost(tmp_path, "webhooks", "create", "--tenant", "globex", "stripe", *args))
    assert theirs.stdout.strip() != secret and "acme" not in theirs.stderr
    bad = waypost(tmp_path, "webhooks", "create", "--tenant", "acme", "a b", *args)
    assert "source id" in failed(bad)

    [info] = json.loads(
        ok(waypost(tmp_path, "webhooks", "list", "--tenant", "acme", "--json")).stdout
    )
    assert info["source"] == "stripe" and info["correlate_path"] == "data.id"
    assert info["url_id"].startswith("wh_") and len(info["url_id"]) == 35
    assert info["url_path"] == f"/v1/webhooks/{info['url_id']}"
    assert info["url_path"] in made.stderr
    assert secret not in json.dumps(info)
    [their_info] = json.loads(
        ok(waypost(tmp_path, "webhooks", "list", "--tenant", "globex", "--json")).stdout
    )
    assert their_info["url_id"] != info["url_id"]

    # The secret the command printed signs a delivery the engine accepts.
    body = b'{"data": {"id": "o-1"}}'
    ts = int(time.time())
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signature = base64.b64encode(
        hmac.new(key, f"e1.{ts}.".encode() + body, hashlib.sha256).digest()
    )
    headers = {
        "webhook-id": "e1",
        "webhook-timestamp": str(ts),
        "webhook-signature": "v1," + signature.decode(),
    }
    with (
        wp.Engine(f"sqlite:///{tmp_path / 'waypost.db'}") as engine,
        pytest.raises(wp.NoRunWaiting),
    ):
        engine.deliver_webhook(info["url_id"], headers, body)

    assert "no webhook source" in failed(
        waypost(tmp_path, "webhooks", "delete", "stripe", "--tenant", "initech")
    )
    ok(waypost(tmp_path, "webhooks", "delete", "stripe", "--tenant", "acme"))
    assert "no webhook sources" in waypost(tmp_path, "webhooks", "list", "--tenant", "acme").stderr
