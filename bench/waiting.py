"""Many runs waiting: what they cost the store and the engine, and whether new runs slow.

An engine starts N runs that wait (a third on a signal, a third on a 30-day timer, a
third on an approval), then the benchmark measures, against the same engine before the
runs were started:

- the store's bytes per waiting run (SQLite: the file and its WAL; PostgreSQL: the
  database's size, `pg_database_size`, after `VACUUM ANALYZE`);
- the engine process's resident memory (VmRSS) and the runs it keeps cached;
- new runs: the median of M starts one after another (each until `start` returned; the
  runs started before it execute meanwhile) and M runs of five steps all at once (wf/s) —
  the same engine process that started the waiting runs, and a fresh process on the
  same database — once the approvals' notifications (the outbox) have all been sent.

    .venv/bin/python bench/waiting.py                                   # SQLite, 100,000 runs
    .venv/bin/python bench/waiting.py --db postgresql://postgres@127.0.0.1:5432/postgres
    .venv/bin/python bench/waiting.py --runs 10000 --json out.json

On PostgreSQL the benchmark runs ANALYZE after every 10,000 runs started (what autovacuum's
analyze does as tables grow; `--analyze-every 0` never does, as a server with autovacuum
off would): without it the planner keeps the statistics of the empty tables and may read
a whole table to find one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import waypost as wp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import fresh_database  # noqa: E402

CACHE_RUNS = 1000  # the engine's cache of run instances (its default)


@wp.activity
async def step(ctx: wp.ActivityContext, i: int) -> int:
    return i


@wp.workflow(name="waiting_five")
async def five(ctx: wp.WorkflowContext) -> int:
    total = 0
    for i in range(5):
        total += await ctx.run(step, i)
    return total


@wp.workflow(name="waiting_signal")
async def on_signal(ctx: wp.WorkflowContext) -> Any:
    return await ctx.wait_signal("go")


@wp.workflow(name="waiting_timer")
async def on_timer(ctx: wp.WorkflowContext) -> None:
    await ctx.sleep(30 * 86400)


@wp.workflow(name="waiting_approval")
async def on_approval(ctx: wp.WorkflowContext) -> str:
    decision = await ctx.approval("ok", approvers="mia")
    return decision.outcome


WAITING = (on_signal, on_timer, on_approval)
ITEMS = (five, step, *WAITING)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def store_bytes(url: str) -> int:
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///").split("?")[0])
        return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    import psycopg

    with psycopg.connect(url.partition("?")[0], autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row else 0


def count_outbox(url: str) -> int:
    return count(url, "SELECT count(*) FROM outbox WHERE status = ?", "pending")


def count_status(url: str, status: str) -> int:
    return count(url, "SELECT count(*) FROM runs WHERE status = ?", status)


def count(url: str, query: str, status: str) -> int:
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///").split("?")[0])
        try:
            return int(conn.execute(query, (status,)).fetchone()[0])
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url.partition("?")[0], options="-c search_path=waypost") as pg:
        row = pg.execute(query.replace("?", "%s"), (status,)).fetchone()
        return int(row[0]) if row else 0


async def new_runs(engine: wp.AsyncEngine, m: int) -> dict[str, float]:
    """The median start latency of `m` starts in a row, and `m` five-step runs at once."""
    latencies = []
    handles = []
    for _ in range(m):
        t0 = time.perf_counter()
        handles.append(await engine.start(five))
        latencies.append(time.perf_counter() - t0)
    for handle in handles:
        await handle.result(timeout=300)
    t0 = time.perf_counter()
    handles = [await engine.start(five) for _ in range(m)]
    await asyncio.gather(*(h.result(timeout=300) for h in handles))
    seconds = time.perf_counter() - t0
    return {
        "start_ms_median": statistics.median(latencies) * 1000,
        "start_ms_p99": sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1000,
        "at_once_wf_s": m / seconds,
    }


def analyze(url: str) -> None:
    """PostgreSQL: refresh the planner's statistics, as autovacuum's analyze would."""
    if url.startswith("sqlite:///"):
        return
    import psycopg

    with psycopg.connect(url.partition("?")[0], autocommit=True) as conn:
        conn.execute("ANALYZE")


def autovacuum(url: str) -> str | None:
    if url.startswith("sqlite:///"):
        return None
    import psycopg

    with psycopg.connect(url.partition("?")[0]) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
        return str(row[0]) if row else None


async def fill(
    engine: wp.AsyncEngine,
    url: str,
    runs: int,
    window: int,
    analyze_every: int = 0,
    progress: bool = True,
) -> float:
    """Start `runs` waiting runs, `window` at a time; seconds until all wait. With
    `analyze_every`, ANALYZE each time that many more runs were started; `progress`
    prints how far it got to stderr."""
    t0 = time.perf_counter()
    started = 0
    last_report = t0
    analyzed = 0
    while started < runs:
        batch = min(window, runs - started)
        await asyncio.gather(*(engine.start(WAITING[(started + i) % 3]) for i in range(batch)))
        started += batch
        if analyze_every and started - analyzed >= analyze_every:
            await asyncio.to_thread(analyze, url)
            analyzed = started
        if progress and time.perf_counter() - last_report > 10:
            last_report = time.perf_counter()
            print(f"  started {started:,} of {runs:,}", file=sys.stderr, flush=True)
    while (running := count_status(url, "running")) > 0:
        if progress:
            print(f"  {running:,} runs not waiting yet", file=sys.stderr, flush=True)
        await asyncio.sleep(2)
    return time.perf_counter() - t0


async def drained(url: str, progress: bool = True) -> float:
    """Seconds until the approvals' notifications (the outbox) are all sent: the engine's
    work for the runs started, apart from waiting."""
    t0 = time.perf_counter()
    while (pending := count_outbox(url)) > 0:
        if progress:
            print(f"  {pending:,} notifications to send", file=sys.stderr, flush=True)
        await asyncio.sleep(5)
    return time.perf_counter() - t0


FRESH = """
import asyncio, json, sys
sys.path.insert(0, {here!r})
import waypost as wp
import waiting
async def main():
    async with wp.AsyncEngine({url!r}) as engine:
        engine.register(*waiting.ITEMS)
        async with engine.running():
            await (await engine.start(waiting.five)).result(timeout=60)
            print(json.dumps(await waiting.new_runs(engine, {m})))
