"""The statements a run's steps, ends and decisions run find their rows by an index that
narrows to the run (or the approval), never by reading all of a tenant's rows.

SQLite plans without statistics and, for a tenant-prefixed key, once took the primary
key's or the creation index's tenant prefix: every run's end then read every run of its
tenant, and new runs slowed 27x beside 100,000 waiting ones (bench/README.md). These are
SQLite's real plans for the statements, on a database with waypost's schema.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

import pytest

from waypost.store import open_store
from waypost.store.sqlfile import load_queries

# Statement -> the index its plan must search by (with more than the tenant).
EXPECTED = {
    "run_children": "runs_by_parent (tenant=? AND parent_run_id=?)",
    "close_run_approvals": "approvals_by_run (tenant=? AND run_id=?)",
    "retire_approver_credentials": "approval_credentials_by_approval (tenant=? AND approval_id=?",
    "revoke_approval_credentials": "approval_credentials_by_approval (tenant=? AND approval_id=?",
    "revoke_run_credentials": "approval_credentials_by_approval (tenant=? AND approval_id=?",
    "run_head": "(tenant=? AND run_id=?)",
    "workflow_task": "(tenant=? AND run_id=? AND kind=? AND step=?)",
    "advance_run_checked": "(tenant=? AND run_id=?)",
    "advance_run_snapshot": "(tenant=? AND run_id=?)",
    "load_history": "(tenant=? AND run_id=? AND seq>?)",
}


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plans") / "waypost.db"

    async def create() -> None:
        store = open_store(f"sqlite:///{path}")
        await store.open()
        await store.close()

    asyncio.run(create())
    return path


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_hot_statement_searches_by_an_index_narrower_than_the_tenant(
    name: str, database: Path
) -> None:
    sql = load_queries("sqlite")[name]
    params = dict.fromkeys(re.findall(r":(\w+)", sql), "x")
    conn = sqlite3.connect(database)
    try:
        plan = [row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    finally:
        conn.close()
    assert any(EXPECTED[name] in step for step in plan), plan
    assert not [step for step in plan if step.startswith("SCAN ")], plan
    assert not [step for step in plan if step.endswith("(tenant=?)")], plan
