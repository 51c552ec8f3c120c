"""One tenant's heaviest definition and query flood; another tenant's API latency.

    .venv/bin/python bench/noisy_neighbour.py                       # SQLite, with and without the flood
    .venv/bin/python bench/noisy_neighbour.py --db postgresql://postgres@127.0.0.1:5432/postgres
    .venv/bin/python bench/noisy_neighbour.py --compute-processes 0  # everything in the server process

Starts `waypost server` on a fresh database with tenants a and b. Tenant b uses the API
as a client would, one call after another for `--seconds`: GET /healthz, a page of its
runs, one of its runs, and a start of a light definition. That is measured twice: alone,
then while tenant a, from a process of its own, keeps starting runs of the heaviest
definition its limits allow (a map of 1,000 items, each evaluating an expression of
nearly its whole budget) and asks queries of them on `--threads` threads. Prints b's
p50 and p99 by call, how many of b's runs completed, and what a's flood got.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
WAYPOST = Path(sys.executable).with_name("waypost")
FLOOD = ROOT / "tests" / "acceptance" / "noisy_flood.py"

HEAVY = """
name: heavy
start: each
steps:
  each:
    type: map
    items: items
    concurrency: 10
    iterator:
      start: crunch
      steps:
        crunch: {type: pass, set: {$.n: "length(big[?@ > `0`])"}, next: fin}
        fin: {type: succeed}
    output: $.out
    next: done
  done: {type: succeed}
"""

LIGHT = """
name: light
start: p
steps:
  p: {type: pass, set: {$.x: "a"}, next: done}
  done: {type: succeed, output: x}
"""


def waypost(db: str, *args: str) -> str:
    done = subprocess.run(
        [str(WAYPOST), *args, "--db", db], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def measure(b: httpx.Client, seconds: float) -> tuple[dict[str, list[float]], list[str]]:
    latencies: dict[str, list[float]] = collections.defaultdict(list)
    started: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for call in ("health", "page", "run", "start"):
            began = time.perf_counter()
            if call == "health":
                b.get("/healthz")
            elif call == "page":
                b.get("/v1/runs", params={"limit": 10})
            elif call == "run" and started:
                b.get(f"/v1/runs/{started[-1]}")
            elif call == "start":
                got = b.post("/v1/runs", json={"workflow": "light", "input": {"a": 1}})
                started.append(got.json()["run_id"])
            latencies[call].append(time.perf_counter() - began)
    return latencies, started


def report(what: str, latencies: dict[str, list[float]]) -> None:
    every: list[float] = []
    parts = []
    for call, values in latencies.items():
        values.sort()
        every.extend(values)
        parts.append(f"{call} {pct(values, 50):.1f}/{pct(values, 99):.1f}")
    every.sort()
    print(
        f"{what}: {len(every)} calls, p50 {pct(every, 50):.1f} ms, p99 {pct(every, 99):.1f} ms "
        f"(by call, p50/p99 ms: {', '.join(parts)})"
    )


def pct(values: list[float], p: int) -> float:
    return values[max(0, int(len(values) * p / 100) - 1)] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default="", help="a PostgreSQL server URL (default: SQLite)")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--threads", type=int, default=16, help="tenant a's flood threads")
    parser.add_argument("--compute-processes", default="1")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="waypost-noisy-")
    if args.db:
        import psycopg

        name = f"waypost_noisy_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.db, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        db = f"{args.db.rsplit('/', 1)[0]}/{name}"
    else:
        db = f"sqlite:///{folder}/noisy.db"
    waypost(db, "tenants", "create", "a")
    waypost(db, "tenants", "create", "b")
    key = {
        t: waypost(db, "keys", "create", "--tenant", t, "--principal", t, "--roles", "admin")
        for t in ("a", "b")
    }
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [
            str(WAYPOST),
            "server",
            "--db",
            db,
            "--port",
            str(port),
            "--compute-processes",
            args.compute_processes,
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(folder, "server.log"), "w"),  # noqa: SIM115
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        auth = {t: {"Authorization": f"Bearer {k}"} for t, k in key.items()}
        with (
            httpx.Client(base_url=base, headers=auth["a"], timeout=120) as a,
            httpx.Client(base_url=base, headers=auth["b"], timeout=120) as b,
        ):
            yaml = {"Content-Type": "application/yaml"}
            a.post("/v1/definitions", content=HEAVY, headers=yaml).raise_for_status()
            b.post("/v1/definitions", content=LIGHT, headers=yaml).raise_for_status()
            for _ in range(20):
                b.get("/healthz")
            alone, _ = measure(b, args.seconds)
            report("tenant b alone", alone)
            flood = subprocess.Popen(
                [
                    sys.executable,
                    str(FLOOD),
                    base,
                    key["a"],
                    str(args.seconds + 5),
                    str(args.threads),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(3)
            during, started = measure(b, args.seconds)
            counts = flood.communicate()[0].strip()
            report("tenant b during a's flood", during)
            deadline = time.monotonic() + 60
            done = 0
            for run_id in started:
                while time.monotonic() < deadline:
                    if b.get(f"/v1/runs/{run_id}").json()["status"] == "completed":
                        done += 1
                        break
                    time.sleep(0.05)
            print(f"tenant b's runs started during the flood: {len(started)}, completed {done}")
            print(f"tenant a's flood: {json.loads(counts)}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(120)
        if args.db:
            import psycopg

            with psycopg.connect(args.db, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
