"""Do live workers keep their leases at full load? Leases lost, counted.

Starts `--workers` `waypost worker` processes with a short lease (`--lease`, 2 s by
default, renewed every third of it), drives `--n` workflows of 20 activities
(`workflows.py`), `--concurrency` at a time, from this process, while `--held` runs
each hold one activity for `--hold` seconds (several leases long, so its lease is
renewed all along, `lease_app.py`), and counts every sign of a lease lost by a live
worker:

- **expired / taken over**: the workers' own `waypost_lease_expirations_total` and
  `waypost_lease_takeovers_total` (scraped from each worker's metrics port at the end);
- **late results**: `LateResultIgnored` events (an attempt finished after its lease
  had gone to another);
- **lost worker**: activity attempts failed as "lost its worker".

All workers stay alive throughout, so every count should be 0. The load average
before and after each repeat is printed: on a busy machine a lease is under most strain.

With `--workers 0` the engine runs in this process instead, and the benchmark also
times every lease renewal (the store's `renew_leases`, from the call to its return):
how long a renewal waited behind the engine's own claims and commits.

    .venv/bin/python bench/leases.py --db postgresql://postgres@127.0.0.1:5432/postgres
    .venv/bin/python bench/leases.py --workers 3 --n 600 --lease 2 --repeat 3
    .venv/bin/python bench/leases.py                                    # SQLite
    .venv/bin/python bench/leases.py --workers 0 --lease 1              # in-process, timed
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import waypost as wp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from lease_app import bench20, held, hold, noop_async, noop_sync  # noqa: E402

WAYPOST = Path(sys.executable).with_name("waypost")


@contextmanager
def fresh_database(db: str, folder: str, label: str) -> Iterator[str]:
    if db == "sqlite":
        yield f"sqlite:///{folder}/leases-{label}.db"
        return
    import psycopg

    name = f"waypost_bench_{uuid.uuid4().hex[:10]}"
    base = db.rsplit("/", 1)[0]
    with psycopg.connect(db, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(db, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def query(url: str, sql: str) -> int:
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///").split("?")[0])
        try:
            return int(conn.execute(sql).fetchone()[0])
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url, options="-c search_path=waypost") as conn:
        row = conn.execute(sql).fetchone()
        return int(row[0]) if row else 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int, name: str) -> float:
    """The sum of a counter's samples on a worker's metrics port."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if re.match(rf"{name}(\{{|\s)", line):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def drive(url: str, args: argparse.Namespace) -> float:
    n, concurrency, kind, workers = args.n, args.concurrency, args.activity, args.workers
    async with wp.AsyncEngine(url, poll_interval=0.01) as engine:
        engine.register(bench20, noop_sync, noop_async, held, hold)
        for _ in range(workers):  # the workers are up and serving
            await (await engine.start(bench20, kind)).result(timeout=120)
        for _ in range(args.held):
            await engine.start(held, args.hold)
        t0 = time.perf_counter()
        started = done = 0
        while done < n:
            while started - done < concurrency and started < n:
                await engine.start(bench20, kind)
                started += 1
            await asyncio.sleep(0.05)
            completed = "SELECT count(*) FROM runs WHERE status = 'completed'"
            done = await asyncio.to_thread(query, url, completed) - workers
        seconds = time.perf_counter() - t0
        for run in await engine.list_runs(workflow="held", limit=1000):
            await wp.AsyncRunHandle(engine, run.run_id).result(timeout=600)
        return seconds


async def in_process(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The engine in this process, its renewals timed."""
    from waypost.observability import Metrics

    metrics = Metrics(process=False)
    renewals: list[float] = []
    load0 = os.getloadavg()[0]
    async with wp.AsyncEngine(
        url, lease=args.lease, max_activities=1000, max_workflows=1000, observer=metrics
    ) as engine:
        engine.register(bench20, noop_sync, noop_async, held, hold)
        store: Any = engine.store
        renew = store.renew_leases

        async def timed(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return await renew(*a, **k)
            finally:
                renewals.append(time.perf_counter() - t)

        store.renew_leases = timed
        async with engine.running():
            await (await engine.start(bench20, args.activity)).result(timeout=120)
            holding = [await engine.start(held, args.hold) for _ in range(args.held)]
            t0 = time.perf_counter()
            handles = []
            for i in range(args.n):
                handles.append(await engine.start(bench20, args.activity))
                if i >= args.concurrency:
                    await handles[i - args.concurrency].result(timeout=600)
            for h in handles:
                await h.result(timeout=600)
            seconds = time.perf_counter() - t0
            for h in holding:
                await h.result(timeout=600)
    late = query(url, "SELECT count(*) FROM events WHERE type = 'LateResultIgnored'")
    renewals.sort()

    def counter(name: str) -> int:
        return int(
            sum(
                metrics.registry.get_sample_value(name, {"kind": kind}) or 0.0
                for kind in ("workflow", "activity")
            )
        )

    return {
        "wf_per_s": args.n / seconds,
        "expired": counter("waypost_lease_expirations_total"),
        "taken_over": counter("waypost_lease_takeovers_total"),
        "late_results": late,
        "lost_worker": query(
            url,
            "SELECT count(*) FROM events WHERE type = 'ActivityFailed' "
            "AND data LIKE '%stopped renewing the lease%'",
        ),
        "workers_alive": True,
        "load_before": load0,
        "load_after": os.getloadavg()[0],
        "renewals": len(renewals),
        "renew_p50_ms": renewals[len(renewals) // 2] * 1000 if renewals else 0.0,
        "renew_p99_ms": renewals[int(len(renewals) * 0.99)] * 1000 if renewals else 0.0,
        "renew_max_ms": renewals[-1] * 1000 if renewals else 0.0,
    }


def one_repeat(url: str, args: argparse.Namespace) -> dict[str, Any]:
    if args.workers == 0:
        return asyncio.run(in_process(url, args))
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    ports = [free_port() for _ in range(args.workers)]
    procs = [
        subprocess.Popen(
            [
                *(str(WAYPOST), "worker", "--db", url, "--app", "lease_app"),
                *("--lease", str(args.lease), "--metrics-port", str(port)),
                *("--metrics-host", "127.0.0.1"),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    load0 = os.getloadavg()[0]
    try:
        seconds = asyncio.run(drive(url, args))
        expired = sum(scrape(p, "waypost_lease_expirations_total") for p in ports)
        taken = sum(scrape(p, "waypost_lease_takeovers_total") for p in ports)
        alive = all(p.poll() is None for p in procs)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)
    late = query(url, "SELECT count(*) FROM events WHERE type = 'LateResultIgnored'")
    lost = query(
        url,
        "SELECT count(*) FROM events WHERE type = 'ActivityFailed' "
        "AND data LIKE '%stopped renewing the lease%'",
    )
    return {
        "wf_per_s": args.n / seconds,
        "expired": int(expired),
        "taken_over": int(taken),
        "late_results": late,
        "lost_worker": lost,
        "workers_alive": alive,
        "load_before": load0,
        "load_after": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite", help="sqlite, or a PostgreSQL URL")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--activity", choices=["async", "sync"], default="async")
    parser.add_argument("--held", type=int, default=20, help="runs holding a long activity")
    parser.add_argument("--hold", type=float, default=20.0, help="seconds each holds it")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    store = "sqlite" if args.db == "sqlite" else "postgresql"
    print(
        f"{store}: {args.workers} workers, lease {args.lease:g}s, {args.n} workflows of 20 "
        f"{args.activity} activities, {args.concurrency} at once"
    )
    print("repeat  wf/s  expired  taken_over  late_results  lost_worker  alive  load")
    with tempfile.TemporaryDirectory() as folder:
        for r in range(args.repeat):
            with fresh_database(args.db, folder, str(r)) as url:
                out = one_repeat(url, args)
            print(
                f"{r + 1:>6} {out['wf_per_s']:>5.1f} {out['expired']:>8} {out['taken_over']:>11}"
                f" {out['late_results']:>13} {out['lost_worker']:>12} {out['workers_alive']!s:>6}"
                f"  {out['load_before']:.1f}->{out['load_after']:.1f}"
                + (
                    f"  renewals {out['renewals']}: p50 {out['renew_p50_ms']:.1f} ms,"
                    f" p99 {out['renew_p99_ms']:.1f} ms, max {out['renew_max_ms']:.1f} ms"
                    if "renewals" in out
                    else ""
                )
            )


if __name__ == "__main__":
    main()
