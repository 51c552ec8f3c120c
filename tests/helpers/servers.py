"""`waypost` commands and `waypost server` processes, run as a user runs them.

Each server's environment sends its notifications to a file (`notes.jsonl` in the
test's directory) and finds the examples and this repository on its import path.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from .polling import eventually

WAYPOST = Path(sys.executable).with_name("waypost")
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ACCEPTANCE = ROOT / "tests" / "acceptance"  # the apps the acceptance tests serve

# The purchase order of examples/definitions/purchase_order.yaml, as a run's input.
ORDER = {"order_id": "PO-1", "amount": 2500, "requester": "rita", "supplier": "acme-tools"}


def server_env(notes: Path) -> dict[str, str]:
    """The environment of a `waypost` process: notifications to the file `notes`."""
    env = {k: v for k, v in os.environ.items() if k not in ("WAYPOST_DB", "WAYPOST_DEBUG")}
    inherited = os.environ.get("PYTHONPATH", "")  # where waypost itself may come from
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(EXAMPLES), str(ROOT), inherited) if p)
    env["WAYPOST_NOTIFY"] = f"file:{notes}"
    return env


def waypost_ok(tmp_path: Path, db: str, *args: str) -> str:
    """The output of a `waypost` command on database `db`, which must succeed."""
    proc = subprocess.run(
        [str(WAYPOST), *args, "--db", db],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=server_env(tmp_path / "notes.jsonl"),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def tenant_with_key(tmp_path: Path, db: str, tenant: str, principal: str, roles: str) -> str:
    """Create `tenant` and an API key of `principal` in it with `roles` (comma-separated),
    with `waypost` commands; the key."""
    waypost_ok(tmp_path, db, "tenants", "create", tenant)
    return waypost_ok(
        tmp_path,
        db,
        "keys",
        "create",
        "--tenant",
        tenant,
        "--principal",
        principal,
        "--roles",
        roles,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def example(name: str) -> ModuleType:
    """The module `name` of the examples folder, imported."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def wait_ready(proc: subprocess.Popen[str], base: str) -> None:
    """Wait (a minute at most) for the server process at `base` to answer `/readyz`; fail
    at once, with its error output, if it exits."""

    def ready() -> bool:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    eventually(ready, "the server to answer", timeout=60)


@contextlib.contextmanager
def stopped_cleanly(proc: subprocess.Popen[str]) -> Iterator[None]:
    """Stop `proc` with SIGTERM when the block ends: it must exit 0, without a traceback."""
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err


@contextlib.contextmanager
def server(tmp_path: Path, db: str, *options: str) -> Iterator[str]:
    """A `waypost server` process; its base URL. Stopped with SIGTERM, which must be clean."""
    port = free_port()
    proc = subprocess.Popen(
        [str(WAYPOST), "server", "--db", db, "--port", str(port), *options],
        cwd=tmp_path,
        env=server_env(tmp_path / "notes.jsonl"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    with stopped_cleanly(proc):
        wait_ready(proc, base)
        yield base


def note_for(notes: Path, who: str, run_id: str | None = None) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        if notes.exists():
            for line in notes.read_text().splitlines():
                note: dict[str, Any] = json.loads(line)
                if note["approver"] == who and run_id in (None, note["run_id"]):
                    return note
        return None

    found: dict[str, Any] = eventually(find, f"a notification for {who}", timeout=60)
    return found


_LOGS: dict[int, Path] = {}  # each start_server process's output file, by pid


def start_server(
    tmp_path: Path, db: str, *options: str, **extra_env: str
) -> tuple[subprocess.Popen[str], str]:
    """A `waypost server` process (with `extra_env` in its environment) and its base URL;
    stop it with `stop_server`; what it printed is in `server_log(proc)`."""
    port = free_port()
    env = {**server_env(tmp_path / "notes.jsonl"), **extra_env}
    env["PYTHONPATH"] = os.pathsep.join([str(ACCEPTANCE), env["PYTHONPATH"]])
    # Its output goes to files: a pipe nobody reads while the test runs would fill, and
    # the server would wait on its next log line.
    log = tmp_path / f"server-{port}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(WAYPOST), "server", "--db", db, "--port", str(port), *options],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=out,
            text=True,
        )
    _LOGS[proc.pid] = log
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    eventually(ready, "the server to answer", timeout=60)
    return proc, base


def server_log(proc: subprocess.Popen[str]) -> Path:
    """The file a server `start_server` started prints to."""
    return _LOGS[proc.pid]


def stop_server(proc: subprocess.Popen[str]) -> str:
    """Stop a server `start_server` started; what it printed."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=90)
    err = _LOGS.pop(proc.pid).read_text()
    assert proc.returncode == 0, err
    return err


def make_key(tmp_path: Path, db: str, tenant: str = "shop") -> str:
    """A new tenant and an admin key of it."""
    waypost_ok(tmp_path, db, "tenants", "create", tenant)
    key = waypost_ok(
        tmp_path, db, "keys", "create", "--tenant", tenant, "--principal", "ops", "--roles", "admin"
    )
    return key
