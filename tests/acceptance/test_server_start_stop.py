"""`waypost server` started on a port another process holds, and stopped with Ctrl-C.

A taken port is said in one line naming the address and --port, exit code 1, before any
banner. The first Ctrl-C (SIGINT) stops gracefully and says so; a second, sent while an
activity is still in flight, stops the process at once with exit code 130.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import eventually
from tests.helpers.servers import WAYPOST, server_env, server_log, start_server
from tests.helpers.workers import signalled_at_the_end, stopped_at_once

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
        db = f"sqlite:///{tmp_path / 'wp.db'}"
        proc = subprocess.run(
            [str(WAYPOST), "server", "--db", db, "--port", str(port)],
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
def server_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, str]]:
    """A `waypost server` serving stopping_app, answering: the process, its output file
    and its database URL. Killed at the end if the test left it running."""
    db = f"sqlite:///{tmp_path / 'wp.db'}"
    proc, _ = start_server(tmp_path, db, "--app", "stopping_app", STOPPING_DIR=str(tmp_path))
    with signalled_at_the_end(proc):
        yield proc, server_log(proc), db


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
        app.hold_one(db, tmp_path)
        proc.send_signal(signal.SIGINT)
        eventually(lambda: said(log, STOPPING), "the server to say it is stopping", 30)
        assert proc.poll() is None  # it waits for the activity held at the gate
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
    out = log.read_text()
    stopped_at_once(out)
