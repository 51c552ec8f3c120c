"""A tenant's definition cannot stall the engine: expression budgets and the maximum run time.

Every test runs on SQLite and PostgreSQL. An expression over its budget fails its
run through the definition's failure path (compensations, then RunFailed) while
the engine goes on with every other tenant's runs; a run that would wait forever
ends at its tenant's maximum run time.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import waypost as wp
from tests.helpers import of_type
from waypost.testing import TestEnv, events_of

pytestmark = pytest.mark.timeout(120)

DOUBLING = "[@, @] | " * 60 + "@"
"""Short, and its value has 2**60 leaves: no engine could store it."""


@wp.activity(name="limits.book")
def book(ctx: wp.ActivityContext, what: Any = None) -> str:
    return "booked"


@wp.activity(name="limits.unbook")
def unbook(ctx: wp.ActivityContext) -> str:
    return "unbooked"


@wp.activity(name="limits.take")
def take(ctx: wp.ActivityContext, value: Any = None) -> str:
    return "taken"


ACTIVITIES = (book, unbook, take)


def attack(where: str) -> str:
    """A definition that books (with a compensation), then evaluates DOUBLING at `where`."""
    then = {
        "input": f"""
  blow:
    type: activity
    activity: limits.take
    input: {{value: "{DOUBLING}"}}
    next: done""",
        "when": f"""
  blow:
    type: choice
    choices: [{{when: "{DOUBLING}", next: done}}]
    default: done""",
        "until": f"""
  blow:
    type: wait
    until: "{DOUBLING}"
    next: done""",
        "output": f"""
  blow:
    type: succeed
    output: "{DOUBLING}\"""",
    }[where]
    return f"""
name: attack_{where}
start: book
steps:
  book:
    type: activity
    activity: limits.book
    compensate: limits.unbook
    next: blow{then}
""" + ("" if where == "output" else "  done: {type: succeed}\n")


FRIENDLY = """
name: friendly
start: book
steps:
  book: {type: activity, activity: limits.book, output: $.booked, next: done}
  done: {type: succeed, output: booked}
"""


@pytest.mark.parametrize("where", ["input", "when", "until", "output"])
def test_an_expression_over_its_budget_fails_its_run_and_the_engine_goes_on(
    make_engine: Any, where: str
) -> None:
    engine = make_engine(*ACTIVITIES)
    engine.publish(attack(where), tenant="mallory")
    engine.publish(FRIENDLY, tenant="alice")
    with engine.running():
        began = time.monotonic()
        run = engine.start(f"attack_{where}", {}, tenant="mallory")
        assert time.monotonic() - began < 10  # start returns
        with pytest.raises(wp.WorkflowFailed) as failed:
            run.result(timeout=30)
        error = failed.value.error
        assert error["type"] == "expression_failed"
        assert "'blow'" in error["message"]
        assert "larger than 1000000 characters of JSON (max_expression_size)" in error["message"]
        assert error["details"]["compensated"] == ["book"]
        # Every other tenant's runs go on.
        other = engine.start("friendly", {}, tenant="alice")
        assert other.result(timeout=30) == "booked"
    history = run.history()
    assert [e.data["compensates"] for e in of_type(history, "ActivityScheduled")[1:]] == ["book"]
    assert of_type(history, "RunFailed")


def test_a_tenants_expression_budget_applies_to_its_runs(make_engine: Any) -> None:
    definition = """
name: counting
start: count
steps:
  count:
    type: activity
    activity: limits.take
    input: {value: "items[?@ > `0`]"}
    next: done
  done: {type: succeed}
"""
    limits = {"tight": wp.Limits(max_expression_steps=50), "*": wp.Limits()}
    engine = make_engine(*ACTIVITIES, limits=limits)
    engine.publish(definition, tenant="tight")
    engine.publish(definition, tenant="roomy")
    items = list(range(1, 100))
    with engine.running():
        tight = engine.start("counting", {"items": items}, tenant="tight")
        roomy = engine.start("counting", {"items": items}, tenant="roomy")
        assert roomy.result(timeout=30) == {"items": items}
        with pytest.raises(wp.WorkflowFailed) as failed:
            tight.result(timeout=30)
    assert failed.value.type == "expression_failed"
    assert "more than 50 steps (max_expression_steps)" in failed.value.message


