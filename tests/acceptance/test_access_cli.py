"""`waypost tenants` and `waypost keys` as real processes on a SQLite file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers.cli import create_key, failed, ok, waypost

pytestmark = pytest.mark.timeout(180)


def test_a_tenant_a_key_for_it_and_the_key_revoked(tmp_path: Path) -> None:
    assert "no database at" in failed(waypost(tmp_path, "tenants", "list"))
    assert not (tmp_path / "waypost.db").exists()  # reading made no database

    ok(waypost(tmp_path, "tenants", "create", "acme", "--quota", "max_runs=10"))
    assert "exists already" in failed(waypost(tmp_path, "tenants", "create", "acme"))
    [tenant] = json.loads(ok(waypost(tmp_path, "tenants", "list", "--json")).stdout)
    assert tenant["tenant"] == "acme" and tenant["quotas"] == {"max_runs": 10}
    header, row = ok(waypost(tmp_path, "tenants", "list")).stdout.splitlines()
    assert header.split() == ["TENANT", "CREATED", "CREATED", "BY", "STATUS"]
    assert row.split()[0] == "acme" and row.split()[-1] == "active"

    made = ok(create_key(tmp_path, "acme", "CI-Bot", "operator, viewer", "--expires", "30d"))
    key = made.stdout.strip()
    assert made.stdout == key + "\n"  # the key alone: KEY=$(waypost keys create ...)
    assert key.startswith("wpk_")
    assert "shown this once" in made.stderr and key not in made.stderr

    [info] = json.loads(ok(waypost(tmp_path, "keys", "list", "--tenant", "acme", "--json")).stdout)
    assert info["principal"] == "ci-bot" and info["roles"] == ["operator", "viewer"]
    assert info["status"] == "active" and info["expires_at"] is not None
    assert key.split("_")[2] not in json.dumps(info)
    listing = ok(waypost(tmp_path, "keys", "list", "--tenant", "acme")).stdout
    assert listing.splitlines()[1].split()[:3] == [info["key_id"], "active", "ci-bot"]

    engine = wp.Engine(f"sqlite:///{tmp_path / 'waypost.db'}")
    try:
        assert engine.authenticate(key).subject == "ci-bot"
        ok(waypost(tmp_path, "keys", "revoke", info["key_id"], "--tenant", "acme"))
        with pytest.raises(wp.Unauthenticated):
            engine.authenticate(key)
    finally:
        engine.close()
    [info] = json.loads(ok(waypost(tmp_path, "keys", "list", "--tenant", "acme", "--json")).stdout)
    assert info["status"] == "revoked"

    # Another tenant's key id is not found there, exactly like one that never existed.
    ok(waypost(tmp_path, "tenants", "create", "globex"))
    foreign = failed(waypost(tmp_path, "keys", "revoke", info["key_id"], "--tenant", "globex"))
    missing = failed(waypost(tmp_path, "keys", "revoke", "0" * 16, "--tenant", "globex"))
    assert foreign.replace(info["key_id"], "0" * 16) == missing
    assert "no API key" in missing


def test_bad_key_requests_are_one_line_errors_that_write_nothing(tmp_path: Path) -> None:
    ok(waypost(tmp_path, "tenants", "create", "acme"))
    base = ["keys", "create", "--tenant", "acme", "--principal", "bot"]
    assert "unknown role 'root'" in failed(waypost(tmp_path, *base, "--roles", "root"))
    assert "at least one role" in failed(waypost(tmp_path, *base, "--roles", ","))
    assert "in the future" in failed(
        waypost(tmp_path, *base, "--roles", "viewer", "--expires", "2020-01-01T00:00:00Z")
    )
    assert "time zone" in failed(
        waypost(tmp_path, *base, "--roles", "viewer", "--expires", "2999-01-01T00:00:00")
    )
    assert "duration" in failed(
        waypost(tmp_path, *base, "--roles", "viewer", "--expires", "tomorrow")
    )
    assert "does not exist" in failed(create_key(tmp_path, "initech", "bot", "viewer"))
    assert "control or invisible" in failed(create_key(tmp_path, "acme", "b\u200bot", "viewer"))
    not_utf8 = os.fsdecode(b"acme\xff")  # passed to the process as the raw byte
    assert "control or invisible" in failed(waypost(tmp_path, "tenants", "create", not_utf8))
    assert "NAME=N" in failed(waypost(tmp_path, "tenants", "create", "x", "--quota", "runs=-1"))
    listed = ok(waypost(tmp_path, "keys", "list", "--tenant", "acme"))
    assert listed.stdout == "" and "no keys" in listed.stderr
    assert [
        line.split()[0] for line in ok(waypost(tmp_path, "tenants", "list")).stdout.splitlines()
    ] == ["TENANT", "acme"]


def test_commands_that_read_refuse_a_missing_database(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    for args in (
        ["tenants", "list"],
        ["keys", "list", "--tenant", "acme"],
        ["keys", "revoke", "0" * 16, "--tenant", "acme"],
        ["keys", "create", "--tenant", "acme", "--principal", "bot", "--roles", "viewer"],
    ):
        assert "no database at" in failed(waypost(tmp_path, *args, db=missing))
    assert not missing.exists()
