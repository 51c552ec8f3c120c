"""How two worker processes share a limited queue, without and with a per-worker limit.

Two `waypost worker` processes serve one database; the queue "limited" allows 3
attempts at once. This process (serving nothing) starts N runs of one short attempt
each and awaits them; each attempt answers the pid that ran it. Configurations, each on
a fresh database: **concurrency 3** alone, and **+ worker_concurrency 2** (no worker
may hold more than 2 of the 3). Printed: the share of attempts the busier worker ran,
and runs/s (N over the wall time from the first start to the last result).

    .venv/bin/python bench/queue_fairness.py [--db sqlite|postgresql://...] [--n 150]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import fairness_app as app  # type: ignore[import-not-found]  # noqa: E402
from bench import fresh_database  # type: ignore[import-not-found]  # noqa: E402

import waypost as wp  # noqa: E402

CONFIGS: dict[str, int | None] = {"concurrency 3": None, "+ worker_concurrency 2": 2}


def one(url: str, per_worker: int | None, n: int) -> tuple[float, float]:
    engine = wp.Engine(url, poll_interval=0.05)  # starts runs, serves nothing
    engine.register(app.fair_run, app.fair_step)
    script = Path(sys.executable).with_name("waypost")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "waypost.cli"]
    path = [str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    workers = [
        subprocess.Popen(
            [*command, "worker", "--db", url, "--app", "fairness_app"],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        engine.configure_queue("limited", concurrency=3, worker_concurrency=per_worker)
        engine.start(app.fair_run, -1).result(timeout=60)  # both workers are up
        began = time.perf_counter()
        runs = [engine.start(app.fair_run, i) for i in range(n)]
        pids = Counter(r.result(timeout=300) for r in runs)
        rate = n / (time.perf_counter() - began)
        return max(pids.values()) / n, rate
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(60)
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite")
    parser.add_argument("--n", type=int, default=150)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"{platform.machine()}, Python {platform.python_version()}, db {args.db.split('@')[-1]}")
    print("| configuration | busier worker's share | runs/s |")
    print("| --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for label, per_worker in CONFIGS.items():
            shares, rates = [], []
            for i in range(args.repeat):
                tag = f"fair-{per_worker}-{i}"
                with fresh_database(args.db, folder, tag, "full") as url:
                    share, rate = one(url, per_worker, args.n)
                shares.append(f"{share:.0%}")
                rates.append(f"{rate:.0f}")
            print(f"| {label} | {', '.join(shares)} | {', '.join(rates)} |")


if __name__ == "__main__":
    main()
