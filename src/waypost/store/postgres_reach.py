"""A PostgreSQL server away: which errors say so, and what the pools do meanwhile.

`Reach` (store/reach.py) says a loss once and its end once; this module tells which
psycopg errors are a loss (a connection that failed or was closed, a server shutting
down or starting up, a standby that takes no writes), keeps psycopg_pool from saying
every failed reconnect of waypost's pools again, and revives a pool whose callers
wait for a connection while the server is away.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from .reach import Reach

# Seconds between tries to reach a server that went away (the pools' and the listener's).
RECONNECT_AFTER = 1.0
# Errors of a server shutting down or starting up (admin_shutdown, crash_shutdown,
# cannot_connect_now): like a lost connection, they pass.
_SHUTDOWN_STATES = frozenset({"57P01", "57P02", "57P03"})
STANDBY_HINT = (
    "If the URL lists several hosts, add target_session_attrs=read-write so that "
    "waypost connects to the one that is the primary now"
)


def read_only(exc: BaseException) -> bool:
    """A write refused because the server is a standby (or read-only)."""
    return isinstance(exc, psycopg.errors.ReadOnlySqlTransaction)


def unreachable(exc: BaseException) -> bool:
    """A request that failed because the server cannot be reached now."""
    state = getattr(exc, "sqlstate", None)
    return isinstance(exc, psycopg.OperationalError | OSError) and (
        state is None or state.startswith("08") or state in _SHUTDOWN_STATES
    )


def revive(pool: ConnectionPool[Any], reach: Reach) -> None:
    """While the server is away: drop the pool's idle connections (dead with it), then
    ask the pool for a connection every second. Each ask makes it try to connect at
    once, so callers left waiting for a connection get one within about a second of
    the server's return (a pool gives up trying after `RECONNECT_AFTER`, and tries
    again only when asked)."""
    with contextlib.suppress(Exception):
        pool.check()
    while not reach.reachable and not pool.closed:
        began = time.monotonic()
        try:
            with pool.connection(timeout=RECONNECT_AFTER):
                pass
        except Exception:  # still away (or closed): ask again
            time.sleep(RECONNECT_AFTER / 10)
        else:
            reach.back(began, wrote=False)
            time.sleep(RECONNECT_AFTER)  # (a loss of writes ends with a write)


class _QuietPools(logging.Filter):
    """psycopg_pool warns of every failed reconnect of every pool; for waypost's pools,
    `Reach` says it once. Its "discarding closed connection" lines (which do not name
    the pool) are left out while a waypost store is away."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith(("error connecting in", "reconnection attempt in pool")):
            args = record.args
            return not (isinstance(args, tuple) and str(args[0]).startswith("waypost-"))
        if message.startswith(("discarding closed connection", "discarding broken connection")):
            return Reach.all_reachable()
        return True


logging.getLogger("psycopg.pool").addFilter(_QuietPools())
