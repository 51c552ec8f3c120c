"""Timer lag and signal latency with many runs waiting, on SQLite or PostgreSQL.

Timer lag: `--pending` runs (10,000 by default) sleep on durable timers due an hour
from now; then `--due` more runs (200) sleep until times spread evenly over the next
`--window` seconds (1 s). For each of those the benchmark reports, against the due time
recorded in the run's `TimerStarted` event:

- **fired**: the `TimerFired` event's time minus the due time (what the history says);
- **continued**: the time of the `RunCompleted` event (the workflow returns right after
  its sleep) minus the due time: the lag a user sees, the firing's commit and the run's
  next workflow task included.

Signal latency (`--signals`): `--due` more runs wait on a signal, with the pending timers
still in the store; the benchmark signals them one at a time, `--window`/`--due` apart,
and reports the time from just before `signal(...)` was called to the run's
`RunCompleted` event (the workflow returns right after the signal).

    .venv/bin/python bench/timers.py                                  # SQLite
    .venv/bin/python bench/timers.py --db postgresql://postgres@127.0.0.1:5432/postgres
    .venv/bin/python bench/timers.py --signals --repeat 3

Each repeat gets a fresh database (a new SQLite file, or a new database on the given
PostgreSQL server, dropped afterwards); the engine runs in this process. Medians of
the repeats' percentiles are printed, and `--json` prints every repeat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _db import fresh_postgres

import waypost as wp

HERE = Path(__file__).resolve().parent
FAR = 3600.0  # the pending timers are due an hour from now


@wp.workflow(name="bench_sleeper")
async def sleeper(ctx: wp.WorkflowContext, due: float) -> None:
    await ctx.sleep(due - ctx.now().timestamp())


@wp.workflow(name="bench_waiter")
async def waiter(ctx: wp.WorkflowContext) -> None:
    await ctx.wait_signal("go")


async def finished_at(engine: wp.AsyncEngine, run_id: str, timeout: float) -> list[Any]:
    """The run's history once it has completed."""
    await wp.AsyncRunHandle(engine, run_id).result(timeout=timeout)
    return await engine.history(run_id)


def event_time(events: list[Any], kind: str) -> float:
    return float(next(e.ts for e in events if e.type == kind))


def timer_lags(events: list[Any]) -> tuple[float, float]:
    """A finished sleeper's lags in seconds: its `TimerFired` event's time, and its
    `RunCompleted` event's, minus the due time its `TimerStarted` event recorded."""
    due = next(e.data["fire_at"] for e in events if e.type == "TimerStarted")
    return event_time(events, "TimerFired") - due, event_time(events, "RunCompleted") - due


@contextmanager
def fresh_database(db: str, folder: str, label: str) -> Iterator[str]:
    if db == "sqlite":
        yield f"sqlite:///{folder}/timers-{label}.db"
        return
    with fresh_postgres(db) as url:
        yield url


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p99 and max of `values` (seconds), in milliseconds."""
    ordered = sorted(values)
    if not ordered:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan"), "n": 0}

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {"p50": at(0.50), "p99": at(0.99), "max": ordered[-1] * 1000, "n": len(ordered)}


async def start_all(engine: wp.AsyncEngine, workflow: Any, inputs: list[Any]) -> list[str]:
    """Start runs of `workflow`, 50 at a time; their ids in order."""
    ids: list[str] = []
    for i in range(0, len(inputs), 50):
        chunk = inputs[i : i + 50]
        if workflow is waiter:
            handles = await asyncio.gather(*(engine.start(workflow) for _ in chunk))
        else:
            handles = await asyncio.gather(*(engine.start(workflow, x) for x in chunk))
        ids.extend(h.run_id for h in handles)
    return ids


async def wait_for(engine: wp.AsyncEngine, run_ids: list[str]) -> None:
    """Until every run waits for something (the runs reached their wait)."""
    waiting = set(run_ids)
    deadline = time.monotonic() + 600
    while waiting:
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(waiting)} runs never reached their wait")
        for run_id in list(waiting)[:200]:
            if (await engine.get(run_id)).waiting_for:
                waiting.discard(run_id)
        if waiting:
            await asyncio.sleep(0.05)


async def one_repeat(url: str, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with wp.AsyncEngine(url, max_activities=500, max_workflows=1000) as engine:
        engine.register(sleeper, waiter)
        async with engine.running():
            t0 = time.time()
            far = [t0 + FAR + i * 0.001 for i in range(args.pending)]
            await start_all(engine, sleeper, far)
            out["setup_s"] = time.time() - t0
            print(f"{args.pending} pending timers set in {out['setup_s']:.1f}s", file=sys.stderr)
            # The timed ones: due from a moment after they are all set, over the window.
            begin = time.time() + 1.0 + args.due * 0.03
            dues = [begin + args.window * i / args.due for i in range(args.due)]
            ids = await start_all(engine, sleeper, dues)
            if time.time() > begin:
                raise SystemExit("starting the timed runs took longer than planned")
            fired, continued = [], []
            for run_id in ids:
                events = await finished_at(engine, run_id, args.window + 300)
                lag_fired, lag_continued = timer_lags(events)
                fired.append(lag_fired)
                continued.append(lag_continued)
            out["timer_fired_ms"] = percentiles(fired)
            out["timer_continued_ms"] = percentiles(continued)
            if args.signals:
                ids = await start_all(engine, waiter, [None] * args.due)
                await wait_for(engine, ids)
                latencies = []
                sent: list[float] = []
                for run_id in ids:
                    sent.append(time.time())
                    await engine.signal(run_id, "go")
                    await asyncio.sleep(args.window / args.due)
                for run_id, at in zip(ids, sent, strict=True):
                    events = await finished_at(engine, run_id, 300)
                    latencies.append(event_time(events, "RunCompleted") - at)
                out["signal_ms"] = percentiles(latencies)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite", help="sqlite, or a PostgreSQL URL")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--due", type=int, default=200)
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--signals", action="store_true")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    repeats = []
    with tempfile.TemporaryDirectory() as folder:
        for r in range(args.repeat):
            with fresh_database(args.db, folder, str(r)) as url:
                repeats.append(asyncio.run(one_repeat(url, args)))
    store = "sqlite" if args.db == "sqlite" else "postgresql"
    print(
        f"{store}: {args.pending} pending timers, {args.due} due over {args.window:g}s, "
        f"{args.repeat} repeat(s), Python {platform.python_version()}"
    )
    print(f"{'measure':<22}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for key, label in (
        ("timer_fired_ms", "timer fired - due"),
        ("timer_continued_ms", "timer continued - due"),
        ("signal_ms", "signal -> continued"),
    ):
        rows = [r[key] for r in repeats if key in r]
        if not rows:
            continue
        med = {k: statistics.median(row[k] for row in rows) for k in ("p50", "p99", "max")}
        print(f"{label:<22}{med['p50']:>9.1f}{med['p99']:>9.1f}{med['max']:>9.1f}")
    if args.json:
        json.dump(repeats, sys.stdout, indent=2)
        print()


if __name__ == "__main__":
    main()