asyncio.run(main())
"""


def fresh_process(url: str, m: int) -> dict[str, float]:
    code = FRESH.format(here=str(HERE), url=url, m=m)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def measure(url: str, runs: int, m: int, window: int, analyze_every: int) -> dict[str, Any]:
    async with wp.AsyncEngine(url, cache_size=CACHE_RUNS) as engine:
        engine.register(*ITEMS)
        async with engine.running():
            await (await engine.start(five)).result(timeout=60)
            empty_bytes = store_bytes(url)
            empty = await new_runs(engine, m)
            rss_before = rss_mib()
            print(f"empty store: {empty}", file=sys.stderr, flush=True)
            seconds = await fill(engine, url, runs, window, analyze_every)
            drain = await drained(url)
            if analyze_every:
                await asyncio.to_thread(analyze, url)
            waiting = count_status(url, "waiting")
            full_bytes = store_bytes(url)
            rss_after = rss_mib()
            after = await new_runs(engine, m)
            cached = (await engine.stats())["cached_runs"]
    fresh = fresh_process(url, m)
    return {
        "runs": runs,
        "waiting": waiting,
        "fill_seconds": seconds,
        "notifications_drained_seconds": drain,
        "bytes_per_waiting_run": (full_bytes - empty_bytes) / max(waiting, 1),
        "store_bytes_empty": empty_bytes,
        "store_bytes_full": full_bytes,
        "rss_mib_before": rss_before,
        "rss_mib_after": rss_after,
        "cached_runs": cached,
        "new_runs_empty": empty,
        "new_runs_same_process": after,
        "new_runs_fresh_process": fresh,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite", help="'sqlite' or a PostgreSQL server URL")
    parser.add_argument("--runs", type=int, default=100_000, help="waiting runs to start")
    parser.add_argument("--m", type=int, default=200, help="new runs per measurement")
    parser.add_argument("--window", type=int, default=500, help="waiting runs started at once")
    parser.add_argument(
        "--analyze-every",
        type=int,
        default=10_000,
        help="PostgreSQL: ANALYZE after each N runs started, as autovacuum would (0: never)",
    )
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as folder,
        fresh_database(args.db, folder, "waiting", "full") as url,
    ):
        every = 0 if args.db == "sqlite" else args.analyze_every
        result = asyncio.run(measure(url, args.runs, args.m, args.window, every))
        result["autovacuum"] = autovacuum(url)
        result["analyze_every"] = every
    result["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "store": "sqlite" if args.db == "sqlite" else "postgresql",
    }
    e, s, f = (
        result["new_runs_empty"],
        result["new_runs_same_process"],
        result["new_runs_fresh_process"],
    )
    print(
        f"{result['waiting']:,} runs waiting (filled in {result['fill_seconds']:.0f} s, "
        f"their notifications sent {result['notifications_drained_seconds']:.0f} s later)"
    )
    print(f"store: {result['bytes_per_waiting_run']:.0f} bytes per waiting run")
    print(
        f"engine process: {result['rss_mib_before']:.0f} -> {result['rss_mib_after']:.0f} MiB "
        f"resident, {result['cached_runs']} runs cached"
    )
    print(f"{'new runs':<28} {'start p50 ms':>12} {'start p99 ms':>12} {'at once wf/s':>12}")
    for label, r in (("empty store", e), ("beside them, same process", s), ("fresh process", f)):
        print(
            f"{label:<28} {r['start_ms_median']:>12.2f} {r['start_ms_p99']:>12.2f} "
            f"{r['at_once_wf_s']:>12.1f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
