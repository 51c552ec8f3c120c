"""What a queue with a concurrency limit costs against a plain start.

N runs of a workflow of one no-op activity are started at once on an engine in this
process and awaited; runs/s is N over the wall time from the first start to the last
result. Configurations, each on a fresh database:

- plain: the activity in the default queue, no limits (leased at once by the engine
  that schedules it);
- limit 1000: the activity in a queue of concurrency 1000 (never reached: the cost of
  counting under the queue's lock, and of starting through a claim);
- limit 8: the same queue at concurrency 8 (the limit holds the work back).

    .venv/bin/python bench/queues.py [--db sqlite|postgresql://...] [--n 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench import fresh_database  # type: ignore[import-not-found]

import waypost as wp


@wp.activity()
async def plain_step(ctx: wp.ActivityContext, n: int) -> int:
    return n


@wp.activity(queue="limited")
async def queued_step(ctx: wp.ActivityContext, n: int) -> int:
    return n


@wp.workflow(name="bench_plain")
async def bench_plain(ctx: wp.WorkflowContext, n: int) -> int:
    return int(await ctx.run(plain_step, n))


@wp.workflow(name="bench_queued")
async def bench_queued(ctx: wp.WorkflowContext, n: int) -> int:
    return int(await ctx.run(queued_step, n))


CONFIGS = {"plain": None, "limit 1000": 1000, "limit 8": 8}


async def one(url: str, limit: int | None, n: int) -> float:
    engine = wp.AsyncEngine(url)
    engine.register(bench_plain, bench_queued, plain_step, queued_step)
    workflow = bench_plain if limit is None else bench_queued
    try:
        if limit is not None:
            await engine.configure_queue("limited", concurrency=limit)
        async with engine.running():
            await (await engine.start(workflow, -1)).result(timeout=60)  # warm-up
            began = time.perf_counter()
            handles = [await engine.start(workflow, i) for i in range(n)]
            for h in handles:
                await h.result(timeout=300)
            return n / (time.perf_counter() - began)
    finally:
        await engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{platform.machine()}, Python {platform.python_version()}, db {args.db.split('@')[-1]}")
    print("| configuration | runs/s (median) | runs/s (each) |")
    print("| --- | ---: | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for label, limit in CONFIGS.items():
            rates = []
            for i in range(args.repeat):
                tag = f"{label.replace(' ', '')}-{i}"
                with fresh_database(args.db, folder, tag, "full") as url:
                    rates.append(asyncio.run(one(url, limit, args.n)))
            each = ", ".join(f"{r:.0f}" for r in rates)
            print(f"| {label} | {statistics.median(rates):.0f} | {each} |")


if __name__ == "__main__":
    main()
