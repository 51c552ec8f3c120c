"""`waypost replay` as a CI job runs it: a real engine makes the runs, the command checks them.

On both stores: runs that match the code, code changed to call another activity (a
mismatch naming the history event and the code's file:line), a version the code
lacks, and the database exactly as it was afterwards.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.cli import run
from tests.helpers.servers import ROOT, WAYPOST

from . import replay_app_v1 as v1

APP = "tests.acceptance.replay_app_v1"
CHANGED = "tests.acceptance.replay_app_changed"
V2_ONLY = "tests.acceptance.replay_app_v2only"


def replay(*args: str) -> Any:
    return run([str(WAYPOST), "replay", *args], cwd=ROOT)


def make_runs(url: str) -> list[str]:
    """Two runs waiting for "go" after their charge, and one completed; engine closed."""
    engine = wp.Engine(url, lease=2.0, poll_interval=0.05)
    try:
        engine.register(v1.order, v1.charge)
        with engine.running():
            ids = [engine.start(v1.order, cents, tenant="shop").run_id for cents in (1, 2, 3)]
            for run_id in ids:
                eventually(
                    lambda r=run_id: any(  # type: ignore[misc]
                        e.type == "ActivityCompleted" for e in engine.history(r, tenant="shop")
                    ),
                    "the charge",
                )
            engine.signal(ids[2], "go", tenant="shop")
            assert engine.result(ids[2], tenant="shop", timeout=10) == "ch-3"
            eventually(
                lambda: all(engine.get(r, tenant="shop").status == "waiting" for r in ids[:2]),
                "two waiting runs",
            )
    finally:
        engine.close()
    return ids


def database_state(url: str, folder: Path) -> Any:
    """Everything a write would change: the SQLite files' bytes, or PostgreSQL's rows."""
    if url.startswith("sqlite:"):
        # The file's bytes, and any write-ahead log's: a reader of a WAL database makes
        # SQLite create an empty log and its shared-memory index where none was, which
        # holds no data (an empty log is the same as none).
        return {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir())
            if p.name in ("waypost.db", "waypost.db-wal") and p.stat().st_size > 0
        }
    import psycopg

    with psycopg.connect(url, options="-c search_path=waypost") as conn:
        return [
            conn.execute(
                f"SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                f"FROM {table} t"
            ).fetchone()
            for table in ("runs", "events", "tasks", "timers", "waypost_migrations")
        ]


def test_replay_reports_matches_mismatches_and_unknown_versions_writing_nothing(
    db_url: str, tmp_path: Path
) -> None:
    ids = make_runs(db_url)
    before = database_state(db_url, tmp_path)

    same = replay("--app", APP, "--db", db_url, "--tenant", "shop")
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.count(": ok") == 3, same.stdout
    assert "3 runs replayed: 3 ok, 0 mismatched" in same.stdout

    changed = replay("--app", CHANGED, "--db", db_url, "--tenant", "shop")
    assert changed.returncode == 1, changed.stdout + changed.stderr
    lines = (ROOT / "tests/acceptance/replay_app_changed.py").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "ctx.run(refund" in text)
    for run_id in ids:
        assert (
            f"shop/{run_id} (replay_order@1, " in changed.stdout
            and "MISMATCH: expected event 2 ActivityScheduled step 1; the code did "
            f"ctx.run(refund) at replay_app_changed.py:{line}"
            in changed.stdout
        ), changed.stdout
    assert "3 runs replayed: 0 ok, 3 mismatched" in changed.stdout

    other = replay("--app", V2_ONLY, "--db", db_url, "--all-tenants", "--json")
    assert other.returncode == 0, other.stdout + other.stderr
    doc = json.loads(other.stdout)
    assert doc["summary"] == {"runs": 3, "ok": 0, "mismatch": 0, "error": 0, "skipped": 3}
    assert {r["note"] for r in doc["results"]} == {"version not in this code"}

    elsewhere = replay("--app", APP, "--db", db_url)  # the default tenant has no runs
    assert elsewhere.returncode == 0 and "0 runs replayed" in elsewhere.stdout

    none_finished = replay("--app", APP, "--db", db_url, "--tenant", "shop", "--finished", "0")
    assert "2 runs replayed: 2 ok" in none_finished.stdout

    assert database_state(db_url, tmp_path) == before


@pytest.mark.parametrize(
    "args",
    [
        ["--app", APP, "--tenant", "a", "--all-tenants"],
        ["--app", APP, "--workflow", "nope"],
        ["--app", "tests.acceptance.no_such_module"],
        ["--app", APP, "--limit", "0"],
        [],
    ],
)
def test_usage_errors_exit_2(sqlite_url: str, args: list[str]) -> None:
    proc = replay(*args, "--db", sqlite_url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_missing_sqlite_file_is_refused_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nothing.db"
    proc = replay("--app", APP, "--db", f"sqlite:///{path}")
    assert proc.returncode == 2
    assert "there is no database at" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_a_waypost_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    path.write_bytes(b"")
    proc = replay("--app", APP, "--db", f"sqlite:///{path}")
    assert proc.returncode == 2
    assert "not a waypost database" in proc.stderr
    assert path.read_bytes() == b""
