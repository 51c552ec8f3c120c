"""The peer's side of `peer.py`: the same workload on DBOS Transact, in bench/.peer-venv.

Run by `peer.py` as a subprocess with the peer venv's interpreter (DBOS is never a
dependency of waypost); prints one JSON line with the measurement.

    bench/.peer-venv/bin/python bench/peer_dbos.py --url sqlite:///x.db --mode sequential --n 100

The workflow is DBOS's own idiom for "20 no-op steps": a `@DBOS.workflow()` calling a
`@DBOS.step()` 20 times, started with `DBOS.start_workflow(_async)` and awaited through
its handle (a local future: no polling). On SQLite the file is put in WAL mode before
DBOS opens it and every connection DBOS opens runs `PRAGMA synchronous = FULL` (what
waypost does by default); DBOS itself sets neither (as shipped its file keeps SQLite's
rollback journal). On PostgreSQL both sides run with the server's `synchronous_commit`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sqlite3
import time
from importlib import metadata
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig

STEPS = 20


@DBOS.step()
async def noop_async() -> None:
    return None


@DBOS.step()
def noop_sync() -> None:
    return None


@DBOS.workflow()
async def bench20_async() -> int:
    for _ in range(STEPS):
        await noop_async()
    return STEPS


@DBOS.workflow()
def bench20_sync() -> int:
    for _ in range(STEPS):
        noop_sync()
    return STEPS


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def durable_sqlite(url: str) -> None:
    """WAL for the file (persistent) and synchronous=FULL on every connection DBOS opens."""
    path = url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()

    @sa.event.listens_for(sa.engine.Engine, "connect")
    def full(dbapi_conn: Any, record: Any) -> None:
        dbapi_conn.execute("PRAGMA synchronous = FULL")


def settings(dbos: DBOS) -> dict[str, str]:
    """What the system database's connections actually run with."""
    engine = dbos._sys_db.engine
    with engine.connect() as c:
        if engine.dialect.name == "sqlite":
            return {
                "journal_mode": str(c.execute(sa.text("PRAGMA journal_mode")).scalar()),
                "synchronous": str(c.execute(sa.text("PRAGMA synchronous")).scalar()),
            }
        return {"synchronous_commit": str(c.execute(sa.text("SHOW synchronous_commit")).scalar())}


async def run_async(mode: str, n: int) -> None:
    if mode == "sequential":
        for _ in range(n):
            handle = await DBOS.start_workflow_async(bench20_async)
            await handle.get_result()
        return
    handles = [await DBOS.start_workflow_async(bench20_async) for _ in range(n)]
    await asyncio.gather(*(h.get_result() for h in handles))


def run_sync(mode: str, n: int) -> None:
    if mode == "sequential":
        for _ in range(n):
            DBOS.start_workflow(bench20_sync).get_result()
        return
    handles = [DBOS.start_workflow(bench20_sync) for _ in range(n)]
    for h in handles:
        h.get_result()


async def measure_async(mode: str, n: int) -> tuple[float, float]:
    await (await DBOS.start_workflow_async(bench20_async)).get_result()  # warm-up
    cpu0, t0 = own_cpu(), time.perf_counter()
    await run_async(mode, n)
    return time.perf_counter() - t0, own_cpu() - cpu0


def measure_sync(mode: str, n: int) -> tuple[float, float]:
    DBOS.start_workflow(bench20_sync).get_result()  # warm-up
    cpu0, t0 = own_cpu(), time.perf_counter()
    run_sync(mode, n)
    return time.perf_counter() - t0, own_cpu() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="sqlite:///FILE or a PostgreSQL URL")
    parser.add_argument("--mode", choices=["sequential", "concurrent"], required=True)
    parser.add_argument("--activity", choices=["async", "sync"], default="async")
    parser.add_argument("--n", type=int, default=100)
    args = parser.parse_args()
    if args.url.startswith("sqlite:///"):
        durable_sqlite(args.url)
    config: DBOSConfig = {
        "name": "waypost-bench-peer",
        "system_database_url": args.url,
        "log_level": "WARNING",
    }
    dbos = DBOS(config=config)
    DBOS.launch()
    try:
        if args.activity == "async":
            seconds, cpu = asyncio.run(measure_async(args.mode, args.n))
        else:
            seconds, cpu = measure_sync(args.mode, args.n)
        found = settings(dbos)
    finally:
        DBOS.destroy()
    print(
        json.dumps(
            {
                "engine": f"dbos {metadata.version('dbos')}",
                "n": args.n,
                "seconds": seconds,
                "cpu": cpu,
                "settings": found,
            }
        )
    )


if __name__ == "__main__":
    main()
