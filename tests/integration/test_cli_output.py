"""--output table|json on the commands that print records, on a real SQLite database.

A table has a header row, then a row a record; --json is --output json; the two
together, contradicting each other, are a usage error. `schedules show` and `runs
purged` print JSON by default, as they always have, and a table on request.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

import waypost as wp
from waypost.cli.main import main

ORDER_DEFINITION = Path(__file__).parents[2] / "examples" / "definitions" / "purchase_order.yaml"


@wp.workflow(name="short")
async def short(ctx: wp.WorkflowContext) -> str:
    return "done"


def waypost(db: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--db", db], catch_exceptions=False)


def ok(db: str, *args: str) -> str:
    result = waypost(db, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_list_prints_a_header_row_then_a_row_a_record(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'wp.db'}"
    ok(db, "tenants", "create", "acme")
    ok(db, "tenants", "create", "bolt")
    header, *rows = ok(db, "tenants", "list").splitlines()
    assert header.split() == ["TENANT", "CREATED", "CREATED", "BY", "STATUS"]
    assert [row.split()[0] for row in rows] == ["acme", "bolt"]
    assert all(row.split()[-1] == "active" for row in rows)
    as_json = ok(db, "tenants", "list", "--json")
    assert ok(db, "tenants", "list", "--output", "json") == as_json
    assert [t["tenant"] for t in json.loads(as_json)] == ["acme", "bolt"]
    assert ok(db, "tenants", "list", "--output", "table") == ok(db, "tenants", "list")


def test_json_and_a_table_together_are_refused(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'wp.db'}"
    ok(db, "db", "migrate")
    both = waypost(db, "runs", "list", "--json", "--output", "table")
    assert both.exit_code == 2
    assert "--json is --output json: give one or the other" in both.stderr
    wrong = waypost(db, "runs", "list", "--output", "yaml")
    assert wrong.exit_code == 2 and "'yaml' is not one of 'table', 'json'" in wrong.stderr


def test_schedules_show_prints_json_or_a_table(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'wp.db'}"
    ok(db, "definitions", "publish", str(ORDER_DEFINITION))
    ok(db, "schedules", "create", "nightly", "purchase_order", "--every", "3600")
    assert json.loads(ok(db, "schedules", "show", "nightly"))["schedule_id"] == "nightly"
    assert ok(db, "schedules", "show", "nightly", "--json") == ok(
        db, "schedules", "show", "nightly"
    )
    header, row = ok(db, "schedules", "show", "nightly", "--output", "table").splitlines()
    assert header.split() == ["SCHEDULE", "ID", "WORKFLOW", "WHEN", "OVERLAP", "STATE"]
    assert row.split()[:4] == ["nightly", "purchase_order", "every", "3600s"]


def test_runs_purged_prints_json_or_a_table(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'wp.db'}"
    with wp.Engine(db) as engine:
        engine.register(short)
        with engine.running():
            assert engine.start(short, run_id="gone-1").result(timeout=30) == "done"
        assert engine.purge_runs(0).runs == 1
    (summary,) = json.loads(ok(db, "runs", "purged"))
    assert summary["run_id"] == "gone-1"
    header, row = ok(db, "runs", "purged", "--output", "table").splitlines()
    assert header.split()[:4] == ["RUN", "ID", "WORKFLOW", "STATUS"]
    assert row.split()[:3] == ["gone-1", "short@1", "completed"]
    one = ok(db, "runs", "purged", "gone-1", "--output", "table").splitlines()
    assert [line.split()[0] for line in one] == ["RUN", "gone-1"]
