"""Throughput of waypost: workflows of 20 no-op activities, on SQLite or PostgreSQL.

Runs N workflows sequentially (one after the other) and concurrently (C at a
time), and reports workflows/s, steps/s, the per-step overhead against 20 plain
function calls, and the CPU time per step (engine, store and database client
together; the no-op activities cost nothing; the PostgreSQL server's own CPU is
not counted).

    .venv/bin/python bench/bench.py                                   # SQLite, in-process
    .venv/bin/python bench/bench.py --synchronous normal
    .venv/bin/python bench/bench.py --db postgresql://postgres@127.0.0.1/postgres
    .venv/bin/python bench/bench.py --db postgresql://postgres@127.0.0.1/postgres --workers 3
    .venv/bin/python bench/bench.py --definition      # the same 20 steps as a published definition
    .venv/bin/python bench/bench.py --trace           # with OpenTelemetry spans recorded

With `--workers 0` (the default) the engine runs in this process. With
`--workers N`, N `waypost worker` processes serve the workflow and this process
only starts runs and waits for them, as a web process would. Each configuration
gets a fresh database: a new SQLite file in a temporary folder, or a new
database on the given PostgreSQL server (dropped afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import waypost as wp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _db import completed_runs, fresh_postgres  # noqa: E402
from workflows import STEPS, bench20, definition, noop_async, noop_sync  # noqa: E402

WAYPOST = Path(sys.executable).with_name("waypost")
AS_DEFINITION = False  # --definition: run the workflow as a published definition
METRICS = False  # --metrics: the in-process engine counts into Prometheus metrics


async def start_one(engine: wp.AsyncEngine, kind: str) -> wp.AsyncRunHandle:
    if AS_DEFINITION:
        return await engine.start(f"bench20_{kind}", {})
    return await engine.start(bench20, kind)


async def prepare(engine: wp.AsyncEngine) -> None:
    if AS_DEFINITION:
        for kind in ("async", "sync"):
            await engine.publish(definition(kind))


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
    n: int
    seconds: float
    cpu: float
    commits: int | None

    @property
    def wf_per_s(self) -> float:
        return self.n / self.seconds

    @property
    def steps_per_s(self) -> float:
        return self.n * STEPS / self.seconds


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def process_cpu(pid: int) -> float:
    """User + system seconds of another process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def fresh_database(db: str, folder: str, label: str, synchronous: str) -> Iterator[str]:
    if db == "sqlite":
        yield f"sqlite:///{folder}/bench-{label}.db?synchronous={synchronous}"
        return
    with fresh_postgres(db) as url:
        yield url


async def drive(
    engine: wp.AsyncEngine, url: str, mode: str, kind: str, n: int, concurrency: int, warm: int
) -> None:
    """Run the workflows: one after another, or `concurrency` at a time."""
    if mode == "sequential":
        for _ in range(n):
            handle = await start_one(engine, kind)
            await handle.result(timeout=120)
        return
    # Keep `concurrency` runs in flight; count finished runs with one query
    # instead of waiting on each (200 waiters would cost more than the runs).
    started = done = 0
    while done < n:
        while started - done < concurrency and started < n:
            await start_one(engine, kind)
            started += 1
        await asyncio.sleep(0.02)
        done = await asyncio.to_thread(completed_runs, url) - warm


async def in_process(url: str, mode: str, kind: str, n: int, concurrency: int) -> Result:
    options = {}
    if METRICS:
        from waypost.observability import Metrics

        options["observer"] = Metrics()
    async with wp.AsyncEngine(url, max_activities=max(100, concurrency), **options) as engine:
        engine.register(bench20, noop_sync, noop_async)
        await prepare(engine)
        async with engine.running():
            warm = await start_one(engine, kind)
            await warm.result(timeout=60)
            stats = getattr(engine.store, "stats", {})
            commits0 = stats.get("commits", 0)
            cpu0, t0 = own_cpu(), time.perf_counter()
            await drive(engine, url, mode, kind, n, concurrency, warm=1)
            seconds = time.perf_counter() - t0
            cpu = own_cpu() - cpu0
            commits = getattr(engine.store, "stats", {}).get("commits", 0) - commits0
    return Result(n, seconds, cpu, commits)


