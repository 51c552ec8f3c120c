"""Signals and inputs are bounded per tenant (both stores): a payload too large, or a
flood of signals a run has not taken in, is refused with `QuotaExceeded` and nothing
is written; the run's own progress is never buried."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type

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
