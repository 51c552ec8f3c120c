"""`waypost tenants show` and `waypost tenants set-quota` as real processes on a SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers.cli import failed, ok, waypost
from tests.helpers.tenants import NO_USAGE

pytestmark = pytest.mark.timeout(180)


def test_quotas_are_shown_and_set_from_the_command_line(tmp_path: Path) -> None:
    ok(waypost(tmp_path, "tenants", "create", "acme"))
    shown = json.loads(ok(waypost(tmp_path, "tenants", "show", "acme", "--json")).stdout)
    assert shown["quotas"] == {**wp.Quotas().to_json(), "max_payload_bytes": 1_000_000}
    assert shown["usage"] == NO_USAGE
    assert shown["overrides"] == {}

    ok(
        waypost(
            tmp_path,
            "tenants",
            "set-quota",
            "acme",
            "max_concurrent_runs=10",
            "starts_per_second=2.5",
            "max_events_per_run=unlimited",
        )
    )
    text = ok(waypost(tmp_path, "tenants", "show", "acme")).stdout
    assert "max_concurrent_runs        10  (set for this tenant)" in text
    assert "max_events_per_run         unlimited  (set for this tenant)" in text
    assert "starts_per_second          2.5" in text
    back = ok(waypost(tmp_path, "tenants", "set-quota", "acme", "max_concurrent_runs=default"))
    assert "max_concurrent_runs        unlimited\n" in back.stdout

    assert "NAME=N" in failed(waypost(tmp_path, "tenants", "set-quota", "acme", "runs"))
    assert "NAME=N" in failed(waypost(tmp_path, "tenants", "set-quota", "acme", "x=-1"))
    assert "unknown quota" in failed(waypost(tmp_path, "tenants", "set-quota", "acme", "x=1"))
    assert "does not exist" in failed(
        waypost(tmp_path, "tenants", "set-quota", "nobody", "max_concurrent_runs=1")
    )
    assert "Missing argument" in failed(waypost(tmp_path, "tenants", "set-quota", "acme"))
