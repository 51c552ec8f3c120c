"""Schedule metrics of a real engine and server, on both stores: fires by outcome
(started, caught up, backfilled, skipped and buffered by the overlap policy), the fire
lag, and schedules by state read at scrape time, each holding what a scripted scenario
must have produced; and a fire several engines race on is counted once."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.metrics import Scrape
from waypost.errors import RunNotActive
from waypost.model.schedules import fire_run_id
from waypost.observability import Metrics
from waypost.testing import TestClock

from .server_fixtures import serve, serve_metered

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="sm_noop")
async def noop(ctx: wp.WorkflowContext, label: str) -> str:
    return label


@wp.workflow(name="sm_gated")
async def gated(ctx: wp.WorkflowContext, label: str) -> str:
    await ctx.wait_signal("go")  # held by a wait: the clock moves by hours
    return label


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def set_clock(clock: TestClock, when: float) -> None:
    clock.jump(when - clock())


def scrape(base: str) -> Scrape:
    scraper = {"Authorization": "Bearer scrape-secret"}  # the series by tenant
    answer = httpx.get(base + "/metrics", timeout=30, headers=scraper)
    assert answer.status_code == 200, answer.text
    return Scrape(answer.text)


def test_fires_by_outcome_lag_and_schedules_by_state(make_engine: Any, serve: Any) -> None:
    clock = TestClock(start=at("2026-06-01T09:59:00"))
    engine, base = serve_metered(make_engine, serve, noop, gated, clock=clock, ttl=0.0)
    hour = timedelta(hours=1)
    engine.schedule(gated, id="skipper", every=hour, input="s", overlap="skip", tenant="t")
    engine.schedule(gated, id="buffer", every=hour, input="b", overlap="buffer_one", tenant="t")
    with engine.running():
        set_clock(clock, at("2026-06-01T10:00:01"))
        for sid in ("skipper", "buffer"):
            run_id = fire_run_id(sid, at("2026-06-01T10:00:00"))
            eventually(
                lambda sid=sid, run_id=run_id: (
                    engine.describe_schedule(sid, tenant="t").last_run_id == run_id
                ),
                f"{sid}'s 10:00 fire",
            )
        engine.schedule(
            noop, id="late", every=hour, input="l", overlap="allow_all", catchup="all", tenant="t"
        )
        # Three hours pass at once: "late" catches up 11:00 and 12:00 and starts 13:00;
        # the others' runs still run, so "skipper" skips 13:00 and "buffer" holds it.
        set_clock(clock, at("2026-06-01T13:00:01"))
        eventually(
            lambda: (
                engine.describe_schedule("buffer", tenant="t").buffered_fire_at
                == at("2026-06-01T13:00:00")
                and engine.describe_schedule("skipper", tenant="t").next_fire_at
                == at("2026-06-01T14:00:00")
                and engine.describe_schedule("late", tenant="t").next_fire_at
                == at("2026-06-01T14:00:00")
            ),
            "the 13:00 fires",
        )
        engine.pause_schedule("late", tenant="t")
        seen = scrape(base)
        assert seen("waypost_schedule_fires_total", tenant="t", outcome="started") == 3
        assert seen("waypost_schedule_fires_total", tenant="t", outcome="caught_up") == 2
        assert seen("waypost_schedule_fires_total", tenant="t", outcome="skipped") == 1
        assert seen("waypost_schedule_fires_total", tenant="t", outcome="buffered") == 1
        assert seen("waypost_schedules", tenant="t", state="active") == 1
        assert seen("waypost_schedules", tenant="t", state="buffered") == 1
        assert seen("waypost_schedules", tenant="t", state="paused") == 1
        # the on-time fires started a second after they were due, the caught-up ones
        # one hour and two hours after
        lag = "waypost_schedule_fire_lag_seconds"
        assert seen(f"{lag}_count") == 5
        assert seen(f"{lag}_bucket", le="60.0") == 3
        assert seen(f"{lag}_bucket", le="900.0") == 3
        assert seen(f"{lag}_bucket", le="14400.0") == 5

        # The buffer's run ends: its buffered fire starts.
        first = fire_run_id("buffer", at("2026-06-01T10:00:00"))
        engine.signal(first, "go", tenant="t")
        eventually(
            lambda: engine.describe_schedule("buffer", tenant="t").buffered_fire_at is None,
            "the buffered fire",
        )
        filled = engine.backfill_schedule(
            "late", "2026-05-31T00:00:00Z", "2026-05-31T01:00:00Z", tenant="t"
        )
        assert [run for _, run in filled.fires if run is not None] != []
        again = engine.backfill_schedule(  # the same range: its runs exist, nothing new
            "late", "2026-05-31T00:00:00Z", "2026-05-31T01:00:00Z", tenant="t"
        )
        assert again.fires == filled.fires
        seen = scrape(base)
        assert seen("waypost_schedule_fires_total", tenant="t", outcome="started") == 4
        assert seen("waypost_schedule_fires_total", tenant="t", outcome="backfilled") == 2
        assert seen(f"{lag}_count") == 6  # backfills have no lag to tell
        assert seen("waypost_schedules", tenant="t", state="buffered") == 0
        assert seen("waypost_schedules", tenant="t", state="active") == 2
        for run in engine.list_runs(tenant="t", limit=100):
            if not run.status.finished:
                with contextlib.suppress(RunNotActive):
                    engine.signal(run.run_id, "go", tenant="t")


def test_a_fire_raced_by_three_engines_is_counted_once(make_engine: Any) -> None:
    clock = TestClock(start=at("2026-06-01T09:59:00"))
    observed = [Metrics(process=False) for _ in range(3)]
    engines = [make_engine(noop, clock=clock, observer=m) for m in observed]
    engines[0].schedule(noop, id="raced", every=timedelta(hours=1), input="r")
    with contextlib.ExitStack() as stack:
        for e in engines:
            stack.enter_context(e.running())
        set_clock(clock, at("2026-06-01T10:00:01"))
        eventually(
            lambda: engines[0].describe_schedule("raced").next_fire_at == at("2026-06-01T11:00:00"),
            "the 10:00 fire",
        )
        run_id = fire_run_id("raced", at("2026-06-01T10:00:00"))
        assert engines[0].result(run_id, timeout=20) == "r"
    labels = {"tenant": "default", "outcome": "started"}
    told = [m.registry.get_sample_value("waypost_schedule_fires_total", labels) for m in observed]
    assert sum(n or 0 for n in told) == 1
