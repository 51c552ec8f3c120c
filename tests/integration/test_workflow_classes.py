"""Workflows written as classes: state on the object, signals, queries and updates as
its methods (`@wp.signal`, `@wp.query`, `@wp.update` with `@x.validator`)."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from waypost.errors import ConfigurationError, UpdateRejected


@wp.workflow(name="class_cart")
class Cart:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.done = False

    @wp.signal("add")
    def add(self, item: str) -> None:
        self.items.append(item)

    @wp.signal()
    def checkout(self, _: Any) -> None:
        self.done = True

    @wp.query()
    def count(self) -> int:
        return len(self.items)

    @wp.update("remove")
    def remove(self, item: str) -> int:
        self.items.remove(item)
        return len(self.items)

    @remove.validator
    def _in_cart(self, item: str) -> None:
        if item not in self.items:
            raise ValueError(f"{item!r} is not in the cart")

    async def run(self, ctx: wp.WorkflowContext, owner: str) -> dict[str, Any]:
        await ctx.wait_condition(lambda: self.done)
        return {"owner": owner, "items": self.items}


def test_a_workflow_class_takes_signals_queries_and_updates(make_engine: Any) -> None:
    engine = make_engine(Cart)
    with engine.running():
        run = engine.start(Cart, "ann")
        engine.signal(run.run_id, "add", "book")
        engine.signal(run.run_id, "add", "pen")
        assert engine.query(run.run_id, "count") == 2
        with pytest.raises(UpdateRejected, match="'cup' is not in the cart"):
            engine.update(run.run_id, "remove", "cup")
        assert engine.update(run.run_id, "remove", "pen") == 1
        engine.signal(run.run_id, "checkout")
        assert engine.result(run.run_id, timeout=60) == {"owner": "ann", "items": ["book"]}


def test_a_workflow_class_without_an_async_run_is_refused_at_once() -> None:
    with pytest.raises(ConfigurationError, match="needs an 'async def run"):

        @wp.workflow(name="no_run")
        class NoRun:
            def run(self, ctx: wp.WorkflowContext) -> None: ...

    with pytest.raises(ConfigurationError, match="made with no arguments"):

        @wp.workflow(name="needs_args")
        class NeedsArgs:
            def __init__(self, x: int) -> None: ...

            async def run(self, ctx: wp.WorkflowContext) -> None: ...
