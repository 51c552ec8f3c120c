"""A PostgreSQL server of a test's own: `initdb` into a temporary directory, a free
port, started and stopped for real, so a test can take the database away without
touching the server every other test uses.

The binaries are Debian's (`/usr/lib/postgresql/<version>/bin`); as root, they run as
the `postgres` user, as PostgreSQL requires.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

_ROOT = Path("/usr/lib/postgresql")


def _bin(name: str) -> str:
    versions = sorted(os.listdir(_ROOT), key=lambda v: int(v.split(".")[0]))
    return str(_ROOT / versions[-1] / "bin" / name)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_postgres(*cmd: str) -> list[str]:
    """`cmd` to run as the `postgres` user (PostgreSQL's tools refuse to run as root)."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)


class PrivatePostgres:
    """One PostgreSQL server in its own data directory, on its own port."""

    def __init__(self, allow: str | None = None, **settings: str) -> None:
        """`allow`: a network (CIDR) whose clients get in without a password, as from
        127.0.0.1 (with `listen_addresses` that reach it); `settings`: postgresql.conf's."""
        self.dir = Path(tempfile.mkdtemp(prefix="waypost-pg-"))
        os.chmod(self.dir, 0o777)  # the server runs as `postgres`
        self.data = self.dir / "data"
        self.port = free_port()
        self._pg_ctl("initdb", "-o", "-A trust -U postgres --no-sync")
        conf = {
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.dir}'",
            "fsync": "off",
            **settings,
        }
        with open(self.data / "postgresql.conf", "a") as f:
            f.writelines(f"{k} = {v}\n" for k, v in conf.items())
        if allow is not None:
            with open(self.data / "pg_hba.conf", "a") as f:
                f.write(f"host all all {allow} trust\n")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg_ctl(self, *args: str) -> None:
        cmd = as_postgres(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"))
        proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {proc.stdout}{proc.stderr}")

    def start(self) -> None:
        self._pg_ctl("-w", "start")

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server (`immediate`: as a crash would, no clean shutdown)."""
        self._pg_ctl("-m", mode, "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def private_postgres(allow: str | None = None, **settings: str) -> Iterator[PrivatePostgres]:
    """A started `PrivatePostgres`, removed afterwards."""
    server = PrivatePostgres(allow, **settings)
    try:
        server.start()
        yield server
    finally:
        server.remove()
