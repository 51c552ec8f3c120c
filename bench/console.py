"""The console's runs page over 100,000 runs: the first page, a deep page, filters, search,
counts.

    .venv/bin/python bench/console.py [--db postgresql://...] [--runs 100000] [--repeat 7]

Fills a fresh database (a new SQLite file, or a new database on the given PostgreSQL
server, dropped afterwards) with `--runs` runs of one tenant written directly into the
`runs` table (no histories: the pages read the snapshots), then serves the console on a
real socket and signs in with an API key, as a browser would. Each figure is the median
wall time of `--repeat` requests of the page (the HTML, rendered), after one warm-up:

- first page: `/runs` (50 newest runs and the counts by status);
- deep page: `/runs?cursor=...` positioned 90% of the way down (keyset paging: it
  starts after the previous page's last run, read through the index, no OFFSET);
- a status's first and deep pages (`/runs?status=completed...`);
- a version's first page (`/runs?workflow=w1&version=2`);
- a search by run id, and by the start of a run id that none has (the worst case: every
  run of the tenant is looked at);
- the door alone: `PageRuns` first and deep, `CountRuns`.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

import waypost as wp
from waypost.model import operations as ops
from waypost.model.paging import RunCursor
from waypost.server.app import create_app

TENANT = "bench"
STATUSES = ["completed"] * 6 + ["waiting"] * 2 + ["failed", "suspended"]
COLUMNS = (
    "tenant, run_id, workflow, version, status, input, waiting_for, last_seq, last_hash, "
    "created_at, updated_at"
)


def rows(n: int, start: float) -> Iterator[tuple[Any, ...]]:
    for i in range(n):
        yield (
            TENANT,
            f"run-{i:07d}",
            f"w{i % 3}",
            str(1 + i % 2),
            STATUSES[i % len(STATUSES)],
            f'{{"n": {i}}}',
            "[]",
            1,
            "0" * 64,
            start + i * 0.01,
            start + i * 0.01,
        )


def fill_sqlite(path: str, n: int, start: float) -> None:
    con = sqlite3.connect(path)
    with con:
        con.executemany(
            f"INSERT INTO runs ({COLUMNS}) VALUES ({', '.join('?' * 11)})", rows(n, start)
        )
    con.execute("ANALYZE")
    con.close()


def fill_postgres(url: str, n: int, start: float) -> None:
    import psycopg

    with psycopg.connect(url.split("?")[0], autocommit=True) as con:
        with con.cursor().copy(f"COPY waypost.runs ({COLUMNS}) FROM STDIN") as copy:
            for row in rows(n, start):
                copy.write_row(row)
        con.execute("VACUUM ANALYZE waypost.runs")  # what autovacuum does to a settled table


@contextmanager
def database(url: str | None) -> Iterator[str]:
    if url is None:
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{Path(folder) / 'console.db'}"
        return
    import psycopg

    name = f"waypost_bench_console_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def median_ms(repeat: int, call: Callable[[], Any]) -> float:
    call()  # warm-up
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="a PostgreSQL server URL (default: SQLite)")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with database(args.db) as url:
        engine = wp.Engine(url)
        local = engine.aio.local(TENANT)
        engine.execute(ops.CreateTenant(tenant=TENANT), local)
        key = engine.execute(ops.CreateKey(principal="bench", roles=["viewer"]), local).key
        start = time.time() - args.runs * 0.01
        began = time.perf_counter()
        if url.startswith("sqlite"):
            fill_sqlite(url.removeprefix("sqlite:///"), args.runs, start)
        else:
            fill_postgres(url, args.runs, start)
        print(
            f"{args.runs} runs written in {time.perf_counter() - began:.1f} s on {url.split(':')[0]}"
        )
        report(engine, key, args.runs, args.repeat, start)
        engine.close()


def sign_in(http: httpx.Client, key: str) -> None:
    """Sign `http` in to the console with API key `key`, as a browser does (the form's
    CSRF token, then the session cookie)."""
    page = http.get("/sign-in")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token is not None
    signed = http.post("/sign-in", data={"csrf": token.group(1), "key": key})
    assert signed.status_code == 303, signed.text


def report(engine: wp.Engine, key: str, n: int, repeat: int, start: float) -> None:
    app = create_app(engine.aio)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    done = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), engine._loop.loop)
    while not server.started:
        time.sleep(0.01)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    deep = int(n * 0.9)  # the run before the deep page, counted from the newest
    deep_id = n - 1 - deep
    cursor = RunCursor(start + deep_id * 0.01, f"run-{deep_id:07d}").encode()
    completed_deep = deep_id - deep_id % len(STATUSES)  # a completed run near it
    status_cursor = RunCursor(start + completed_deep * 0.01, f"run-{completed_deep:07d}").encode()
    local = engine.aio.local(TENANT)
    with httpx.Client(base_url=base, timeout=60) as http:
        sign_in(http, key)

        def get(path: str) -> Callable[[], None]:
            def call() -> None:
                answer = http.get(path)
                assert answer.status_code == 200, (path, answer.status_code)

            return call

        figures = {
            "first page": get("/runs"),
            "deep page (90%)": get(f"/runs?cursor={cursor}"),
            "status: first page": get("/runs?status=completed"),
            "status: deep page": get(f"/runs?status=completed&cursor={status_cursor}"),
            "version: first page": get("/runs?workflow=w1&version=2"),
            "search: a run id": get(f"/runs?q=run-{n // 2:07d}"),
            "search: a prefix no run has": get("/runs?q=nope-"),
            "fragment (live refresh)": get("/runs/fragment"),
            "door: PageRuns first": lambda: engine.execute(ops.PageRuns(limit=50), local),
            "door: PageRuns deep": lambda: engine.execute(
                ops.PageRuns(limit=50, cursor=cursor), local
            ),
            "door: CountRuns": lambda: engine.execute(ops.CountRuns(), local),
        }
        print(f"| request | median ms ({repeat} runs) |\n| --- | ---: |")
        for name, call in figures.items():
            print(f"| {name} | {median_ms(repeat, call):.1f} |")
    server.should_exit = True
    done.result(30)
    sock.close()


if __name__ == "__main__":
    main()
