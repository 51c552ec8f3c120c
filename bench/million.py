"""A million runs waiting on PostgreSQL: what new runs, timers and the console see beside them.

One command measures, on a fresh database (dropped afterwards):

1. **the empty database**: new runs (`waiting.new_runs`: the p50/p99 of M starts one
   after another, and M five-step runs all at once) and the console's runs page;
2. **the fill**: N runs started through the engine until they wait (a third on a signal,
   a third on a 30-day timer, a third on an approval; `waiting.py`'s workflows), by
   `--processes` engine processes at once, each starting `--window` runs at a time; the
   fill time and runs/s, with progress on stderr every 10%. Meanwhile ANALYZE runs
   whenever the waiting runs grew by a tenth since the last, as autovacuum's analyze
   would (this server may have autovacuum off);
3. **beside the N waiting runs**, once the approvals' notifications are sent: the
   database's bytes per waiting run (`pg_database_size` after VACUUM ANALYZE, minus the
   empty database's), new runs again and their ratio to the empty database's, the
   console's runs page (first page, and filtered by status: GET through the real server
   app on a socket, signed in with an API key; p50 and p99 of `--requests`), and timer
   lag: `--timers` runs (10,000) sleep until times spread over one second, and each
   one's lag is read from its history as `timers.py` reads it (`TimerFired` minus the due
   time; and `RunCompleted` minus the due time, the lag a user sees).

    .venv/bin/python bench/million.py --runs 100000 --json million-100k.json
    .venv/bin/python bench/million.py --runs 1000000 --json million.json     # a quiet machine

The targets (issue 25): start p99 and throughput within 10% of the empty database, timer
lag p99 under 50 ms, the runs page under 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

import waypost as wp
from waypost.model import operations as ops
from waypost.server.app import create_app

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import console  # noqa: E402
import timers  # noqa: E402
import waiting  # noqa: E402
from _db import completed_runs  # noqa: E402
from bench import fresh_database  # noqa: E402

PAGES = {
    "runs page": "/runs",
    "runs page, status waiting": "/runs?status=waiting",
    "runs page, status completed": "/runs?status=completed",
}


@contextlib.asynccontextmanager
async def serving(engine: wp.AsyncEngine) -> AsyncIterator[str]:
    """The server app of `engine` on a port of this host, on this event loop; its URL.

    uvicorn binds the port itself, as `waypost server` has it do: handed a socket bound
    here instead (`serve(sockets=...)`), every request after the first on a kept-alive
    connection took about 45 ms more in this set-up, a bare Starlette app's too (not
    explained)."""
    config = uvicorn.Config(
        create_app(engine), host="127.0.0.1", port=0, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(1000):  # up to 10 s
        if server.started:
            break
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def time_pages(base: str, key: str, requests: int) -> dict[str, dict[str, float]]:
    """Each page of PAGES requested `requests` times after a warm-up (a client on its own
    thread, as a browser would be): p50, p99 and max in ms."""
    out = {}
    with httpx.Client(base_url=base, timeout=60) as http:
        console.sign_in(http, key)
        for label, path in PAGES.items():
            http.get(path)
            times = []
            for _ in range(requests):
                began = time.perf_counter()
                answer = http.get(path)
                times.append(time.perf_counter() - began)
                if answer.status_code != 200 or "run" not in answer.text:
                    raise SystemExit(f"GET {path}: {answer.status_code}")
            out[label] = timers.percentiles(times)
    return out


async def console_pages(engine: wp.AsyncEngine, key: str, requests: int) -> Any:
    async with serving(engine) as base:
        return await asyncio.to_thread(time_pages, base, key, requests)


async def at_rest(engine: wp.AsyncEngine, key: str, args: argparse.Namespace) -> dict[str, Any]:
    """New runs and the console's pages, measured on `engine` as the database is now."""
    figures: dict[str, Any] = dict(await waiting.new_runs(engine, args.m))
    figures["pages_ms"] = await console_pages(engine, key, args.requests)
    figures["door_ms"] = {
        name: await door_ms(engine, request, args.requests)
        for name, request in (("PageRuns", ops.PageRuns(limit=50)), ("CountRuns", ops.CountRuns()))
    }
    return figures


async def door_ms(engine: wp.AsyncEngine, request: Any, requests: int) -> dict[str, float]:
    """What the runs page asks the engine (a page of runs, the counts by status), without
    the server: p50, p99 and max in ms of `requests` calls after a warm-up."""
    local = engine.local()
    await engine.execute(request, local)
    times = []
    for _ in range(requests):
        began = time.perf_counter()
        await engine.execute(request, local)
        times.append(time.perf_counter() - began)
    return timers.percentiles(times)


