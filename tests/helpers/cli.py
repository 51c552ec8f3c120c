"""`waypost` commands run as a user runs them, and their outcomes read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .servers import EXAMPLES, WAYPOST


def waypost(
    tmp_path: Path,
    *args: str,
    db: Path | None = None,
    url: str | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """A `waypost` command on a SQLite file (`db`, default `waypost.db` in `tmp_path`) or
    on the database at `url`, reading `stdin` if given."""
    database = db if db is not None else tmp_path / "waypost.db"
    return subprocess.run(
        [str(WAYPOST), *args, "--db", url or f"sqlite:///{database}"],
        cwd=tmp_path,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k not in ("WAYPOST_DB", "WAYPOST_DEBUG")},
        check=False,
    )


def create_key(
    tmp_path: Path, tenant: str, principal: str, roles: str, *more: str
) -> subprocess.CompletedProcess[str]:
    """`waypost keys create` of `principal` in `tenant` with `roles` (and `more` options)."""
    who = ("--tenant", tenant, "--principal", principal, "--roles", roles)
    return waypost(tmp_path, "keys", "create", *who, *more)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stderr
    return proc


def failed(proc: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a failed command."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr
    return proc.stderr


def run(
    args: list[str], cwd: Path, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """A command, its environment the test's with `env` added."""
    return subprocess.run(
        args,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
        check=False,
    )


def waypost_on(
    db_url: str,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`waypost <args> --db <db_url>`, in the test's environment unless `env` is given."""
    return subprocess.run(
        [str(WAYPOST), *args, "--db", db_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
        check=False,
    )


def example_run(script: str) -> subprocess.CompletedProcess[str]:
    """`python examples/<script>`, which must succeed."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done
