"""The engine's store read and driven from a test, beside the engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from waypost.model.events import EventType, NewEvent
from waypost.store import open_store
from waypost.store.base import FiredTimer, NewRun
from waypost.testing import check_invariants

T = TypeVar("T")


def on_store(url: str, use: Callable[[Any], Awaitable[T]]) -> T:
    """`use` a store of its own on the database at `url`; what it returned."""

    async def body() -> T:
        store = open_store(url)
        await store.open()
        try:
            return await use(store)
        finally:
            await store.close()

    return asyncio.run(body())


def open_tasks(url: str, run_id: str) -> list[Any]:
    """The tasks the run has (in the default tenant)."""
    tasks: list[Any] = on_store(url, lambda store: store.run_tasks("default", run_id))
    return tasks


def fire_far_in_the_future(url: str) -> list[FiredTimer]:
    """Fire every pending timer, as a scheduler would an hour from now."""
    fired: list[FiredTimer] = on_store(
        url, lambda store: store.fire_due_timers(time.time() + 3600, 1000, None, [], 30.0)
    )
    return fired


def violations(url: str) -> list[Any]:
    """What `check_invariants` finds wrong with every run of the database."""
    found: list[Any] = list(on_store(url, check_invariants))
    return found


async def create_orphan(store: Any, workflow: str, owner: str, lease: float, now: float) -> None:
    """Run `orphan` of `workflow` (version 1, in the default tenant), its workflow task
    leased to `owner` for `lease` seconds: an engine that will not come back."""
    started = NewEvent(
        EventType.RUN_STARTED, {"workflow": workflow, "version": "1", "input": None}, now
    )
    run = {"tenant": "default", "run_id": "orphan", "workflow": workflow, "version": "1"}
    claim = {"claim_owner": owner, "lease": lease, "queue": f"{workflow}@1"}
    await store.create_run(NewRun(**run, input=None, ts=now, started=started, **claim))
