"""Two `waypost server` processes on one PostgreSQL database, as behind a load balancer:
any of them answers for any run, and the work goes on whichever process holds it."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import httpx
import pytest

from tests.helpers import eventually
from tests.helpers.servers import EXAMPLES, ORDER, note_for, server, tenant_with_key, waypost_ok

pytestmark = pytest.mark.timeout(300)


def test_two_servers_on_one_postgresql_serve_the_same_runs(
    tmp_path: Path, fresh_postgres: str
) -> None:
    db = fresh_postgres
    key = tenant_with_key(tmp_path, db, "shop", "ops", "operator,starter")
    waypost_ok(tmp_path, db, "groups", "add", "purchasing-managers", "mia", "--tenant", "shop")
    auth = {"Authorization": f"Bearer {key}"}
    app = ("--app", "purchase_order_definition")
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(server(tmp_path, db, *app))
        second = stack.enter_context(server(tmp_path, db, *app))
        a = stack.enter_context(httpx.Client(base_url=first, headers=auth, timeout=30))
        b = stack.enter_context(httpx.Client(base_url=second, headers=auth, timeout=30))

        source = (EXAMPLES / "definitions/purchase_order.yaml").read_bytes()
        assert a.post("/v1/definitions", content=source).status_code == 201
        assert b.post("/v1/definitions", content=source).status_code == 200  # the same version
        started = b.post("/v1/runs", json={"workflow": "purchase_order", "input": ORDER})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        again = a.post(
            "/v1/runs", json={"workflow": "purchase_order", "input": ORDER, "run_id": run_id}
        )
        assert again.status_code == 200  # found again through the other process

        note = note_for(tmp_path / "notes.jsonl", "mia")
        token = note["approve_url"].rpartition("/approve/")[2]
        # The link names one server; the other serves the same page and decision.
        other = second if note["approve_url"].startswith(first) else first
        page = httpx.get(f"{other}/approve/{token}")
        assert page.status_code == 200
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        decided = httpx.post(
            f"{other}/approve/{token}",
            data={"csrf": csrf.group(1), "comment": "ok"},
            cookies=page.cookies,
        )
        assert decided.status_code == 200, decided.text

        def awaiting_goods() -> bool:
            waits = a.get(f"/v1/runs/{run_id}").json()["waiting_for"]
            return any(w.get("name") == "goods_received" for w in waits)

        eventually(awaiting_goods, "the run to wait for the goods", timeout=60)
        assert (
            b.post(
                f"/v1/runs/{run_id}/signals/goods_received", json={"payload": {"note": "ok"}}
            ).status_code
            == 202
        )
        done = a.get(f"/v1/runs/{run_id}/result", params={"wait": 30}).json()
        assert done["status"] == "completed", done
        assert b.get(f"/v1/runs/{run_id}/verify").json()["intact"] is True
