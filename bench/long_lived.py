"""Does a loop-forever workflow keep its storage flat? 10,000 iterations, measured.

A workflow loops: each iteration is one activity (two events: ActivityScheduled and
ActivityCompleted). With `--every N` it calls `ctx.continue_as_new` every N iterations;
the baseline (`--every 0`) never does. At the last iteration of every `--sample`
iterations (for a generation size that divides it, the generation's fullest moment) the
activity reads the database and the benchmark prints: the run's generation, the events its history
holds, the events and bytes (data and hash) of the whole `events` table, and the size
of the database's files (SQLite: the file and its WAL; PostgreSQL: the `events`
table with its indexes and TOAST, `pg_total_relation_size`; `--vacuum` runs `VACUUM
events` before each sample, as autovacuum would on a server that has it on).

    .venv/bin/python bench/long_lived.py                          # SQLite, --every 100 and 0
    .venv/bin/python bench/long_lived.py --every 100 --iterations 10000
    .venv/bin/python bench/long_lived.py --db postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import waypost as wp

Sample = dict[str, Any]
samples: list[Sample] = []
probe: Callable[[int], Sample] | None = None  # set per database


@wp.activity
def step(ctx: wp.ActivityContext, i: int, sample_every: int) -> int:
    # The last iteration of each window: with generations of a size that divides the
    # window, the fullest moment of the generation (its last step running).
    if probe is not None and i % sample_every == sample_every - 1 and ctx.attempt == 1:
        samples.append(probe(i))
    return i + 1


@wp.workflow(name="long_lived")
async def long_lived(ctx: wp.WorkflowContext, state: dict[str, Any]) -> int:
    i, every, until = state["i"], state["every"], state["until"]
    done_here = 0
    while i < until:
        if every and done_here == every:
            ctx.continue_as_new({**state, "i": i})
        i = await ctx.run(step, i, state["sample"])
        done_here += 1
    return int(i)


@contextmanager
def fresh_database(db: str, folder: str, label: str) -> Iterator[str]:
    if db == "sqlite":
        yield f"sqlite:///{folder}/long-{label}.db"
        return
    import psycopg

    name = f"waypost_bench_{uuid.uuid4().hex[:10]}"
    base = db.rsplit("/", 1)[0]
    with psycopg.connect(db, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(db, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sqlite_probe(url: str, run_id: str) -> Callable[[int], Sample]:
    path = url.removeprefix("sqlite:///")

    def sample(i: int) -> Sample:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return _sample(i, conn.execute, run_id, "?") | {
                "file_bytes": _size(path) + _size(path + "-wal")
            }
        finally:
            conn.close()

    return sample


def postgres_probe(url: str, run_id: str, vacuum: bool) -> Callable[[int], Sample]:
    import psycopg

    def sample(i: int) -> Sample:
        with psycopg.connect(url, options="-c search_path=waypost", autocommit=True) as conn:
            if vacuum:  # what autovacuum does on a server that has it on (the default)
                conn.execute("VACUUM events")
            out = _sample(i, conn.execute, run_id, "%s")
            size = conn.execute("SELECT pg_total_relation_size('events')").fetchone()
            return out | {"file_bytes": int(size[0]) if size else 0}

    return sample


def _sample(i: int, execute: Callable[..., Any], run_id: str, mark: str) -> Sample:
    first = execute(f"SELECT data FROM events WHERE run_id = {mark} AND seq = 1", (run_id,))
    row = first.fetchone()
    generation = json.loads(row[0]).get("generation", 1) if row else 0
    run_events = execute(f"SELECT count(*) FROM events WHERE run_id = {mark}", (run_id,))
    table = execute("SELECT count(*), coalesce(sum(length(data) + length(hash)), 0) FROM events")
    total, data_bytes = table.fetchone()
    return {
        "iteration": i,
        "generation": generation,
        "run_events": int(run_events.fetchone()[0]),
        "table_events": int(total),
        "event_bytes": int(data_bytes),
    }


def _size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def measure(db: str, folder: str, every: int, iterations: int, sample: int, vacuum: bool) -> float:
    global probe
    label = f"every-{every}"
    with fresh_database(db, folder, label) as url:
        run_id = f"long-{label}"
        postgres = db != "sqlite"
        probe = postgres_probe(url, run_id, vacuum) if postgres else sqlite_probe(url, run_id)
        samples.clear()
        engine = wp.Engine(url, retention_every=None)
        engine.register(long_lived, step)
        began = time.perf_counter()
        try:
            with engine.running():
                state = {"i": 0, "every": every, "until": iterations, "sample": sample}
                engine.start(long_lived, state, run_id=run_id)
                assert engine.result(run_id, timeout=3600) == iterations
        finally:
            engine.close()
            probe = None
        elapsed = time.perf_counter() - began
    return elapsed


def report(every: int, iterations: int, elapsed: float) -> None:
    what = f"continue_as_new every {every} iterations" if every else "no continue_as_new"
    print(f"\n{what}: {iterations} iterations in {elapsed:.1f} s")
    print("| iteration | generation | run's events | events in table | event bytes | db bytes |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in samples:
        print(
            f"| {s['iteration']} | {s['generation']} | {s['run_events']} | "
            f"{s['table_events']} | {s['event_bytes']} | {s['file_bytes']} |"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default="sqlite", help="sqlite, or a PostgreSQL server URL")
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument(
        "--every", type=int, action="append", help="iterations per generation; 0: never"
    )
    parser.add_argument("--sample", type=int, default=1000, help="iterations between samples")
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="PostgreSQL: VACUUM events before each sample (for a server without autovacuum)",
    )
    args = parser.parse_args(argv)
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as folder:
        for every in args.every or [100, 0]:
            elapsed = measure(args.db, folder, every, args.iterations, args.sample, args.vacuum)
            report(every, args.iterations, elapsed)


if __name__ == "__main__":
    main()
