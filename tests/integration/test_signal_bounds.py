"""Signals and inputs are bounded per tenant (both stores): a payload too large, or a
flood of signals a run has not taken in, is refused with `QuotaExceeded` and nothing
is written; the run's own progress is never buried."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, of_type

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="collector")
async def collector(ctx: wp.WorkflowContext, n: int) -> list[Any]:
    got = []
    for _ in range(n):
        got.append(await ctx.wait_signal("item"))
    return got


LIMITS = {"small": wp.Limits(max_payload_bytes=1000, max_pending_signals=3)}


def test_a_payload_over_the_tenants_limit_is_refused(make_engine: Any) -> None:
    engine = make_engine(collector, limits=LIMITS)
    run = engine.start(collector, 1, tenant="small")
    with pytest.raises(wp.QuotaExceeded, match="at most 1000") as refused:
        engine.signal(run.run_id, "item", "x" * 5000, tenant="small")
    assert refused.value.quota == "max_payload_bytes"
    assert of_type(engine.history(run.run_id, tenant="small"), "SignalReceived") == []
    with pytest.raises(wp.QuotaExceeded, match="input"):
        engine.start(collector, ["y" * 5000], tenant="small", run_id="too-big")
    assert [r.run_id for r in engine.list_runs(tenant="small")] == [run.run_id]
    # Another tenant has the default limits.
    other = engine.start(collector, 1, tenant="roomy")
    engine.signal(other.run_id, "item", "x" * 5000, tenant="roomy")


def test_signals_a_run_has_not_taken_in_are_bounded(make_engine: Any) -> None:
    engine = make_engine(collector, limits=LIMITS)
    run = engine.start(collector, 5, tenant="small")  # nobody serves it yet
    for i in range(3):
        engine.signal(run.run_id, "item", i, tenant="small")
    with pytest.raises(wp.QuotaExceeded, match="has 3 signals it has not taken in") as refused:
        engine.signal(run.run_id, "item", 3, tenant="small")
    assert refused.value.quota == "max_pending_signals"
    assert len(of_type(engine.history(run.run_id, tenant="small"), "SignalReceived")) == 3
    with engine.running():  # the run takes them in; then more are welcome
        eventually(
            lambda: (
                engine.get(run.run_id, tenant="small").waiting_for
                and engine.get(run.run_id, tenant="small").status == "waiting"
            ),
            "the run to take in its signals",
        )
        engine.signal(run.run_id, "item", 3, tenant="small")
        engine.signal(run.run_id, "item", 4, tenant="small")
        assert run.result(timeout=10) == [0, 1, 2, 3, 4]


# == signals the code never takes in (a flood) ===========================================
@wp.workflow(name="awaiter")
async def awaiter(ctx: wp.WorkflowContext, _: Any = None) -> Any:
    return await ctx.wait_signal("go")


@wp.workflow(name="handled")
async def handled(ctx: wp.WorkflowContext, n: int) -> list[Any]:
    got: list[Any] = []
    ctx.on_signal("add", got.append)
    await ctx.wait_condition(lambda: len(got) >= n)
    return got


@wp.workflow(name="reads_later")
async def reads_later(ctx: wp.WorkflowContext, n: int) -> list[Any]:
    await ctx.wait_signal("start")
    return [await ctx.wait_signal("item") for _ in range(n)]


FLOOD = {"flooded": wp.Limits(max_pending_signals=20)}


def _taken_in(db_url: str, run_id: str) -> bool:
    """Whether the run's code has been fed every event of its history."""
    [(processed, last)] = db_query(
        db_url, "SELECT processed_seq, last_seq FROM runs WHERE run_id = ?", (run_id,)
    )
    return bool(processed == last)


def _flood(engine: wp.Engine, run_id: str, db_url: str) -> int:
    """Send signals of a name the run never waits for until they are refused, the run
    having taken in every one it got; how many it got."""
    sent = 0
    refused: wp.QuotaExceeded | None = None
    while refused is None:
        try:
            engine.signal(run_id, "junk", sent, tenant="flooded")
        except wp.QuotaExceeded as exc:
            refused = exc
        else:
            sent += 1
            assert sent <= 20, "a signal beyond the bound was taken"
    assert refused.quota == "max_pending_signals"
    eventually(lambda: _taken_in(db_url, run_id), "the run to take in what it got")
    return sent


