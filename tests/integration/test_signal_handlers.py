"""Signal handlers run by the engine (both stores): an `async def` handler runs to its
end as part of the run, its steps recorded; one that cannot take the payload suspends
the run at the line that registers it."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type
from tests.helpers.flows import handler_without_payload

pytestmark = pytest.mark.timeout(120)


@wp.activity
def stamp(ctx: wp.ActivityContext, item: str) -> str:
    return f"checked {item}"


@wp.workflow(name="async-signal-handler")
async def checker(ctx: wp.WorkflowContext, n: int) -> list[str]:
    seen: list[str] = []

    async def on_item(item: str) -> None:
        seen.append(await ctx.run(stamp, item))

    ctx.on_signal("item", on_item)
    await ctx.wait_condition(lambda: len(seen) >= n)
    return sorted(seen)


def test_an_async_signal_handler_runs_and_its_effect_is_kept(make_engine: Any) -> None:
    engine = make_engine(checker, stamp)
    with engine.running():
        run = engine.start(checker, 2)
        engine.signal(run.run_id, "item", "a")
        engine.signal(run.run_id, "item", "b")
        assert run.result(timeout=60) == ["checked a", "checked b"]
    history = engine.history(run.run_id)
    assert sorted(e.data["step"] for e in of_type(history, "ActivityCompleted")) == ["h1.1", "h2.1"]
    assert engine.verify(run.run_id) == []


@wp.workflow(name="handler-without-payload")
async def no_payload(ctx: wp.WorkflowContext) -> None:
    await handler_without_payload(ctx)


def test_a_handler_that_cannot_take_the_payload_suspends_the_run_at_its_registration(
    make_engine: Any,
) -> None:
    engine = make_engine(no_payload)
    with engine.running():
        run = engine.start(no_payload)
        eventually(lambda: engine.get(run.run_id).status == "suspended", "the run to suspend")
    error = engine.get(run.run_id).error or {}
    assert "test_signal_handlers.py:" in str(error.get("site"))
    assert "must take one argument" in str(error.get("message"))
