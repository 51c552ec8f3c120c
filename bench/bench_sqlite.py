"""Throughput of waypost on SQLite: workflows of 20 no-op activities.

Runs N workflows sequentially (one after the other) and concurrently (C at a
time), and reports workflows/s, steps/s, the per-step overhead against 20 plain
function calls, and the process CPU time per step (engine, store and SQLite
together; the no-op activities cost nothing).

    .venv/bin/python bench/bench_sqlite.py                 # defaults below
    .venv/bin/python bench/bench_sqlite.py --n 500 --concurrency 200 --activity sync
    .venv/bin/python bench/bench_sqlite.py --synchronous normal

Each configuration runs in a fresh SQLite file in a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import tempfile
import time
from dataclasses import dataclass

import waypost as wp

STEPS = 20


@wp.activity
def noop_sync(ctx: wp.ActivityContext) -> None:
    return None


@wp.activity
async def noop_async(ctx: wp.ActivityContext) -> None:
    return None


@wp.workflow(name="bench20")
async def bench20(ctx: wp.WorkflowContext, kind: str) -> int:
    step = noop_async if kind == "async" else noop_sync
    for _ in range(STEPS):
        await ctx.run(step)
    return STEPS


def plain_calls(kind: str) -> float:
    """Seconds for the same 20 calls without an engine (the baseline)."""
    fn = noop_async if kind == "async" else noop_sync

    async def twenty() -> None:
        for _ in range(STEPS):
            if kind == "async":
                await fn(None)  # type: ignore[arg-type]
            else:
                fn(None)  # type: ignore[arg-type]

    loops = 2000
    loop = asyncio.new_event_loop()
    start = time.perf_counter()
    for _ in range(loops):
        loop.run_until_complete(twenty())
    loop.close()
    return (time.perf_counter() - start) / loops


@dataclass
class Result:
    mode: str
    kind: str
    synchronous: str
    n: int
    seconds: float
    cpu: float
    commits: int

    @property
    def wf_per_s(self) -> float:
        return self.n / self.seconds

    @property
    def steps_per_s(self) -> float:
        return self.n * STEPS / self.seconds


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def run(
    mode: str, kind: str, synchronous: str, n: int, concurrency: int, folder: str, i: int
) -> Result:
    path = os.path.join(folder, f"bench-{mode}-{kind}-{synchronous}-{i}.db")
    url = f"sqlite:///{path}?synchronous={synchronous}"
    async with wp.AsyncEngine(url, max_activities=max(100, concurrency)) as engine:
        engine.register(bench20, noop_sync, noop_async)
        async with engine.running():
            warm = await engine.start(bench20, kind)
            await warm.result(timeout=60)
            commits0 = engine.store.stats.get("commits", 0)  # type: ignore[attr-defined]
            cpu0, t0 = cpu_seconds(), time.perf_counter()
            if mode == "sequential":
                for _ in range(n):
                    handle = await engine.start(bench20, kind)
                    await handle.result(timeout=60)
            else:
                sem = asyncio.Semaphore(concurrency)

                async def one() -> None:
                    async with sem:
                        handle = await engine.start(bench20, kind)
                        await handle.result(timeout=600)

                await asyncio.gather(*(one() for _ in range(n)))
            seconds = time.perf_counter() - t0
            cpu = cpu_seconds() - cpu0
            commits = engine.store.stats.get("commits", 0) - commits0  # type: ignore[attr-defined]
    return Result(mode, kind, synchronous, n, seconds, cpu, commits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300, help="workflows per configuration")
    parser.add_argument(
        "--concurrency", type=int, default=200, help="workflows at once (concurrent mode)"
    )
    parser.add_argument("--activity", choices=["async", "sync", "both"], default="both")
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    parser.add_argument("--mode", choices=["sequential", "concurrent", "both"], default="both")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per configuration; the median is shown"
    )
    parser.add_argument(
        "--loop",
        choices=["asyncio", "uvloop"],
        default="asyncio",
        help="event loop (uvloop is what the sync Engine uses when it is installed)",
    )
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

    kinds = ["async", "sync"] if args.activity == "both" else [args.activity]
    modes = ["sequential", "concurrent"] if args.mode == "both" else [args.mode]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"{STEPS} no-op activities per workflow, SQLite synchronous={args.synchronous}, "
        f"{args.loop} event loop, median of {args.repeat} runs per row\n"
    )
    header = f"{'mode':<11} {'activity':<8} {'n':>5} {'wf/s':>8} {'steps/s':>8} {'ms/wf':>7} {'overhead/step':>14} {'cpu/step':>9} {'steps/commit':>12}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="waypost-bench-") as folder:
        for kind in kinds:
            baseline = plain_calls(kind)
            for mode in modes:
                runs = [
                    asyncio.run(
                        run(mode, kind, args.synchronous, args.n, args.concurrency, folder, i)
                    )
                    for i in range(args.repeat)
                ]
                res = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
                per_wf = res.seconds / res.n
                overhead = (per_wf - baseline) / STEPS
                label = mode if mode == "sequential" else f"{args.concurrency} at once"
                print(
                    f"{label:<11} {kind:<8} {res.n:>5} {res.wf_per_s:>8.1f} {res.steps_per_s:>8.0f} "
                    f"{per_wf * 1000:>7.2f} {overhead * 1e6:>11.0f} us {res.cpu / (res.n * STEPS) * 1e6:>6.0f} us "
                    f"{res.n * STEPS / max(res.commits, 1):>12.1f}"
                )


if __name__ == "__main__":
    main()