def test_a_flood_of_signals_the_run_never_reads_is_refused_and_its_own_signal_gets_in(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(awaiter, limits=FLOOD)
    with engine.running():
        run = engine.start(awaiter, tenant="flooded")
        eventually(lambda: engine.get(run.run_id, tenant="flooded").status == "waiting")
        assert _flood(engine, run.run_id, db_url) == 20
        # The run has taken every one in (they wait, unread, in its code): still refused.
        # (Before, a signal taken in no longer counted: the flood went on to 50,000 events,
        # and then the run's own signal was refused for good.)
        for i in range(3):
            with pytest.raises(wp.QuotaExceeded, match="has 20 signals it has not taken in"):
                engine.signal(run.run_id, "junk", f"more-{i}", tenant="flooded")
        assert _taken_in(db_url, run.run_id)
        # The signal the run waits for still gets in, and the run completes.
        engine.signal(run.run_id, "go", "the real one", tenant="flooded")
        assert engine.result(run.run_id, timeout=20, tenant="flooded") == "the real one"
    history = engine.history(run.run_id, tenant="flooded")
    names = [e.data["name"] for e in history if e.type == "SignalReceived"]
    assert names == ["junk"] * 20 + ["go"]


def test_signals_the_code_handles_get_in_past_a_flood(make_engine: Any, db_url: str) -> None:
    engine = make_engine(handled, limits=FLOOD)
    with engine.running():
        run = engine.start(handled, 2, tenant="flooded")
        eventually(lambda: engine.get(run.run_id, tenant="flooded").status == "waiting")
        assert _flood(engine, run.run_id, db_url) == 20
        engine.signal(run.run_id, "add", "a", tenant="flooded")
        engine.signal(run.run_id, "add", "b", tenant="flooded")
        assert engine.result(run.run_id, timeout=20, tenant="flooded") == ["a", "b"]


def test_signal_with_start_to_a_flooded_run_is_refused_but_its_own_name_gets_in(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(awaiter, limits=FLOOD)
    with engine.running():
        engine.start(awaiter, tenant="flooded", run_id="sws")
        eventually(lambda: engine.get("sws", tenant="flooded").status == "waiting")
        assert _flood(engine, "sws", db_url) == 20
        with pytest.raises(wp.QuotaExceeded) as refused:
            engine.signal_with_start(
                awaiter, run_id="sws", signal="junk", payload="x", tenant="flooded"
            )
        assert refused.value.quota == "max_pending_signals"
        engine.signal_with_start(
            awaiter, run_id="sws", signal="go", payload="started", tenant="flooded"
        )
        assert engine.result("sws", timeout=20, tenant="flooded") == "started"


def test_signals_sent_before_the_code_reads_them_still_arrive(make_engine: Any) -> None:
    engine = make_engine(reads_later, limits=FLOOD)
    with engine.running():
        run = engine.start(reads_later, 5, tenant="flooded")
        eventually(lambda: engine.get(run.run_id, tenant="flooded").status == "waiting")
        for i in range(5):  # held unread: the code waits for "start" first
            engine.signal(run.run_id, "item", i, tenant="flooded")
        engine.signal(run.run_id, "start", None, tenant="flooded")
        assert engine.result(run.run_id, timeout=20, tenant="flooded") == [0, 1, 2, 3, 4]


def test_signal_with_start_to_a_run_whose_history_is_full_is_refused(make_engine: Any) -> None:
    engine = make_engine(collector, quotas=wp.Quotas(max_events_per_run=4))
    run = engine.start(collector, 10, run_id="full")  # nobody serves it: signals pile up
    engine.signal("full", "item", 1)
    engine.signal("full", "item", 2)
    engine.signal("full", "item", 3)
    with pytest.raises(wp.QuotaExceeded) as refused:
        engine.signal_with_start(collector, 10, run_id="full", signal="item", payload=4)
    assert refused.value.quota == "max_events_per_run"
    assert len(engine.history(run.run_id)) == 4
