"""`waypost worker --metrics-port`: a worker process without the server exposes the
same series on a port of its own, counters and database gauges alike."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import waypost as wp
from tests.helpers import eventually
from tests.helpers.servers import example, free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]
WAYPOST = Path(sys.executable).with_name("waypost")

pytestmark = pytest.mark.timeout(120)


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
    try:
        answer = httpx.get(url, timeout=10)
    except httpx.TransportError:
        return None  # not listening yet
    assert answer.status_code == 200, answer.text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


def test_a_worker_serves_its_metrics_on_its_own_port(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'worker.db'}"
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    worker = subprocess.Popen(
        [str(WAYPOST), "worker", "--db", db, "--app", "worker_app", "--metrics-port", str(port)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "examples")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        worker_app = example("worker_app")
        with wp.Engine(db) as client:  # registers, but runs no work: the worker does
            client.register(worker_app.greet, worker_app.hello)
            for name in ("Ada", "Grace"):
                run_id = client.start("greet", name).run_id
                assert client.result(run_id, timeout=60).startswith(f"hello, {name}")

        def done() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
            found = scrape(url)
            key = frozenset({("tenant", "default"), ("workflow", "greet")})
            return found if found and found.get(("waypost_runs_completed_total", key)) else None

        m = eventually(done, "the worker's metrics to count the runs")
        by_run = frozenset({("tenant", "default"), ("workflow", "greet")})
        assert m[("waypost_runs_completed_total", by_run)] == 2
        assert m.get(("waypost_runs_started_total", by_run), 0) == 0  # started elsewhere
        hello = frozenset({("activity", "hello"), ("outcome", "completed")})
        assert m[("waypost_activity_attempts_total", hello)] == 2
        # The gauges, read from the database on the worker's engine loop.
        assert m[("waypost_gauges_up", frozenset())] == 1
        assert m[("waypost_runs", by_run | {("status", "completed")})] == 2
        assert m[("waypost_commit_seconds_count", frozenset())] >= 2
        assert m[("process_cpu_seconds_total", frozenset())] > 0
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert f"metrics on http://127.0.0.1:{port}/metrics" in err
    assert scrape(url) is None  # the port closed with the worker


def test_a_taken_metrics_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [
                str(WAYPOST),
                "worker",
                "--db",
                f"sqlite:///{tmp_path / 'w.db'}",
                "--app",
                "worker_app",
                "--metrics-port",
                str(port),
            ],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT / "examples")},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 1, proc.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in proc.stderr


def test_waypost_server_serves_metrics_behind_its_token(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(WAYPOST), "server", "--db", f"sqlite:///{tmp_path / 's.db'}", "--port", str(port)],
        cwd=tmp_path,
        env={**os.environ, "WAYPOST_METRICS_TOKEN": "scrape-secret"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    try:
        wait_ready(proc, base)
        assert httpx.get(f"{base}/metrics", timeout=10).status_code == 401
        wrong = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401
        assert wrong.json()["error"]["code"] == "unauthenticated"
        right = httpx.get(
            f"{base}/metrics", headers={"Authorization": "Bearer scrape-secret"}, timeout=10
        )
        assert right.status_code == 200
        names = {f.name for f in text_string_to_metric_families(right.text)}
        assert {"waypost_runs_started", "waypost_runs", "waypost_gauges_up"} <= names
        assert "/metrics" not in httpx.get(f"{base}/openapi.json", timeout=10).text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "scrape-secret" not in err
