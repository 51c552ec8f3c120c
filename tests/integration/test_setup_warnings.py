"""A warning about the set-up is said once per process, however many stores open on it.

A command, or a server process, may open several engines on one database; a test
process opens many. The facts these warnings state (a PostgreSQL server's autovacuum
setting, a SQLite file's mode) do not change from one open to the next.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers.pgserver import private_postgres
from tests.helpers.workers import acceptance_env, waypost_command


def said(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if words in r.getMessage()]


def test_autovacuum_off_is_said_once_per_process_naming_the_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with private_postgres(autovacuum="off") as server:
        with caplog.at_level("WARNING", logger="waypost.postgres"):
            for _ in range(3):
                wp.Engine(server.url).close()
        (warning,) = said(caplog, "autovacuum is off")
        assert f"127.0.0.1:{server.port}/postgres" in warning
        command = subprocess.run(
            [*waypost_command(), "runs", "list", "--db", server.url],
            env=acceptance_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert command.returncode == 0, command.stderr
    assert command.stderr.count("autovacuum is off") == 1, command.stderr


def test_a_sqlite_file_others_can_read_is_named_once_per_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "shared.db"
    wp.Engine(f"sqlite:///{path}").close()
    path.chmod(0o644)
    with caplog.at_level("WARNING"):
        for _ in range(3):
            wp.Engine(f"sqlite:///{path}").close()
    (warning,) = said(caplog, "chmod 600")
    assert f"{path} (0644)" in warning
