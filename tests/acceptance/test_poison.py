"""Poison runs with real processes: work that kills its worker (SIGKILL) again and
again is counted in the store across the deaths, backed off, and the run suspended
after `--max-lapses`, found by `waypost runs list --status suspended`; nothing is
dropped (the step waits for `resume`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query

from . import poison_app

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
WAYPOST = Path(sys.executable).with_name("waypost")
MAX_LAPSES = 3


def worker(db_url: str, log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(WAYPOST),
            "worker",
            "--db",
            db_url,
            "--app",
            poison_app.__name__,
            "--lease",
            "2",
            "--grace",
            "1",
            "--max-lapses",
            str(MAX_LAPSES),
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.parametrize(
    ("workflow", "step"),
    [(poison_app.poison_code, "workflow task"), (poison_app.poison_activity, "1")],
)
def test_work_that_keeps_killing_its_worker_suspends_the_run(
    make_engine: Any, db_url: str, tmp_path: Path, workflow: Any, step: str
) -> None:
    engine = make_engine(workflow, poison_app.kills_its_worker)  # starts runs, serves nothing
    run = engine.start(workflow)
    killed = 0
    deadline = time.monotonic() + 120
    with (tmp_path / "workers.log").open("wb") as log:
        proc = worker(db_url, log)
        try:
            # A supervisor's part: a worker that died is replaced, until the run is suspended.
            while engine.get(run.run_id).status != wp.RunStatus.SUSPENDED:
                assert time.monotonic() < deadline, (tmp_path / "workers.log").read_text()
                if proc.poll() is not None:
                    assert proc.returncode == -signal.SIGKILL
                    killed += 1
                    assert killed <= MAX_LAPSES + 1, "the run was not suspended in time"
                    proc = worker(db_url, log)
                time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait(30)
    assert killed == MAX_LAPSES
    info = engine.get(run.run_id)
    assert info.error is not None and info.error["type"] == "PoisonRun"
    assert info.error["step"] == step and info.error["lapses"] == MAX_LAPSES
    listed = subprocess.run(
        [str(WAYPOST), "runs", "list", "--status", "suspended", "--db", db_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0 and run.run_id in listed.stdout
    history = engine.history(run.run_id)
    assert history[-1].type == "RunSuspended"
    # Nothing is dropped: the step's task waits for an operator's resume.
    kind = "workflow" if step == "workflow task" else "activity"
    query = "SELECT state FROM tasks WHERE run_id = ? AND kind = ?"
    assert db_query(db_url, query, (run.run_id, kind)) in ([("idle",)], [("ready",)])
    if kind == "activity":
        lost = [e for e in history if e.type == "ActivityFailed"]
        assert len(lost) == MAX_LAPSES and all(e.data["retrying"] for e in lost)
        assert all("lost its worker" in e.data["error"]["message"] for e in lost)
    assert engine.verify(run.run_id) == []
