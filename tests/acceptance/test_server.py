"""`waypost server` as a real process, driven over HTTP as a new user would.

The purchase-order definition of examples/ is published over the API, a run
started, its approval decided from the link in the notification (the page shows,
its form decides, a second try is refused), and the run completes. The client
(`wp.Client`) follows a run from outside. Two server processes on one PostgreSQL
database serve the same runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.servers import (
    EXAMPLES,
    ORDER,
    ROOT,
    free_port,
    note_for,
    server,
    tenant_with_key,
    waypost_ok,
)

pytestmark = pytest.mark.timeout(240)


def test_a_purchase_order_published_started_approved_from_its_link_and_completed(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'waypost.db'}"
    key = tenant_with_key(tmp_path, db, "shop", "ops", "operator,starter")
    waypost_ok(
        tmp_path, db, "groups", "add", "purchasing-managers", "mia", "max", "--tenant", "shop"
    )
    auth = {"Authorization": f"Bearer {key}"}
    with (
        contextlib.ExitStack() as stack,
        server(tmp_path, db, "--app", "purchase_order_definition") as base,
    ):
        api = httpx.Client(base_url=base, headers=auth, timeout=30)
        stack.callback(api.close)
        source = (EXAMPLES / "definitions/purchase_order.yaml").read_bytes()
        published = api.post(
            "/v1/definitions", content=source, headers={"Content-Type": "application/yaml"}
        )
        assert published.status_code == 201, published.text
        assert published.json()["name"] == "purchase_order"
        started = api.post("/v1/runs", json={"workflow": "purchase_order", "input": ORDER})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]

        note = note_for(tmp_path / "notes.jsonl", "mia")
        assert note["approve_url"].startswith(f"{base}/approve/")
        page = httpx.get(note["approve_url"])
        assert page.status_code == 200
        assert "PO-1" in page.text and "2500" in page.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        shown = api.get(f"/v1/runs/{run_id}").json()
        assert shown["status"] == "waiting"  # the GET decided nothing
        decided = httpx.post(
            note["approve_url"],
            data={"csrf": csrf.group(1), "comment": "within budget"},
            cookies=page.cookies,
        )
        assert decided.status_code == 200, decided.text
        again = httpx.post(note["approve_url"], data={"csrf": csrf.group(1)}, cookies=page.cookies)
        assert again.status_code == 410

        def awaiting_goods() -> bool:
            waits = api.get(f"/v1/runs/{run_id}").json()["waiting_for"]
            return any(w.get("name") == "goods_received" for w in waits)

        eventually(awaiting_goods, "the run to wait for the goods", timeout=60)
        signalled = api.post(
            f"/v1/runs/{run_id}/signals/goods_received", json={"payload": {"note": "all there"}}
        )
        assert signalled.status_code == 202
        done = api.get(f"/v1/runs/{run_id}/result", params={"wait": 30}).json()
        assert done["status"] == "completed", done
        assert done["result"]["order_id"] == "PO-1"
        history = api.get(f"/v1/runs/{run_id}/history").json()["events"]
        decisions = [e for e in history if e["type"] == "ApprovalDecided"]
        assert decisions, [e["type"] for e in history]


@pytest.fixture
def code_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    db = f"sqlite:///{tmp_path / 'waypost.db'}"
    key = tenant_with_key(tmp_path, db, "acme", "app", "starter,operator")
    with server(tmp_path, db, "--app", "worker_app") as base:
        yield base, key


def test_the_client_starts_and_follows_a_run_with_the_embedded_apis_errors(
    code_server: tuple[str, str],
) -> None:
    base, key = code_server
    with wp.Client(base, key) as client:
        run_id = client.start("greet", "Ada", run_id="greet-ada")
        assert run_id == "greet-ada"
        assert client.start("greet", "Ada", run_id="greet-ada") == run_id  # found again
        assert client.result(run_id, timeout=30) == "hello, Ada (attempt 1)"
        assert client.get(run_id).status is wp.RunStatus.COMPLETED
        assert client.history(run_id)[0].type == "RunStarted"
        with pytest.raises(wp.RunIdConflict):
            client.start("greet", "Bob", run_id="greet-ada")
        with pytest.raises(wp.RunNotFound):
            client.get("no-such-run")
        with pytest.raises(wp.UnknownWorkflow):
            client.start("nope")
        with pytest.raises(wp.InvalidRequest):
            client.start("greet", "x", run_id="bad\u2028id")
    stranger = wp.Client(base, "wpk_" + "0" * 16 + "_" + "0" * 64)
    with stranger, pytest.raises(wp.Unauthenticated):
        stranger.get(run_id)
    with wp.Client(base, key) as shown:
        assert "wpk_" not in repr(shown)
        assert "wpk_" not in repr(shown.aio)


def test_the_openapi_document_and_errors_of_a_served_process(
    code_server: tuple[str, str],
) -> None:
    base, key = code_server
    document = httpx.get(f"{base}/openapi.json").json()
    assert document["info"]["title"] == "waypost"
    assert "/v1/runs/{run_id}/signals/{name}" in document["paths"]
    missing = httpx.get(f"{base}/v1/nowhere")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    unauthenticated = httpx.get(f"{base}/v1/runs")
    assert unauthenticated.status_code == 401
    bad = httpx.post(
        f"{base}/v1/runs", headers={"Authorization": f"Bearer {key}"}, content=b"\xff\xfe{"
    )
    assert bad.status_code in (400, 422)
    assert "Traceback" not in bad.text


def test_the_readmes_server_script_serves_and_its_walkthrough_works(tmp_path: Path) -> None:
    """`./scripts/server` as the quick start runs it: a key printed, then the README's
    publish, start, approve-from-the-link, signal and result."""
    port = free_port()
    notes = tmp_path / "notes.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("WAYPOST_DB", "WAYPOST_NOTIFY")}
    env["WAYPOST_DB"] = f"sqlite:///{tmp_path / 'server.db'}"
    env["WAYPOST_SERVER_NOTES"] = str(notes)
    proc = subprocess.Popen(
        [str(ROOT / "scripts/server"), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("API key: wpk_"), first + proc.stderr.read()
        key = first.removeprefix("API key: ").strip()
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert proc.poll() is None
            try:
                return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        eventually(ready, "the server to answer", timeout=120)
        with httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as api:
            source = (EXAMPLES / "definitions/purchase_order.yaml").read_bytes()
            # The script published it already (for its demo orders): the same version.
            assert api.post("/v1/definitions", content=source).status_code in (200, 201)
            run_id = api.post(
                "/v1/runs", json={"workflow": "purchase_order", "input": ORDER}
            ).json()["run_id"]
            link = note_for(notes, "mia", run_id)["approve_url"]
            page = httpx.get(link)
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf is not None
            decided = httpx.post(link, data={"csrf": csrf.group(1)}, cookies=page.cookies)
            assert decided.status_code == 200

            def waits_for_goods() -> bool:
                waiting = api.get(f"/v1/runs/{run_id}").json()["waiting_for"]
                return any(w.get("name") == "goods_received" for w in waiting)

            eventually(waits_for_goods, "the run to wait for the goods", timeout=60)
            api.post(f"/v1/runs/{run_id}/signals/goods_received", json={"payload": {"note": "ok"}})
            done = api.get(f"/v1/runs/{run_id}/result", params={"wait": 30}).json()
            assert done["status"] == "completed", done
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
