"""`waypost server` started on a port another process holds, and stopped with Ctrl-C.

A taken port is said in one line naming the address and --port, exit code 1, before any
banner. The first Ctrl-C (SIGINT) stops gracefully and says so; a second, sent while an
activity is still in flight, stops the process at once with exit code 130.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

import waypost as wp
from tests.helpers import eventually
from tests.helpers.servers import ACCEPTANCE, WAYPOST, free_port, server_env

from . import stopping_app as app

STOPPING = (
    "stopping: waiting for the requests and activities in flight to finish "
    "(Ctrl-C again to stop at once)"
)


def test_a_taken_port_is_said_before_any_banner(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = subprocess.run(
            [
                str(WAYPOST),
                "server",
                "--db",
                f"sqlite:///{tmp_path / 'wp.db'}",
                "--port",
                str(port),
            ],
            cwd=tmp_path,
            env=server_env(tmp_path / "notes.jsonl"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{port}: another process listens there; stop it "
        "or give another --port"
    ]
    assert not (tmp_path / "wp.db").exists()  # nothing opened


@contextmanager
def server_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, str]]:
    """A `waypost server` serving stopping_app, answering: the process, its output file
    and its database URL. Killed at the end if the test left it running."""
    db = f"sqlite:///{tmp_path / 'wp.db'}"
    port = free_port()
    env = server_env(tmp_path / "notes.jsonl")
    env["PYTHONPATH"] = os.pathsep.join([str(ACCEPTANCE), env["PYTHONPATH"]])
    env["STOPPING_DIR"] = str(tmp_path)
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(WAYPOST), "server", "--db", db, "--port", str(port), "--app", "stopping_app"],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )

    def ready() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        eventually(ready, "the server to answer", timeout=60)
        yield proc, log, db
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def said(log: Path, line: str) -> bool:
    return line in log.read_text().splitlines()


def test_a_first_ctrl_c_stops_the_server_gracefully(tmp_path: Path) -> None:
    with server_process(tmp_path) as (proc, log, _):
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0
    out = log.read_text()
    assert said(log, STOPPING), out
    assert "Traceback" not in out and "stopped at once" not in out, out


def test_a_second_ctrl_c_stops_the_server_at_once(tmp_path: Path) -> None:
    with server_process(tmp_path) as (proc, log, db):
        with wp.Engine(db) as client:
            client.register(app.held_run, app.held)
            client.start(app.held_run, run_id="held-1")
        eventually(lambda: (tmp_path / "entered").exists(), "the activity to start", 60)
        proc.send_signal(signal.SIGINT)
        eventually(lambda: said(log, STOPPING), "the server to say it is stopping", 30)
        assert proc.poll() is None  # it waits for the activity held at the gate
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
    out = log.read_text()
    assert "Traceback" not in out, out
    assert out.count("stopping:") == 1, out
    assert "stopped at once" in out.splitlines()[-1], out
