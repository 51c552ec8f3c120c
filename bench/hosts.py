"""Throughput with 1, 2 and 3 engine hosts on one PostgreSQL.

Each host is a network namespace of its own with a veth link to the machine, where a
private PostgreSQL server listens (tests/helpers/netns.py, tests/helpers/pgserver.py);
each runs one `waypost worker` serving `workflows.py`. The benchmark's process starts
N workflows of 20 no-op sync steps at once through an engine that serves nothing, and
times them from the first start until all completed. Every host shares the machine's
cores: on a 2-core machine this shows what coordination costs, not what more machines
would add (docs/scaling.md has the capacity model).

Needs root (network namespaces) and Debian's PostgreSQL binaries.

    .venv/bin/python bench/hosts.py [--runs 300] [--hosts 1,2,3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _db import completed_runs, fresh_postgres

import waypost as wp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.netns import NETWORK, Host, can_make_hosts, hosts  # noqa: E402
from tests.helpers.pgserver import private_postgres  # noqa: E402

WAYPOST = Path(sys.executable).with_name("waypost")
STEPS = 20


def serve(host: Host, url: str, log: Path) -> subprocess.Popen[bytes]:
    """`waypost worker` for `workflows.py`, inside `host`."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "bench")}
    with open(log, "ab") as out:
        return subprocess.Popen(
            host.command(str(WAYPOST), "worker", "--db", url, "--app", "workflows"),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )


def wait_for(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def once(server_url: str, port: int, made: list[Host], runs: int, log: Path) -> float:
    """Steps per second with the workers of `made`, on a fresh database."""
    with fresh_postgres(server_url, prefix="waypost_hosts") as url:
        engine = wp.Engine(url)  # serves nothing: starts runs and reads them
        import workflows

        engine.register(workflows.bench20, workflows.noop_sync, workflows.noop_async)
        name = url.rsplit("/", 1)[1]
        workers = [serve(h, f"postgresql://postgres@{h.address}:{port}/{name}", log) for h in made]
        try:
            import psycopg

            def registered() -> bool:
                with psycopg.connect(url) as conn:
                    row = conn.execute("SELECT count(*) FROM waypost.workers").fetchone()
                    return row is not None and row[0] == len(made)

            wait_for("the workers to register", registered, 60)
            began = time.perf_counter()
            for _ in range(runs):
                engine.start(workflows.bench20, "sync")
            wait_for("the runs", lambda: completed_runs(url) >= runs, 600)
            seconds = time.perf_counter() - began
        finally:
            for w in workers:
                w.send_signal(signal.SIGTERM)
            for w in workers:
                w.wait(60)
            engine.close()
    return runs * STEPS / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--hosts", default="1,2,3")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    why = can_make_hosts()
    if why is not None:
        raise SystemExit(f"cannot make hosts here: {why}")
    counts = [int(n) for n in args.hosts.split(",")]
    log = Path("/tmp") / f"waypost-bench-hosts-{os.getpid()}.log"
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"{args.runs} workflows x {STEPS} no-op sync steps, all started at once; "
        f"median of {args.repeat}; workers' errors in {log}"
    )
    with private_postgres(NETWORK, listen_addresses="'*'") as server, hosts(max(counts)) as made:
        for n in counts:
            rates = []
            for _ in range(args.repeat):  # the counts' runs alternate with each repeat
                rates.append(once(server.url, server.port, made[:n], args.runs, log))
            print(
                f"{n} host(s): {statistics.median(rates):7.0f} steps/s "
                f"(runs: {', '.join(f'{r:.0f}' for r in rates)})",
                flush=True,
            )


if __name__ == "__main__":
    main()
