"""One tenant's expensive definitions and queries cannot stall the engine or another tenant.

Every test runs on SQLite and PostgreSQL. A run's expressions together are bounded
(`max_run_expression_steps`), so neither the run nor a replay or query of it costs
more; replays, definition runs and queries run on the compute lane, off the event
loop, with a CPU-time limit per call and a bound on what a tenant's callers may have
waiting there.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type

pytestmark = pytest.mark.timeout(180)


@wp.activity(name="iso.take")
def take(ctx: wp.ActivityContext, value: Any = None) -> Any:
    return value


HEAVY = """
name: heavy
start: each
steps:
  each:
    type: map
    items: items
    concurrency: 1
    iterator:
      start: crunch
      steps:
        crunch:
          type: pass
          set: {$.n: "length(big[?@ > `0`])"}
          next: keep
        keep: {type: activity, activity: iso.take, input: {value: n}, output: $.kept, next: fin}
        fin: {type: succeed}
    output: $.out
    next: hold
  hold: {type: wait, signal: go, next: done}
  done: {type: succeed}
"""

LIGHT = """
name: light
start: p
steps:
  p: {type: activity, activity: iso.take, input: {value: a}, output: $.x, next: done}
  done: {type: succeed, output: x}
"""


async def waiting(engine: wp.AsyncEngine, run_id: str, tenant: str) -> None:
    """Return once the run waits (for its signal); fail if it ended or was suspended."""
    while (status := (await engine.get(run_id, tenant=tenant)).status) != "waiting":
        assert status in ("running", "waiting"), status
        await asyncio.sleep(0.05)


def taking_engine(db_url: str, **options: Any) -> wp.AsyncEngine:
    """An engine that polls often, leases briefly and serves `iso.take`."""
    engine = wp.AsyncEngine(db_url, poll_interval=0.05, lease=2.0, **options)
    engine.register(take)
    return engine


def test_a_runs_expressions_together_are_bounded_and_every_replay_stops_where_it_did(
    make_engine: Any,
) -> None:
    # Each item's expression visits about 4 x 100 nodes: the run's 2,000 run out at the
    # fifth item or so, whatever the per-expression budget allows.
    limits = {"tight": wp.Limits(max_run_expression_steps=2_000), "*": wp.Limits()}
    engine = make_engine(take, limits=limits, cache_size=0)  # every activation replays
    engine.publish(HEAVY, tenant="tight")
    engine.publish(LIGHT, tenant="other")
    data = {"items": list(range(30)), "big": list(range(1, 101))}
    with engine.running():
        run = engine.start("heavy", data, tenant="tight")
        other = engine.start("light", {"a": 1}, tenant="other")
        with pytest.raises(wp.WorkflowFailed) as failed:
            run.result(timeout=60)
        assert other.result(timeout=60) == 1
    assert failed.value.type == "expression_budget_spent"
    assert "more than 2000 steps in all (max_run_expression_steps)" in failed.value.message
    history = run.history()
    kept = of_type(history, "ActivityCompleted")
    assert 2 < len(kept) < 10  # it stopped part way through the 30 items, at the budget
    # A replay of the whole history (a query does one) stops at the same expression:
    # it matches the history instead of going on past it.
    answer = engine.query(run.run_id, "data", tenant="tight")
    assert answer["items"] == data["items"]
    assert history[0].data["definition"]["limits"]["max_run_expression_steps"] == 2_000


def test_a_tenants_queries_replay_off_the_loop_that_serves_everyone_else(db_url: str) -> None:
    async def main() -> None:
        engine = taking_engine(db_url)
        async with engine:
            await engine.publish(HEAVY, tenant="a")
            await engine.publish(LIGHT, tenant="b")
            # Each item's expression takes 10,000s of steps: replaying the run is seconds of
            # CPU, all of it while the run waits for its signal.
            data = {"items": list(range(10)), "big": list(range(1, 20_001))}
            async with engine.running():
                run = await engine.start("heavy", data, tenant="a")
                await asyncio.wait_for(waiting(engine, run.run_id, "a"), 60)
                other = await engine.start("light", {"a": 2}, tenant="b")
                query = asyncio.ensure_future(engine.query(run.run_id, "data", tenant="a"))

                async def replaying() -> None:
                    while True:
                        if (await engine.stats())["compute"]["running"].get("a"):
                            return
                        await asyncio.sleep(0.001)

                await asyncio.wait_for(replaying(), 30)
                # While the lane replays tenant a's run, the loop serves tenant b: its run
                # completes and is read, and a's query is still replaying after that.
                assert await other.result(timeout=60) == 2
                info = await engine.get(other.run_id, tenant="b")
                assert info.status == "completed"
                assert (await engine.stats())["compute"]["running"].get("a") == 1
                assert not query.done()
                assert (await query)["items"] == data["items"]

    asyncio.run(main())


def test_an_activation_past_the_cpu_limit_suspends_its_run_and_a_query_of_it_is_refused(
    make_engine: Any,
) -> None:
    engine = make_engine(take, compute_cpu_limit=0.02, cache_size=0)
    engine.publish(HEAVY, tenant="a")
    engine.publish(LIGHT, tenant="b")
    # One item's expression alone is about 0.1 s of CPU, five times the limit: the run's
    # first activation passes it, and so does any replay of the run (a query's).
    data = {"items": list(range(10)), "big": list(range(1, 20_001))}
    with engine.running():
        run = engine.start("heavy", data, tenant="a")
        eventually(lambda: engine.get(run.run_id, tenant="a").status == "suspended", "suspend")
        assert engine.start("light", {"a": 3}, tenant="b").result(timeout=60) == 3
        with pytest.raises(wp.ComputeLimitExceeded, match=r"took more than 0\.02 s of CPU"):
            engine.query(run.run_id, "data", tenant="a")
    suspended = of_type(run.history(), "RunSuspended")[-1].data["error"]
    assert suspended["type"] == "ComputeLimitExceeded"
    assert "took more than 0.02 s of CPU" in suspended["message"]


def test_a_flood_of_one_tenants_queries_is_refused_past_its_bound_and_another_is_served(
    db_url: str,
) -> None:
    async def main() -> None:
        engine = taking_engine(db_url, max_compute_waiting=2)
        async with engine:
            await engine.publish(HEAVY, tenant="a")
            await engine.publish(HEAVY, tenant="b")
            data = {"items": list(range(6)), "big": list(range(1, 20_001))}
            async with engine.running():
                runs = {t: await engine.start("heavy", data, tenant=t) for t in ("a", "b")}
                for t, run in runs.items():
                    await asyncio.wait_for(waiting(engine, run.run_id, t), 60)
                flood = [
                    asyncio.ensure_future(engine.query(runs["a"].run_id, "data", tenant="a"))
                    for _ in range(8)
                ]
                answers = await asyncio.gather(*flood, return_exceptions=True)
                refused = [a for a in answers if isinstance(a, wp.QuotaExceeded)]
                answered = [a for a in answers if isinstance(a, dict)]
                assert len(refused) >= 6 and len(answered) >= 1, answers
                assert {r.quota for r in refused} == {"max_compute_waiting"}
                # Tenant b's query is its own: not refused for a's flood.
                assert (await engine.query(runs["b"].run_id, "data", tenant="b"))["items"]
                # The same question of the same history is answered from what was kept.
                again = await engine.query(runs["a"].run_id, "data", tenant="a")
                assert again == answered[0]

    asyncio.run(main())