async def timer_lag(engine: wp.AsyncEngine, url: str, n: int, margin: float) -> dict[str, Any]:
    """`n` runs sleep until times spread evenly over one second that begins `margin`
    seconds from now (time to start them all and have each set its timer); their lags."""
    before = await asyncio.to_thread(completed_runs, url)
    began = time.time()
    due_from = began + margin
    ids = await timers.start_all(engine, timers.sleeper, [due_from + i / n for i in range(n)])
    # Polls on threads: a query on the event loop would hold up the engine's timers.
    while await asyncio.to_thread(waiting.count_status, url, "running") > 0:
        if time.time() > due_from:
            break
        await asyncio.sleep(0.2)
    ready = time.time()
    if ready > due_from - 0.5:
        raise SystemExit(
            f"setting {n:,} timers took {ready - began:.0f} s, more than the {margin:.0f} s "
            "planned: give a larger --timer-margin"
        )
    print(f"{n:,} timers set in {ready - began:.0f} s", file=sys.stderr, flush=True)
    await asyncio.sleep(due_from + 1 - time.time())
    deadline = time.monotonic() + 900
    while await asyncio.to_thread(completed_runs, url) - before < n:
        if time.monotonic() > deadline:
            raise SystemExit("the timed runs did not all complete within 15 minutes")
        await asyncio.sleep(0.5)
    fired, continued = [], []
    for i in range(0, n, 50):
        chunk = ids[i : i + 50]
        for events in await asyncio.gather(*(engine.history(r) for r in chunk)):
            lag_fired, lag_continued = timers.timer_lags(events)
            fired.append(lag_fired)
            continued.append(lag_continued)
    return {
        "timers": n,
        "set_seconds": ready - began,
        "fired_ms": timers.percentiles(fired),
        "continued_ms": timers.percentiles(continued),
    }


async def fill_child(url: str, runs: int, window: int) -> None:
    """One fill process: an engine that starts `runs` waiting runs and serves until every
    run of the database waits and every notification is sent (an engine that stops
    leaves the notifications it had claimed to their lease)."""
    async with wp.AsyncEngine(url) as engine:
        engine.register(*waiting.ITEMS)
        async with engine.running():
            await waiting.fill(engine, url, runs, window, progress=False)
            await waiting.drained(url, progress=False)