def with_workers(url: str, workers: int, mode: str, kind: str, n: int, concurrency: int) -> Result:
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    procs = [
        subprocess.Popen(
            [str(WAYPOST), "worker", "--db", url, "--app", "workflows", "--lease", "10"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    try:
        return asyncio.run(client(url, [p.pid for p in procs], mode, kind, n, concurrency))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)


async def client(
    url: str, pids: list[int], mode: str, kind: str, n: int, concurrency: int
) -> Result:
    """Start runs from this process, as a web process would; the workers run them."""
    async with wp.AsyncEngine(url, poll_interval=0.01) as engine:
        engine.register(bench20, noop_sync, noop_async)
        await prepare(engine)
        for _ in pids:  # warm up the workers
            await (await start_one(engine, kind)).result(timeout=60)
        warm = len(pids)
        cpu0 = own_cpu() + sum(process_cpu(pid) for pid in pids)
        t0 = time.perf_counter()
        await drive(engine, url, mode, kind, n, concurrency, warm)
        seconds = time.perf_counter() - t0
        cpu = own_cpu() + sum(process_cpu(pid) for pid in pids) - cpu0
    return Result(n, seconds, cpu, None)


def record_spans() -> None:
    """Spans made and ended as with an exporter, then dropped: the cost of tracing on the
    engine's side (an OTLP exporter's batching and sending run in a thread of their own)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    from waypost.engine import tracing

    tracing.use_tracer_provider(provider)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite", help="'sqlite' or a PostgreSQL server URL")
    parser.add_argument("--workers", type=int, default=0, help="worker processes (0: in-process)")
    parser.add_argument("--n", type=int, default=300, help="workflows per configuration")
    parser.add_argument("--concurrency", type=int, default=200, help="workflows at once")
    parser.add_argument("--activity", choices=["async", "sync", "both"], default="both")
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    parser.add_argument("--mode", choices=["sequential", "concurrent", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the median is shown")
    parser.add_argument(
        "--loop",
        choices=["asyncio", "uvloop"],
        default="asyncio",
        help="event loop of the in-process engine",
    )
    parser.add_argument(
        "--definition", action="store_true", help="run the 20 steps as a published definition"
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="the in-process engine counts into Prometheus metrics (the `metrics` extra)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="record OpenTelemetry spans (the SDK's provider; spans dropped, not exported)",
    )
    args = parser.parse_args()
    global AS_DEFINITION, METRICS
    AS_DEFINITION = args.definition
    METRICS = args.metrics
    if args.trace:
        record_spans()
    if args.loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

    kinds = ["async", "sync"] if args.activity == "both" else [args.activity]
    modes = ["sequential", "concurrent"] if args.mode == "both" else [args.mode]
    store = "SQLite" if args.db == "sqlite" else "PostgreSQL"
    where = f"SQLite synchronous={args.synchronous}" if args.db == "sqlite" else "PostgreSQL"
    engines = "in-process engine" if not args.workers else f"{args.workers} worker process(es)"
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"{STEPS} no-op activities per {'definition' if args.definition else 'workflow'}, "
        f"{where}, {engines}{', metrics on' if args.metrics else ''}, {args.loop} loop "
        f"in this process, median of {args.repeat} runs per row\n"
    )
    header = (
        f"{'mode':<11} {'activity':<8} {'n':>5} {'wf/s':>8} {'steps/s':>8} {'ms/wf':>7} "
        f"{'overhead/step':>14} {'cpu/step':>9} {'steps/commit':>12}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="waypost-bench-") as folder:
        for kind in kinds:
            baseline = plain_calls(kind)
            for mode in modes:
                runs = []
                for i in range(args.repeat):
                    label = f"{store}-{mode}-{kind}-{i}"
                    with fresh_database(args.db, folder, label, args.synchronous) as url:
                        if args.workers:
                            runs.append(
                                with_workers(
                                    url, args.workers, mode, kind, args.n, args.concurrency
                                )
                            )
                        else:
                            runs.append(
                                asyncio.run(in_process(url, mode, kind, args.n, args.concurrency))
                            )
                res = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
                per_wf = res.seconds / res.n
                overhead = (per_wf - baseline) / STEPS
                label = mode if mode == "sequential" else f"{args.concurrency} at once"
                per_commit = f"{res.n * STEPS / max(res.commits, 1):.1f}" if res.commits else "-"
                print(
                    f"{label:<11} {kind:<8} {res.n:>5} {res.wf_per_s:>8.1f} {res.steps_per_s:>8.0f} "
                    f"{per_wf * 1000:>7.2f} {overhead * 1e6:>11.0f} us "
                    f"{res.cpu / (res.n * STEPS) * 1e6:>6.0f} us {per_commit:>12}"
                )


if __name__ == "__main__":
    main()
