"""Ctrl-C in `waypost worker` and `waypost demo`, sent as a terminal sends it (SIGINT).

The first stops gracefully and says so on stderr: the activity in flight is let finish
and its result recorded. A second stops at once, exit code 130, without a traceback.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import waypost as wp
from tests.helpers import eventually, of_type
from tests.helpers.workers import (
    acceptance_env,
    signalled_at_the_end,
    stopped_at_once,
    waypost_command,
)
from waypost.model.events import EventType

from . import stopping_app as app

STOPPING = "stopping: waiting for 1 activity in flight to finish (Ctrl-C again to stop at once)"


@contextmanager
def worker_holding_an_activity(
    tmp_path: Path,
) -> Iterator[tuple[subprocess.Popen[bytes], Path, str]]:
    """A worker whose one activity is in flight (held at the gate): the process, its
    stderr file and the database URL. Killed at the end if the test left it running."""
    db = f"sqlite:///{tmp_path / 'wp.db'}"
    stderr = tmp_path / "worker.stderr"
    env = acceptance_env(STOPPING_DIR=str(tmp_path))
    env.pop("WAYPOST_DB", None)
    with open(stderr, "wb") as err:
        worker = subprocess.Popen(
            [*waypost_command(), "worker", "--db", db, "--app", "stopping_app"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    with signalled_at_the_end(worker):
        app.hold_one(db, tmp_path)
        yield worker, stderr, db


def said(stderr: Path, line: str) -> bool:
    return line in stderr.read_text().splitlines()


def test_a_first_ctrl_c_lets_the_activity_in_flight_finish(tmp_path: Path) -> None:
    with worker_holding_an_activity(tmp_path) as (worker, stderr, db):
        worker.send_signal(signal.SIGINT)
        eventually(lambda: said(stderr, STOPPING), "the worker to say it is stopping", 30)
        assert worker.poll() is None  # it waits for the activity held at the gate
        (tmp_path / "gate").touch()
        assert worker.wait(60) == 0
    err = stderr.read_text()
    assert "Traceback" not in err and "stopped at once" not in err, err
    with wp.Engine(db) as client:
        done = of_type(client.history("held-1"), EventType.ACTIVITY_COMPLETED)
    assert [e.data["result"] for e in done] == ["let go"]


def test_a_second_ctrl_c_stops_at_once_with_exit_code_130(tmp_path: Path) -> None:
    with worker_holding_an_activity(tmp_path) as (worker, stderr, db):
        worker.send_signal(signal.SIGINT)
        eventually(lambda: said(stderr, STOPPING), "the worker to say it is stopping", 30)
        worker.send_signal(signal.SIGINT)
        assert worker.wait(60) == 130
    err = stderr.read_text()
    stopped_at_once(err)
    with wp.Engine(db) as client:
        assert not of_type(client.history("held-1"), EventType.ACTIVITY_COMPLETED)


def test_ctrl_c_stops_the_demo_gracefully(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [*waypost_command(), "demo", "--db", f"sqlite:///{tmp_path / 'demo.db'}"],
        env=acceptance_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stdout is not None
        for line in demo.stdout:  # the runs wait on a 2 s signal timeout after this line
            if line.startswith("started 3 runs"):
                break
        demo.send_signal(signal.SIGINT)
        out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(30)
    assert demo.returncode == 130, err
    assert err.splitlines() == [
        "stopping: waiting for the activities in flight to finish (Ctrl-C again to stop at once)"
    ]
    assert "chain check" not in out  # the demo stopped before its end
