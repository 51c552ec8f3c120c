"""The HTTP path: starts per second through `waypost server`, and signal -> continue latency.

    .venv/bin/python bench/http_api.py [--db postgresql://...] [--starts 500] [--clients 16]
                                   [--signals 200] [--repeat 3]

A real `waypost server` process (one, with its workers) on a fresh database; the
benchmark's process is the client, over keep-alive HTTP connections:

- starts/s: `POST /v1/runs` of a workflow that returns at once, from `--clients`
  concurrent connections; the rate of 201 answers (the runs themselves finish in the
  background);
- signal -> continue: runs wait for a signal; for each, the time from sending
  `POST /v1/runs/{id}/signals/go` until the workflow, woken by it, records `ctx.now()`
  in its result (so the wake-up and the workflow task are in the figure, the result's
  commit and the client's polling are not). p50 and p99.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx

import waypost as wp

HERE = Path(__file__).resolve().parent
WAYPOST = Path(sys.executable).with_name("waypost")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def fresh_database(db: str, folder: str) -> tuple[str, str | None]:
    if not db.startswith("postgres"):
        return f"sqlite:///{folder}/bench.db", None
    import psycopg

    name = f"waypost_bench_http_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"{db.rpartition('/')[0]}/{name}", name


def drop_database(db: str, name: str | None) -> None:
    if name is None:
        return
    import psycopg

    with psycopg.connect(db, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def starts(base: str, key: str, n: int, clients: int) -> float:
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits) as http:
        queue = iter(range(n))

        async def client() -> None:
            for i in queue:
                answer = await http.post("/v1/runs", json={"workflow": "http_noop", "input": i})
                assert answer.status_code == 201, answer.text

        began = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return n / (time.perf_counter() - began)


async def waiting(http: httpx.AsyncClient, run_id: str) -> None:
    for _ in range(3000):
        if (await http.get(f"/v1/runs/{run_id}")).json()["waiting_for"]:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError(f"run {run_id} never waited")


async def signal_latencies(base: str, key: str, n: int) -> list[float]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
        ids = []
        for _ in range(n):
            answer = await http.post("/v1/runs", json={"workflow": "http_wait"})
            ids.append(answer.json()["run_id"])
        for run_id in ids:  # every run waits before the first signal goes out
            await waiting(http, run_id)
        sent: dict[str, float] = {}
        for run_id in ids:
            sent[run_id] = time.time()
            await http.post(f"/v1/runs/{run_id}/signals/go", json={"payload": None})
            await asyncio.sleep(0.005)  # one at a time: latency, not throughput
        latencies = []
        for run_id in ids:
            done = (await http.get(f"/v1/runs/{run_id}/result", params={"wait": 30})).json()
            continued = datetime.fromisoformat(done["result"]).timestamp()
            latencies.append((continued - sent[run_id]) * 1000)
        return latencies


def one_round(db: str, args: argparse.Namespace) -> tuple[float, list[float]]:
    with tempfile.TemporaryDirectory() as folder:
        url, created = fresh_database(db, folder)
        try:
            engine = wp.Engine(url)
            engine.create_tenant("bench")
            key = engine.create_key("bench", ["starter", "viewer"], tenant="bench").key
            engine.close()
            port = free_port()
            env = {
                **os.environ,
                "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            }
            proc = subprocess.Popen(
                [str(WAYPOST), "server", "--db", url, "--port", str(port), "--app", "http_app"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            base = f"http://127.0.0.1:{port}"
            try:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        if httpx.get(f"{base}/readyz").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError("the server did not start")
                    time.sleep(0.1)
                asyncio.run(starts(base, key, 20, 2))  # warm-up
                rate = asyncio.run(starts(base, key, args.starts, args.clients))
                latencies = asyncio.run(signal_latencies(base, key, args.signals))
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
        finally:
            drop_database(db, created)
    return rate, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite", help="'sqlite' or a PostgreSQL server URL")
    parser.add_argument("--starts", type=int, default=500)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--signals", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rates, p50s, p99s = [], [], []
    for _ in range(args.repeat):
        rate, latencies = one_round(args.db, args)
        cuts = statistics.quantiles(latencies, n=100)
        rates.append(rate)
        p50s.append(cuts[49])
        p99s.append(cuts[98])
        print(
            f"starts/s {rate:7.1f}   signal->continue p50 {cuts[49]:6.1f} ms  p99 {cuts[98]:6.1f} ms"
        )
    store = "PostgreSQL" if args.db.startswith("postgres") else "SQLite"
    print(
        f"{store} median of {args.repeat}: starts/s {statistics.median(rates):.1f}, "
        f"signal->continue p50 {statistics.median(p50s):.1f} ms, p99 {statistics.median(p99s):.1f} ms"
    )


if __name__ == "__main__":
    main()
