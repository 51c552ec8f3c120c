"""A pg_auto_failover formation of a test's own: a monitor and two PostgreSQL 15 nodes
in synchronous replication, each with its own port and data directory in one temporary
directory, so that a test can kill the primary or switch it over without touching the
server every other test uses.

The tools are Debian's `pg-auto-failover-cli` and `postgresql-15-auto-failover`
(`.ci/run` installs them); as root, they run as the `postgres` user. The monitor is
tuned to fail over in seconds (its defaults take about a minute: a node is unhealthy
after 20 s without news, and a primary that does not answer is waited for 30 s more).
Everything trusts connections from 127.0.0.1 and listens there only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from .pgserver import as_postgres, free_port
from .polling import eventually

BIN = Path("/usr/lib/postgresql/15/bin")  # the version Debian builds the extension for
EXTENSION = Path("/usr/share/postgresql/15/extension/pgautofailover.control")
DATABASE = "waypost"
# pg_auto_failover 2.0's settings on the monitor (milliseconds; defaults in comments).
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": 1000,  # 5000: how often each node is checked
    "pgautofailover.health_check_timeout": 1000,  # 5000: connect timeout of a check
    "pgautofailover.health_check_max_retries": 1,  # 2
    "pgautofailover.health_check_retry_delay": 500,  # 2000
    "pgautofailover.node_considered_unhealthy_timeout": 2000,  # 20000: since its last report
    "pgautofailover.primary_demote_timeout": 2000,  # 30000: waited for a lost primary
    "pgautofailover.startup_grace_period": 1000,  # 10000: no failover this soon after start
}
# Small servers that checkpoint at once (pg_basebackup waits for a checkpoint, which
# would otherwise be spread over minutes); the page cache survives the processes a test
# kills, so fsync buys nothing here.
SERVER_SETTINGS = {
    "shared_buffers": "'32MB'",
    "fsync": "off",
    "checkpoint_completion_target": "0",
}


def available() -> bool:
    """pg_auto_failover (its `pg_autoctl` and the monitor's extension) and PostgreSQL
    15 are installed."""
    return shutil.which("pg_autoctl") is not None and EXTENSION.exists() and BIN.is_dir()


@dataclass
class Node:
    """One server of the formation and the `pg_autoctl` process that runs it."""

    name: str
    port: int
    data: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        database = "pg_auto_failover" if self.name == "monitor" else DATABASE
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().split()[0])
        return None

    def writable(self) -> tuple[bool, bool]:
        """(promoted, takes writes): out of recovery, and no longer read-only (a node
        being promoted stays read-only until the monitor confirms the old primary is
        gone); both false while it does not answer."""
        try:
            with psycopg.connect(self.url, connect_timeout=1, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')"
                ).fetchone()
        except psycopg.Error:
            return False, False
        assert row is not None
        promoted = not row[0]
        return promoted, promoted and row[1] == "off"


class Formation:
    """A monitor and two nodes, `node1` the first primary; `url` lists both nodes."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="waypost-pgaf-"))
        os.chmod(self.dir, 0o777)  # the servers run as `postgres`
        self.monitor = Node("monitor", free_port(), self.dir / "monitor")
        self.nodes = [Node(f"node{i}", free_port(), self.dir / f"node{i}") for i in (1, 2)]
        # pg_autoctl keeps its configuration and state under XDG directories: here,
        # not in the postgres user's home; the servers' sockets are here too.
        self.env = {
            **os.environ,
            "XDG_CONFIG_HOME": str(self.dir / "config"),
            "XDG_DATA_HOME": str(self.dir / "share"),
            "XDG_RUNTIME_DIR": str(self.dir / "run"),
            "PGHOST": str(self.dir),
        }

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        return f"postgresql://postgres@{hosts}/{DATABASE}?target_session_attrs=read-write"

    # -- starting ---------------------------------------------------------------------
    def start(self) -> None:
        """The monitor, then node1 (the primary), then node2 (its synchronous standby)."""
        self._initdb(self.monitor, self.nodes[0])  # node2 is a copy of node1
        self._run(self.monitor, "monitor")
        eventually(self._monitor_answers, "the monitor to answer", timeout=60, interval=0.1)
        with psycopg.connect(self.monitor.url, autocommit=True) as conn:
            for name, value in MONITOR_SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {name} = {value}")
            conn.execute("SELECT pg_reload_conf()")
        node1, node2 = self.nodes
        self._run(node1, "postgres")
        eventually(lambda: self.states().get("node1") == ("single", "single"), "node1", 60, 0.1)
        self._run(node2, "postgres")
        self.wait_until_replicating(timeout=90)

    def _initdb(self, *nodes: Node) -> None:
        initdb = [
            as_postgres(
                str(BIN / "initdb"), "-D", str(n.data), "-A", "trust", "-U", "postgres", "--no-sync"
            )
            for n in nodes
        ]
        procs = [
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for cmd in initdb
        ]
        for node, proc in zip(nodes, procs, strict=True):
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"initdb of {node.name} failed: {out.decode()}")
            conf = {**SERVER_SETTINGS, "unix_socket_directories": f"'{self.dir}'"}
            with open(node.data / "postgresql.conf", "a") as f:
                f.writelines(f"{k} = {v}\n" for k, v in conf.items())

    def _run(self, node: Node, kind: str) -> None:
        cmd = [
            "pg_autoctl", "create", kind, "--pgdata", str(node.data),
            "--pgport", str(node.port), "--pgctl", str(BIN / "pg_ctl"),
            "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
            "--auth", "trust", "--no-ssl", "--run",
        ]  # fmt: skip
        if kind == "postgres":
            monitor = f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover"
            cmd += ["--name", node.name, "--dbname", DATABASE, "--monitor", monitor]
        with open(self.dir / f"{node.name}.log", "ab") as log:
            node.proc = subprocess.Popen(
                as_postgres(*cmd),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.dir,
                start_new_session=True,  # its own process group: the node dies as one
            )

    def _monitor_answers(self) -> bool:
        try:
            with psycopg.connect(self.monitor.url, connect_timeout=1) as conn:
                conn.execute("SELECT count(*) FROM pgautofailover.formation")
        except psycopg.Error:
            return False
        return True

    # -- reading the monitor ----------------------------------------------------------
    def states(self) -> dict[str, tuple[str, str]]:
        """Each node's (reported, assigned) state, as the monitor has them."""
        with psycopg.connect(self.monitor.url, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node"
            ).fetchall()
        return {name: (reported, goal) for name, reported, goal in rows}

    def wait_until_replicating(self, timeout: float) -> None:
        """Until one node is the primary and the other its synchronous standby."""
        both = {("primary", "primary"), ("secondary", "secondary")}
        eventually(
            lambda: set(self.states().values()) == both,
            "a primary and a standby",
            timeout,
            interval=0.2,
        )

    def timeline(self, since: float) -> list[str]:
        """What the monitor decided and heard since `since` (a `time.time()`), each
        line with its seconds after it."""
        with psycopg.connect(self.monitor.url, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT extract(epoch FROM eventtime)::float8, description "
                "FROM pgautofailover.event WHERE eventtime >= to_timestamp(%s) ORDER BY eventid",
                (since,),
            ).fetchall()
        return [f"{at - since:+6.2f} s  {what}" for at, what in rows]

    def primary(self) -> Node:
        states = self.states()
        (node,) = [n for n in self.nodes if states.get(n.name) == ("primary", "primary")]
        return node

    def other(self, node: Node) -> Node:
        (rest,) = [n for n in self.nodes if n is not node]
        return rest

    # -- what a test does to it -------------------------------------------------------
    def kill(self, node: Node) -> None:
        """The node dies at once, as its machine would: `pg_autoctl` (which would
        otherwise start PostgreSQL again) and its postmaster get SIGKILL."""
        postmaster = node.postmaster_pid()
        assert node.proc is not None
        os.killpg(node.proc.pid, signal.SIGKILL)
        if postmaster is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGKILL)
        node.proc.wait(30)

    def switchover(self, tries: int = 3) -> None:
        """A planned switchover (`pg_autoctl perform switchover`): returns once done. The
        monitor refuses one while the formation is still settling (a loaded machine), so
        it is asked again, up to `tries` times, once the nodes are where they should be."""
        said, old = [], self.primary()
        for _ in range(tries):
            self.wait_until_replicating(timeout=60)
            if self.primary() is not old:
                return  # the last ask failed only after it had switched
            proc = subprocess.run(
                as_postgres(
                    "pg_autoctl", "perform", "switchover", "--pgdata", str(self.monitor.data)
                ),
                capture_output=True,
                text=True,
                timeout=120,
                env=self.env,
                cwd=self.dir,
            )
            if proc.returncode == 0:
                return
            said.append(f"{proc.stdout}{proc.stderr}")
        raise RuntimeError("switchover failed:\n" + "\n".join(said))

    # -- stopping ---------------------------------------------------------------------
    def remove(self) -> None:
        """Stop what still runs (PostgreSQL's immediate shutdown), then remove it all."""
        running = [n for n in (*self.nodes, self.monitor) if n.proc and n.proc.poll() is None]
        for node in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.proc.pid, signal.SIGQUIT)  # type: ignore[union-attr]
        deadline = time.monotonic() + 20
        for node in running:
            assert node.proc is not None
            try:
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait(30)
        for node in (*self.nodes, self.monitor):
            _drop_shared_memory(node)
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> str:
        """The tail of each `pg_autoctl` log, for a failure's message."""
        return "\n".join(
            f"== {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:])
            for path in sorted(self.dir.glob("*.log"))
        )


def _drop_shared_memory(node: Node) -> None:
    """A server killed with SIGKILL leaves its System V shared memory segment behind
    (a clean stop removes it): removed, if it is still the one its `postmaster.pid`
    names and nothing is attached to it any more."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        lines = (node.data / "postmaster.pid").read_text().splitlines()
        key, shmid = (int(field) for field in lines[6].split())
        segments = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        # Columns: key shmid perms size cpid lpid nattch ...
        ours = [str(key), str(shmid)]
        if any(row.split()[:2] == ours and row.split()[6] == "0" for row in segments):
            subprocess.run(["ipcrm", "-m", str(shmid)], capture_output=True, timeout=10)


@contextlib.contextmanager
def formation() -> Iterator[Formation]:
    """A started `Formation`, removed afterwards."""
    f = Formation()
    try:
        try:
            f.start()
        except (AssertionError, RuntimeError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"the formation did not start: {exc}\n{f.logs()}") from exc
        yield f
    finally:
        f.remove()
