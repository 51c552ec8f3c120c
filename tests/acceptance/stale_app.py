"""The module the worker processes of the stale-worker acceptance test serve.

Each worker is ``waypost worker --db URL --app stale_app --lease 1`` with this
directory on PYTHONPATH and three paths in the environment:

- STALE_LOG: the execution log. Every execution of `apply_effect` appends one
  JSON line when it enters its body, one when it has written its effect and
  one just before it returns, each with one O_APPEND write and an fsync.
- STALE_GATE: a file the test creates to let attempt 1 go on. Attempt 1 enters
  its body, logs that, and waits for the gate; that keeps it inside its body
  for as long as the test needs, whatever the scheduling of the processes.
- STALE_LEDGER: a SQLite file standing in for a downstream system that
  deduplicates by idempotency key: the first write with a key is applied, every
  later write with the same key is a no-op.

The test process imports this module too: to start runs of `stale` and to read
the log and the ledger.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import waypost as wp

LOG_ENV = "STALE_LOG"
GATE_ENV = "STALE_GATE"
LEDGER_ENV = "STALE_LEDGER"
HELD_ATTEMPT = 1  # the attempt that waits for the gate inside its body
GATE_POLL = 0.01
GATE_LIMIT = 120.0  # a held attempt gives up waiting after this long (the test has failed)

# Attempt 1 loses its worker; attempt 2 must come quickly and must not be the last.
RETRY = wp.Retry(
    max_attempts=5,
    initial_interval=timedelta(milliseconds=50),
    backoff=1.0,
    max_interval=timedelta(milliseconds=50),
)


def log(ctx: wp.ActivityContext, marker: str, **extra: Any) -> None:
    """Append one line about this execution to the log and make it durable."""
    line = json.dumps(
        {
            "marker": marker,
            "run": ctx.run_id,
            "step": ctx.step_id,
            "attempt": ctx.attempt,
            "key": ctx.idempotency_key,
            "pid": os.getpid(),
            **extra,
        },
        sort_keys=True,
    )
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())  # one O_APPEND write: lines never interleave
        os.fsync(fd)
    finally:
        os.close(fd)


def read_log(path: Path) -> list[dict[str, Any]]:
    """The logged lines (complete ones only: a worker may be writing one now)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def _ledger(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS effects ("
        " key TEXT PRIMARY KEY, run_id TEXT NOT NULL, order_id TEXT NOT NULL,"
        " attempt INTEGER NOT NULL, pid INTEGER NOT NULL)"
    )
    return conn


def apply_once(ctx: wp.ActivityContext, order_id: str) -> bool:
    """The downstream effect, keyed by the idempotency key: True if this write applied it."""
    conn = _ledger(os.environ[LEDGER_ENV])
    try:
        cur = conn.execute(
            "INSERT INTO effects (key, run_id, order_id, attempt, pid) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (key) DO NOTHING",
            (ctx.idempotency_key, ctx.run_id, order_id, ctx.attempt, os.getpid()),
        )
        return cur.rowcount == 1
    finally:
        conn.close()


def read_ledger(path: Path) -> list[tuple[Any, ...]]:
    """Every applied effect: (key, run_id, order_id, attempt, pid)."""
    if not path.exists():
        return []
    conn = sqlite3.connect(path, timeout=30)
    try:
        return conn.execute(
            "SELECT key, run_id, order_id, attempt, pid FROM effects ORDER BY key"
        ).fetchall()
    finally:
        conn.close()


@wp.activity(retry=RETRY, timeout=timedelta(seconds=120))
def apply_effect(ctx: wp.ActivityContext, order_id: str) -> str:
    log(ctx, "entered")
    if ctx.attempt == HELD_ATTEMPT:
        gate = Path(os.environ[GATE_ENV])
        limit = time.monotonic() + GATE_LIMIT
        while not gate.exists():  # the test opens the gate; this is not a timing assumption
            if time.monotonic() > limit:
                raise TimeoutError(f"the gate {gate} was not opened within {GATE_LIMIT}s")
            time.sleep(GATE_POLL)
    applied = apply_once(ctx, order_id)
    log(ctx, "effect", applied=applied)
    result = f"attempt {ctx.attempt}"
    log(ctx, "returning", result=result)
    return result


@wp.workflow(name="stale", version="1")
async def stale(ctx: wp.WorkflowContext, order_id: str) -> str:
    """One side-effecting step; the run's result is the result of the attempt that counted."""
    result: str = await ctx.run(apply_effect, order_id)
    return result


ITEMS = (stale, apply_effect)
