"""`waypost tenants disable|enable|delete` as real processes on a SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers.cli import create_key, failed, ok, waypost

pytestmark = pytest.mark.timeout(180)

DONE = """
name: done_cli
start: done
steps:
  done:
    type: succeed
"""


def test_a_tenant_disabled_enabled_then_disabled_and_deleted(tmp_path: Path) -> None:
    ok(waypost(tmp_path, "tenants", "create", "acme"))
    ok(waypost(tmp_path, "tenants", "create", "globex"))
    key = ok(create_key(tmp_path, "acme", "olga", "operator")).stdout.strip()
    db = f"sqlite:///{tmp_path / 'waypost.db'}"
    with wp.Engine(db) as engine:
        engine.publish(DONE, tenant="acme")
        engine.publish(DONE, tenant="globex")
        for n in range(30):
            engine.start("done_cli", {"n": n}, tenant="acme", run_id=f"a-{n}")
        engine.start("done_cli", {}, tenant="globex", run_id="g-1")

    assert "is not disabled" in failed(waypost(tmp_path, "tenants", "delete", "acme", "--yes"))
    assert "disabled (since" in ok(waypost(tmp_path, "tenants", "disable", "acme")).stdout
    listed = json.loads(ok(waypost(tmp_path, "tenants", "list", "--json")).stdout)
    assert [t["tenant"] for t in listed if t["disabled_at"]] == ["acme"]
    assert "DISABLED" in ok(waypost(tmp_path, "tenants", "list")).stdout
    assert "DISABLED since" in ok(waypost(tmp_path, "tenants", "show", "acme")).stdout
    with wp.Engine(db) as engine, pytest.raises(wp.TenantDisabled):
        engine.authenticate(key)
    ok(waypost(tmp_path, "tenants", "enable", "acme"))
    with wp.Engine(db) as engine:
        assert engine.authenticate(key).tenant == "acme"

    ok(waypost(tmp_path, "tenants", "disable", "acme"))
    refused = waypost(tmp_path, "tenants", "delete", "acme")  # no --yes, nothing typed
    assert refused.returncode != 0
    deleted = ok(waypost(tmp_path, "tenants", "delete", "acme", "--yes", "--batch", "20"))
    assert "tenant acme deleted" in deleted.stdout
    progress = [line for line in deleted.stderr.splitlines() if line.startswith("deleted ")]
    assert len(progress) > 2  # batch by batch
    assert "so far" in progress[-1]
    names = [
        t["tenant"] for t in json.loads(ok(waypost(tmp_path, "tenants", "list", "--json")).stdout)
    ]
    assert names == ["globex"]
    with wp.Engine(db) as engine:
        assert engine.get("g-1", tenant="globex").run_id == "g-1"
        with pytest.raises(wp.RunNotFound):
            engine.get("a-1", tenant="acme")
