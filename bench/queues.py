"""What a queue with a concurrency limit costs against a plain start, for attempts and runs.

N runs of a workflow of one no-op activity are started at once on an engine in this
process and awaited; runs/s is N over the wall time from the first start to the last
result. Configurations, each on a fresh database:

- plain: the activity in the default queue, no limits (leased at once by the engine
  that schedules it);
- limit 1000: the activity in a queue of concurrency 1000 (never reached: the cost of
  counting under the queue's lock, and of starting through a claim);
- limit 8: the same queue at concurrency 8 (the limit holds the work back);
- workflow queue 1000 / 8: the plain workflow started on a workflow queue of that
  concurrency (each run admitted under the queue's lock in its start's commit, or by
  the end commit of a run before it).

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


# label: (what is limited: "activity" or "workflow", the limit; None: nothing)
CONFIGS: dict[str, tuple[str, int | None]] = {
    "plain": ("activity", None),
    "limit 1000": ("activity", 1000),
    "limit 8": ("activity", 8),
    "workflow queue 1000": ("workflow", 1000),
    "workflow queue 8": ("workflow", 8),
}


async def one(url: str, kind: str, limit: int | None, n: int) -> float:
    engine = wp.AsyncEngine(url)
    engine.register(bench_plain, bench_queued, plain_step, queued_step)
    workflow = bench_queued if kind == "activity" and limit is not None else bench_plain
    queue = "wlimited" if kind == "workflow" else None
    try:
        if limit is not None:
            await engine.configure_queue(queue or "limited", concurrency=limit)
        async with engine.running():
            await (await engine.start(workflow, -1, queue=queue)).result(timeout=60)  # warm-up
            began = time.perf_counter()
            handles = [await engine.start(workflow, i, queue=queue) for i in range(n)]
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
        for label, (kind, limit) in CONFIGS.items():
            rates = []
            for i in range(args.repeat):
                tag = f"{label.replace(' ', '')}-{i}"
                with fresh_database(args.db, folder, tag, "full") as url:
                    rates.append(asyncio.run(one(url, kind, limit, args.n)))
            each = ", ".join(f"{r:.0f}" for r in rates)
            print(f"| {label} | {statistics.median(rates):.0f} | {each} |")


if __name__ == "__main__":
    main()