WAITS_FOREVER = """
name: forever
start: book
steps:
  book: {type: activity, activity: limits.book, compensate: limits.unbook, next: wait}
  wait: {type: wait, signal: never, next: done}
  done: {type: succeed}
"""


def _limits(hours: float) -> wp.Limits:
    return wp.Limits(max_total_timeout=hours * 3600)


def test_a_run_without_a_timeout_ends_at_its_tenants_maximum_run_time(db_url: str) -> None:
    async def body() -> None:
        async with TestEnv(*ACTIVITIES, url=db_url, limits=_limits(2)) as env:
            await env.engine.publish(WAITS_FOREVER)
            run = await env.engine.start("forever", {})
            await env.settle()
            info = await run.get()
            assert info.status == "waiting"
            await env.advance(hours=1)
            await env.settle()
            assert (await run.get()).status == "waiting"
            await env.advance(hours=1, seconds=1)
            with pytest.raises(wp.WorkflowFailed) as failed:
                await run.result(timeout=10)
            error = failed.value.error
            assert error["type"] == "run_time_limit"
            assert error["message"] == (
                "the run did not finish within the maximum run time of its tenant of 2 hours "
                "(it was at step 'wait')"
            )
            assert error["details"]["compensated"] == ["book"]
            assert await env.check() == []

    asyncio.run(body())


def test_the_maximum_run_time_is_the_one_the_run_started_with(db_url: str) -> None:
    async def started() -> str:
        async with TestEnv(*ACTIVITIES, url=db_url, limits=_limits(2)) as env:
            await env.engine.publish(WAITS_FOREVER)
            run = await env.engine.start("forever", {})
            await env.settle()
            return run.run_id

    run_id = asyncio.run(started())

    async def later() -> None:
        # The tenant's limit was raised since: this run keeps the one it started with.
        async with TestEnv(*ACTIVITIES, url=db_url, limits=_limits(100)) as env:
            await env.advance(hours=2, seconds=1)
            with pytest.raises(wp.WorkflowFailed) as failed:
                await env.engine.result(run_id, timeout=10)
            assert failed.value.type == "run_time_limit"
            assert "of 2 hours" in failed.value.message
            # A new run gets the new limit.
            run = await env.engine.start("forever", {})
            await env.settle()
            await env.advance(hours=3)
            await env.settle()
            assert (await run.get()).status == "waiting"

    asyncio.run(later())


def test_a_definitions_own_shorter_timeout_still_applies(db_url: str) -> None:
    definition = WAITS_FOREVER.replace("name: forever", "name: short\ntimeout: PT30M")

    async def body() -> None:
        async with TestEnv(*ACTIVITIES, url=db_url, limits=_limits(2)) as env:
            await env.engine.publish(definition)
            run = await env.engine.start("short", {})
            await env.settle()
            await env.advance(minutes=31)
            with pytest.raises(wp.WorkflowFailed) as failed:
                await run.result(timeout=10)
            assert failed.value.type == "timeout"
            assert "within its timeout of 30 minutes" in failed.value.message
            timers = events_of(await run.history(), "TimerStarted")
            assert len(timers) == 1  # one deadline: the nearer of the two

    asyncio.run(body())


def test_a_run_input_nested_too_deep_starts_nothing(make_engine: Any) -> None:
    engine = make_engine(*ACTIVITIES)
    engine.publish(FRIENDLY)
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(wp.InputError) as refused:
        engine.start("friendly", {"deep": deep}, run_id="deep-1")
    assert refused.value.problems[0].message == "nested more than 64 levels deep"
    assert engine.list_runs() == []
    with pytest.raises(wp.RunNotFound):
        engine.get("deep-1")
