"""`waypost server` runs a tenant's expensive work in compute processes beside it.

Definition runs, queries and the console's replay view run in a process of their own
(nice 10): killed with SIGKILL, it is started again and the work goes on; one that
runs one call for its backstop (a query handler's endless loop) stops and is started
again, and the server answers 503 meanwhile. What it counts shows in the server's /metrics. Both stores.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.helpers import eventually
from tests.helpers.servers import make_key, start_server, stop_server

pytestmark = pytest.mark.timeout(240)

WAITS = """
name: waits
start: keep
steps:
  keep: {type: pass, set: {$.kept: "order"}, next: hold}
  hold: {type: wait, signal: go, next: done}
  done: {type: succeed, output: kept}
"""


def children_of(pid: int) -> list[int]:
    """The compute processes of server process `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and b"waypost.server.compute" in cmdline:
            found.append(int(entry))
    return found


def test_definition_runs_and_queries_run_in_a_compute_process_that_comes_back_after_a_kill(
    tmp_path: Path, db_url: str
) -> None:
    key = make_key(tmp_path, db_url)
    proc, base = start_server(tmp_path, db_url, "--metrics-token", "scrape")
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as api:
            replacement = definition_run_through_a_kill(proc.pid, base, api)
    finally:
        err = stop_server(proc)
    assert f"compute process 0 ended (exit code -{signal.SIGKILL.value})" in err, err
    assert not Path(f"/proc/{replacement}").exists()  # it stopped with the server


def definition_run_through_a_kill(server: int, base: str, api: httpx.Client) -> int:
    """Publish, start, query; kill the compute process; query, signal: the run completes.
    Answers the replacement process's id."""
    yaml = {"Content-Type": "application/yaml"}
    assert api.post("/v1/definitions", content=WAITS, headers=yaml).status_code == 201
    children = eventually(lambda: children_of(server), "the compute process")
    assert len(children) == 1
    assert os.getpriority(os.PRIO_PROCESS, children[0]) == 10  # behind the server

    run = api.post("/v1/runs", json={"workflow": "waits", "input": {"order": "A1"}})
    assert run.status_code == 201, run.text
    run_id = run.json()["run_id"]
    eventually(lambda: api.get(f"/v1/runs/{run_id}").json()["status"] == "waiting", "the wait")
    query = api.post(f"/v1/runs/{run_id}/queries/data", json={"args": []})
    assert query.status_code == 200, query.text
    assert query.json()["result"]["kept"] == "A1"

    os.kill(children[0], signal.SIGKILL)
    # Its replacement answers queries and serves the run.
    again = eventually(lambda: [c for c in children_of(server) if c != children[0]], "another")
    assert len(again) == 1

    def answered() -> bool:
        got = api.post(f"/v1/runs/{run_id}/queries/data", json={"args": []}, timeout=90)
        assert got.status_code in (200, 503), got.text
        return got.status_code == 200

    eventually(answered, "a query answered again", timeout=60)
    sent = api.post(f"/v1/runs/{run_id}/signals/go", json={"payload": None})
    assert sent.status_code == 202, sent.text

    def completed() -> bool:
        return bool(api.get(f"/v1/runs/{run_id}").json()["status"] == "completed")

    eventually(completed, "the run to complete", timeout=60)
    # The run ended in the compute process; the server's /metrics counts it.
    scraped = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer scrape"}).text
    ended = [line for line in scraped.splitlines() if line.startswith("waypost_runs_completed")]
    assert ended and float(ended[0].rsplit(" ", 1)[1]) >= 1, ended
    return again[0]


def test_a_query_that_never_returns_is_stopped_and_the_server_answers_again(
    tmp_path: Path, sqlite_url: str
) -> None:
    key = make_key(tmp_path, sqlite_url)
    proc, base = start_server(
        tmp_path, sqlite_url, "--app", "compute_app", "--compute-cpu-limit", "0.5"
    )
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as api:
            stuck_query_is_stopped(api)
    finally:
        err = stop_server(proc)
    assert "within 32 s: stopping it (it starts again)" in err, err


def stuck_query_is_stopped(api: httpx.Client) -> None:
    run = api.post("/v1/runs", json={"workflow": "spinner", "input": None})
    assert run.status_code == 201, run.text
    run_id = run.json()["run_id"]
    eventually(lambda: api.get(f"/v1/runs/{run_id}").json()["status"] == "waiting", "the wait")
    stuck = api.post(f"/v1/runs/{run_id}/queries/spin", json={"args": []}, timeout=120)
    assert stuck.status_code == 503, stuck.text
    assert stuck.json()["error"]["code"] == "compute_unavailable"
    assert stuck.headers["Retry-After"] == "1"
    # Meanwhile the server answered everyone else; afterwards queries are answered again.
    assert api.get("/healthz").status_code == 200

    def answered() -> bool:
        got = api.post(f"/v1/runs/{run_id}/queries/hello", json={"args": []}, timeout=90)
        return got.status_code == 200 and got.json()["result"] == "hello"

    eventually(answered, "a query answered again", timeout=60)
