"""Statements and time per fired timer on PostgreSQL, the store alone (no engine).

`--runs` runs (1,000) each get a durable timer due at once (`--timers` per run, 1); then
the store fires them in batches of `--batch` (16, the engine's batch) with no owner, as
an engine at its workflow cap does, until none is left, and the benchmark reports the
statements the firing transactions sent (every statement of a firing transaction, its
BEGIN and COMMIT included, a savepoint as two), the transactions, and the time per
batch. It counts by wrapping the store's transaction handle, so it needs no server
setting; the rows it checks afterwards: every timer fired once.

    .venv/bin/python bench/timer_statements.py --db postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from _db import fresh_postgres

from waypost.model.events import EventType, NewEvent
from waypost.store import open_store
from waypost.store.base import NewRun, NewTimer, RunCommit
from waypost.store.effects import StartTimers
from waypost.store.postgres import PostgresTx

T0 = 1_700_000_000.0
TENANT = "default"


class Counted:
    """A cursor or connection whose statements are counted."""

    count = 0

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        Counted.count += 1
        return self._inner.execute(*args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        Counted.count += len(args[1]) if len(args) > 1 else 1
        return self._inner.executemany(*args, **kwargs)

    def transaction(self, *args: Any, **kwargs: Any) -> Any:
        Counted.count += 2  # SAVEPOINT and RELEASE
        return self._inner.transaction(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def count_statements() -> None:
    init = PostgresTx.__init__

    def counted_init(self: PostgresTx, conn: Any, *args: Any, **kwargs: Any) -> None:
        init(self, conn, *args, **kwargs)
        self.statements = Counted(self.statements)
        self.conn = Counted(conn)  # type: ignore[assignment]

    PostgresTx.__init__ = counted_init  # type: ignore[method-assign]


async def set_timers(url: str, runs: int, per_run: int) -> None:
    store = open_store(url)
    await store.open()
    try:
        for i in range(runs):
            run_id = f"r{i}"
            started = NewEvent(EventType.RUN_STARTED, {"workflow": "wf", "version": "1"}, T0)
            await store.create_run(
                NewRun(
                    tenant=TENANT,
                    run_id=run_id,
                    workflow="wf",
                    version="1",
                    input={},
                    ts=T0,
                    started=started,
                )
            )
            steps = [str(n) for n in range(per_run)]
            events = [
                NewEvent(EventType.TIMER_STARTED, {"step": s, "fire_at": T0 + 1}, T0) for s in steps
            ]
            await store.commit_run(
                RunCommit(
                    TENANT,
                    run_id,
                    events,
                    T0,
                    effects=(StartTimers([NewTimer(s, T0 + 1) for s in steps]),),
                )
            )
    finally:
        await store.close()


async def fire_all(url: str, batch: int) -> dict[str, Any]:
    store = open_store(url)
    await store.open()
    try:
        before = dict(store.stats)  # type: ignore[attr-defined]
        Counted.count = 0
        fired, took = 0, []
        while True:
            t = time.perf_counter()
            got = await store.fire_due_timers(T0 + 10, batch, None, [], 30.0)
            took.append(time.perf_counter() - t)
            fired += len(got)
            if not got:
                break
        after = store.stats  # type: ignore[attr-defined]
        statements = Counted.count
        transactions = after["transactions"] - before["transactions"]
        history = [await store.load_history(TENANT, f"r{i}") for i in range(3)]
    finally:
        await store.close()
    once = all(
        [e.type for e in h].count("TimerFired") == [e.type for e in h].count("TimerStarted")
        for h in history
    )
    return {
        "fired": fired,
        "statements": statements + 2 * transactions,  # with each BEGIN and COMMIT
        "transactions": transactions,
        "batch_ms_p50": statistics.median(took[:-1] or took) * 1000,
        "fired_once": once,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="a PostgreSQL URL")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--timers", type=int, default=1, help="timers per run")
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    with fresh_postgres(args.db) as url:
        asyncio.run(set_timers(url, args.runs, args.timers))
        count_statements()
        out = asyncio.run(fire_all(url, args.batch))
    n = out["fired"]
    print(
        f"postgresql: {args.runs} runs x {args.timers} timer(s), batches of {args.batch}: "
        f"{n} fired in {out['transactions']} transactions, {out['statements']} statements "
        f"({out['statements'] / max(n, 1):.2f} a timer), a batch p50 "
        f"{out['batch_ms_p50']:.1f} ms; each fired once: {out['fired_once']}"
    )


if __name__ == "__main__":
    main()
