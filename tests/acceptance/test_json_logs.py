"""Structured logs of real processes: `waypost worker --log-format json` and `waypost
server` with WAYPOST_LOG_FORMAT=json write one JSON object per stderr line, and every
line logged while working on a run names its run, step, attempt and tenant, also the
lines an activity's own code logs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.cli import run
from tests.helpers.servers import free_port

pytestmark = pytest.mark.timeout(180)

WAYPOST = Path(sys.executable).with_name("waypost")

APP = """
import logging
from datetime import timedelta

import waypost as wp

shop = logging.getLogger("shop")


@wp.activity(name="charge", retry=wp.Retry(max_attempts=2, initial_interval=timedelta(seconds=0)))
def charge(ctx: wp.ActivityContext, order: str) -> str:
    shop.info("charging %s", order)
    if ctx.attempt < 2:
        raise ValueError("card declined\\nFORGED line")
    return "paid"


@wp.activity(name="ship")
async def ship(ctx: wp.ActivityContext, order: str) -> str:
    shop.warning("shipping %s", order)
    return "shipped"


@wp.workflow(name="order")
async def order(ctx: wp.WorkflowContext, order: str) -> list[str]:
    return [await ctx.run(charge, order), await ctx.run(ship, order)]
"""


def run_process(
    tmp_path: Path, command: list[str], env: dict[str, str], tenant: str
) -> tuple[str, list[dict[str, Any]]]:
    """Run the order workflow through `command` (a worker or server process serving
    logs_app); the run id and the process's stderr, each line parsed as JSON."""
    (tmp_path / "logs_app.py").write_text(APP)
    db = f"sqlite:///{tmp_path / 'logs.db'}"
    proc = subprocess.Popen(
        [str(WAYPOST), *command, "--app", "logs_app", "--lease", "2"],
        cwd=tmp_path,
        env={**os.environ, "WAYPOST_DB": db, "PYTHONPATH": str(tmp_path), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with wp.Engine(db) as client:  # serves nothing: the process runs the run

            def started() -> str | None:
                try:  # by name, once the process serves it
                    return client.start("order", "o-7", tenant=tenant, run_id="o-7").run_id
                except wp.UnknownWorkflow:
                    return None

            run_id = eventually(started, "the process to serve the workflow", timeout=60)

            def done() -> bool:
                return client.get(run_id, tenant=tenant).finished

            eventually(done, "the run to finish", timeout=60)
            assert client.result(run_id, tenant=tenant) == ["paid", "shipped"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in err.splitlines()]  # every line is JSON
    assert lines
    return run_id, lines


def check_lines(run_id: str, lines: list[dict[str, Any]], tenant: str) -> None:
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line), line
    about = [line for line in lines if line.get("run_id") == run_id]
    for line in about:
        assert line["tenant"] == tenant, line
        assert "step" in line and "attempt" in line, line
    # The activity's own lines, with its step and attempt: two attempts of charge.
    charging = [
        line for line in about if line["logger"] == "shop" and "charging" in line["message"]
    ]
    assert [line["attempt"] for line in charging] == [1, 2]
    (shipping,) = [
        line for line in about if line["logger"] == "shop" and "shipping" in line["message"]
    ]
    assert shipping["level"] == "WARNING" and shipping["attempt"] == 1
    assert shipping["step"] and shipping["step"] != charging[0]["step"]
    assert charging[0]["step"] == charging[1]["step"]
    # waypost's lines about the run: tasks claimed and finished, the retry.
    assert any(line["logger"] == "waypost.tasks" and line["step"] is None for line in about)
    retry = [line for line in about if line.get("event") == "retry"]
    assert len(retry) == 1 and retry[0]["attempt"] == 1
    assert "\\nFORGED" in retry[0]["message"]  # escaped, never a line of its own
    assert not any(line["message"].startswith("FORGED") for line in lines)


def test_a_worker_logs_json_lines_that_name_the_run(tmp_path: Path) -> None:
    run_id, lines = run_process(tmp_path, ["worker", "--log-format", "json"], {}, "acme")
    check_lines(run_id, lines, "acme")


@pytest.mark.parametrize("how", ["env", "option"])
def test_a_server_logs_json_lines_that_name_the_run(tmp_path: Path, how: str) -> None:
    port = ["--port", str(free_port())]
    if how == "env":
        command, env = ["server", *port], {"WAYPOST_LOG_FORMAT": "json"}
    else:
        command, env = ["server", *port, "--log-format", "json"], {}
    run_id, lines = run_process(tmp_path, command, env, "default")
    check_lines(run_id, lines, "default")
    assert any(line["message"].startswith("waypost server on http://") for line in lines)


def test_an_unknown_log_format_is_refused(tmp_path: Path) -> None:
    worker = [str(WAYPOST), "worker", "--db", f"sqlite:///{tmp_path / 'x.db'}"]
    proc = run(worker, cwd=tmp_path, timeout=60, WAYPOST_LOG_FORMAT="yaml")
    assert proc.returncode == 2, proc.stderr
    assert "'yaml' is not one of 'text', 'json'" in proc.stderr
