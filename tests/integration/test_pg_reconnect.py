"""A PostgreSQL server that goes away and comes back (a server of the test's own,
stopped as by a crash): runs move again within about a second of its return, the
log says it is lost once and back once, and a server that takes no writes is named
with the URL setting that avoids it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

import waypost as wp
from tests.helpers import eventually, of_type
from tests.helpers.flows import sum_of_steps
from tests.helpers.pgserver import PrivatePostgres, private_postgres

pytestmark = pytest.mark.timeout(180)


@wp.activity
def tick(ctx: wp.ActivityContext, i: int) -> int:
    return i


@wp.workflow(name="ticker")
async def ticker(ctx: wp.WorkflowContext, n: int) -> int:
    return await sum_of_steps(ctx, tick, n)


@contextmanager
def serving(url: str) -> Iterator[wp.Engine]:
    """An engine serving `ticker` on the database at `url`."""
    engine = wp.Engine(url, lease=2, poll_interval=0.2)
    try:
        engine.register(ticker, tick)
        with engine.running():
            yield engine
    finally:
        engine.close()


@contextmanager
def ticking(**settings: str) -> Iterator[tuple[PrivatePostgres, wp.Engine]]:
    """A server of the test's own, and an engine serving `ticker` on it."""
    with private_postgres(**settings) as server, serving(server.url) as engine:
        yield server, engine


def _steps(engine: wp.Engine, run_id: str) -> int:
    return len(of_type(engine.history(run_id), "ActivityCompleted"))


def test_runs_move_again_within_seconds_of_the_server_coming_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with ticking() as (server, engine):
        run = engine.start(ticker, 100_000)
        eventually(lambda: _steps(engine, run.run_id) >= 5, "five steps", timeout=30)
        server.stop()
        time.sleep(8)  # away long enough for a doubling backoff to reach 8 s
        server.start()
        back = time.monotonic()
        before = eventually(lambda: _steps(engine, run.run_id), "the history", timeout=30)
        eventually(lambda: _steps(engine, run.run_id) > before, "a step", timeout=30)
        moving_after = time.monotonic() - back
    # Generous for a loaded machine: the pools' and the steps' retries are a second
    # apart (before, they doubled to 8 s and more, and a caller waited 30 s for a
    # connection).
    assert moving_after < 5.0, f"steps moved again only {moving_after:.1f} s after"
    store_lines = [r.getMessage() for r in caplog.records if r.name == "waypost.store"]
    lost = [m for m in store_lines if "cannot be reached" in m]
    again = [m for m in store_lines if "is reachable again after" in m]
    assert len(lost) == 1 and len(again) == 1, store_lines
    assert f"127.0.0.1:{server.port}" in lost[0]
    noisy = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("waypost.", "psycopg.pool"))
    ]
    assert noisy == [lost[0], again[0]], noisy


def test_a_server_that_takes_no_writes_is_named_with_the_setting_that_avoids_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        private_postgres(default_transaction_read_only="on") as server,
        pytest.raises(wp.StoreError, match="standby") as refused,
    ):
        wp.Engine(server.url).close()
    assert "target_session_attrs=read-write" in str(refused.value)
    assert f"127.0.0.1:{server.port}" in str(refused.value)


def test_a_url_that_lists_a_standby_first_runs_on_the_primary_after_it() -> None:
    """Several hosts in the URL (a primary and its standby, in any order): waypost
    connects to the one that takes writes; with none, its error names every host."""
    with (
        private_postgres(default_transaction_read_only="on") as standby,
        private_postgres() as primary,
    ):
        hosts = f"127.0.0.1:{standby.port},127.0.0.1:{primary.port}"
        url = f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"
        with serving(url) as engine:
            assert engine.start(ticker, 3).result(timeout=60) == sum(range(3))
        primary.stop()
        with pytest.raises(wp.StoreError) as refused:
            wp.Engine(url).close()
    assert f"{hosts}/postgres" in str(refused.value)


def test_a_server_that_turns_read_only_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with ticking() as (server, engine):
        assert engine.start(ticker, 3).result(timeout=60) == sum(range(3))
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            conn.execute("SELECT pg_reload_conf()")

        def refused() -> bool:
            try:
                engine.start(ticker, 1)
            except wp.StoreError:
                return True
            return False

        eventually(refused, "a write to be refused", timeout=20)
    lines = [r.getMessage() for r in caplog.records if r.name == "waypost.store"]
    assert len(lines) == 1 and "standby" in lines[0], lines
    assert "target_session_attrs=read-write" in lines[0]