async def fill(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start args.runs waiting runs from args.processes processes; report every 10% of
    them waiting, and ANALYZE as autovacuum's default threshold would (a tenth more).
    The fill's time ends when all wait; the processes end once their approvals'
    notifications are sent too."""
    shares = [args.runs // args.processes] * args.processes
    shares[0] += args.runs % args.processes
    began = time.perf_counter()
    children = [
        await asyncio.create_subprocess_exec(
            *(sys.executable, __file__, "--db", url, "--window", str(args.window)),
            *("--fill-child", str(share)),
        )
        for share in shares
    ]
    analyzed = analyses = 0
    tenth = 1
    all_waiting = None
    analyzing: asyncio.Task[None] | None = None
    while True:
        done = all(child.returncode is not None for child in children)
        now_waiting = await asyncio.to_thread(waiting.count_status, url, "waiting")
        idle = analyzing is None or analyzing.done()
        if args.analyze and idle and now_waiting >= 1.1 * analyzed + 1000:
            # Beside the fill, as autovacuum's worker would be: the progress goes on.
            analyzing = asyncio.create_task(asyncio.to_thread(waiting.analyze, url))
            analyzed, analyses = now_waiting, analyses + 1
        seconds = time.perf_counter() - began
        while tenth <= 10 and now_waiting >= args.runs * tenth / 10:
            print(
                f"fill: {tenth * 10}% ({now_waiting:,} of {args.runs:,} waiting) after "
                f"{seconds:.0f} s, {now_waiting / seconds:.0f} runs/s",
                file=sys.stderr,
                flush=True,
            )
            tenth += 1
        if all_waiting is None and now_waiting >= args.runs:
            all_waiting = seconds
        if done:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(c.wait() for c in children)), 1.0)
    if analyzing is not None:
        await analyzing
    if any(child.returncode for child in children):
        raise SystemExit(f"a fill process failed: {[c.returncode for c in children]}")
    seconds = all_waiting or time.perf_counter() - began
    return {
        "seconds": seconds,
        "runs_per_second": args.runs / seconds,
        "notifications_sent_seconds": time.perf_counter() - began - seconds,
        "processes": args.processes,
        "window": args.window,
        "analyses": analyses,
    }


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"runs": args.runs, "m": args.m, "requests": args.requests}
    async with wp.AsyncEngine(url) as engine:
        engine.register(*waiting.ITEMS, timers.sleeper)
        local = engine.local()
        await engine.execute(ops.CreateTenant(tenant="default"), local)  # for its API key
        key = (await engine.execute(ops.CreateKey(principal="bench", roles=["viewer"]), local)).key
        async with engine.running():
            await (await engine.start(waiting.five)).result(timeout=60)
            result["empty"] = await at_rest(engine, key, args)
    print(f"empty database: {result['empty']}", file=sys.stderr, flush=True)
    result["store_bytes_empty"] = waiting.store_bytes(url)
    result["fill"] = await fill(url, args)
    async with wp.AsyncEngine(url) as engine:
        engine.register(*waiting.ITEMS, timers.sleeper)
        async with engine.running():
            await (await engine.start(waiting.five)).result(timeout=60)
            await waiting.drained(url)  # the fill processes sent them
            result["waiting"] = waiting.count_status(url, "waiting")
            result["store_bytes_full"] = waiting.store_bytes(url)
            result["bytes_per_waiting_run"] = (
                result["store_bytes_full"] - result["store_bytes_empty"]
            ) / max(result["waiting"], 1)
            result["full"] = await at_rest(engine, key, args)
            print(f"beside them: {result['full']}", file=sys.stderr, flush=True)
            margin = args.timer_margin or 3 * args.timers / result["fill"]["runs_per_second"] + 10
            result["timer_lag"] = await timer_lag(engine, url, args.timers, margin)
    return result


def server_facts(url: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(url.partition("?")[0]) as conn:
        version = conn.execute("SHOW server_version").fetchone()
    return {
        "server_version": version[0] if version else None,
        "autovacuum": waiting.autovacuum(url),
    }


def ratio(full: float, empty: float) -> str:
    return f"{full / empty:.2f}" if empty else "-"


def print_table(r: dict[str, Any]) -> None:
    f, e = r["full"], r["empty"]
    print(
        f"{r['waiting']:,} runs waiting on PostgreSQL {r['machine'].get('server_version')}: "
        f"filled in {r['fill']['seconds']:.0f} s ({r['fill']['runs_per_second']:.0f} runs/s, "
        f"{r['fill']['processes']} processes), their notifications sent "
        f"{r['fill']['notifications_sent_seconds']:.0f} s later; load before "
        f"{r['machine']['load_before'][0]:.1f}, after {r['machine']['load'][0]:.1f}"
    )
    print(f"bytes per waiting run: {r['bytes_per_waiting_run']:,.0f}")
    print(f"| measure | empty | beside {r['waiting']:,} | ratio | target |")
    print("| --- | ---: | ---: | ---: | --- |")
    rows = [
        (f"start p50, {r['m']} in a row (ms)", "start_ms_median", ""),
        (f"start p99, {r['m']} in a row (ms)", "start_ms_p99", "ratio <= 1.10"),
        (f"{r['m']} five-step runs at once (wf/s)", "at_once_wf_s", "ratio >= 0.90"),
    ]
    for label, key, target in rows:
        print(f"| {label} | {e[key]:.2f} | {f[key]:.2f} | {ratio(f[key], e[key])} | {target} |")
    for page in PAGES:
        a, b = e["pages_ms"][page], f["pages_ms"][page]
        print(
            f"| {page} p50 / p99 of {r['requests']} (ms) | {a['p50']:.1f} / {a['p99']:.1f} "
            f"| {b['p50']:.1f} / {b['p99']:.1f} | {ratio(b['p99'], a['p99'])} | p99 < 100 ms |"
        )
    for name in ("PageRuns", "CountRuns"):
        a, b = e["door_ms"][name], f["door_ms"][name]
        print(
            f"| the page's {name}, the engine alone, p50 / p99 (ms) | {a['p50']:.1f} / "
            f"{a['p99']:.1f} | {b['p50']:.1f} / {b['p99']:.1f} | {ratio(b['p99'], a['p99'])} | |"
        )
    lag = r["timer_lag"]
    for label, key, target in (
        ("timer fired - due", "fired_ms", "p99 < 50 ms"),
        ("timer's run completed - due", "continued_ms", ""),
    ):
        x = lag[key]
        print(
            f"| {label}, {lag['timers']:,} due within 1 s: p50 / p99 / max (ms) | - "
            f"| {x['p50']:.1f} / {x['p99']:.1f} / {x['max']:.1f} | - | {target} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--runs", type=int, default=1_000_000, help="waiting runs to start")
    parser.add_argument("--processes", type=int, default=2, help="engine processes filling")
    parser.add_argument("--window", type=int, default=500, help="starts at once per process")
    parser.add_argument("--m", type=int, default=500, help="new runs per measurement")
    parser.add_argument("--requests", type=int, default=20, help="GETs of each console page")
    parser.add_argument("--timers", type=int, default=10_000, help="timers due within 1 s")
    parser.add_argument(
        "--timer-margin",
        type=float,
        default=0.0,
        help="seconds from starting the timed runs to their first due time "
        "(default: three times what the fill's rate predicts, plus 10)",
    )
    parser.add_argument(
        "--no-analyze",
        dest="analyze",
        action="store_false",
        help="never ANALYZE during the fill (as a server with autovacuum off would)",
    )
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--fill-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fill_child is not None:
        asyncio.run(fill_child(args.db, args.fill_child, args.window))
        return
    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory() as folder,
        fresh_database(args.db, folder, "million", "full") as url,
    ):
        result = asyncio.run(measure(url, args))
        facts = server_facts(url)
    result["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load": os.getloadavg(),
        **facts,
    }
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
