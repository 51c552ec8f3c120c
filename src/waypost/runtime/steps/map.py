"""The `map` step type: the iterator walked once per item.

A `map` step evaluates `items` (an array, at most `max_items` long, else
`too_many_items`) and walks its `iterator` once per item, each in its own task on its
own copy of the data with `item` and `index` added, started in item order with at most
`concurrency` in flight. An item's task is created by the map's walk as its next
operation, so its steps get the same ids on every replay whatever order the items
finished in (docs/decisions/0001 and 0021). An item's result is its `succeed` step's
`output` when it ends at one that has it, else an object of what its steps stored.
Results are stored at `output` in item order. A failed item fails the step and cancels
the items in flight, unless `tolerate` allows it: its place then holds its error.
Failures are counted in the order the items failed, which is the history's order, so
replay decides alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from waypost.model.definitions import Limits
from waypost.model.definitions.expressions import assign
from waypost.model.definitions.format import json_type_name

from .walk import StepFailure, Walk, value_at

_DEFAULT_LIMITS = Limits()


def _recorded(walk: Walk, name: str) -> int:
    """A limit the run's RunStarted recorded (the default, for runs from before it)."""
    value = walk.limits.get(name, getattr(_DEFAULT_LIMITS, name))
    return int(value)


async def run(
    walk: Walk, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
) -> str | None:
    items = walk.evaluate(step["items"], data, step_id, "items")
    if not isinstance(items, list):
        raise StepFailure(
            "expression_failed",
            f"step {step_id!r} items gave {json_type_name(items)}, not an array",
            step_id,
        )
    most = int(step.get("max_items", _recorded(walk, "max_map_items")))
    if len(items) > most:
        raise StepFailure(
            "too_many_items",
            f"step {step_id!r} has {len(items)} items, more than its {most}",
            step_id,
        )
    width = int(step.get("concurrency", _recorded(walk, "max_map_concurrency")))
    tolerate = int(step.get("tolerate", 0))
    loop = asyncio.get_running_loop()
    results: list[Any] = [None] * len(items)
    running: dict[asyncio.Task[Any], int] = {}
    ended: list[asyncio.Task[Any]] = []  # in the order the items ended (the history's)
    started = failures = 0
    try:
        while started < len(items) or running:
            while started < len(items) and len(running) < width:
                # Each item's task is the map walk's next operation: its steps' ids
                # are `<n>.<k>` with n fixed by the item's place in the starting order.
                own = {**data, "item": items[started], "index": started}
                walk.track_writes(own)
                item_path = f"{path}{step_id}[{started}]/"
                task = loop.create_task(_map_item(walk, step["iterator"], own, item_path))
                task.add_done_callback(ended.append)
                running[task] = started
                started += 1
            while not ended:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            while ended:
                task = ended.pop(0)
                index = running.pop(task)
                error = task.exception()
                if error is None:
                    results[index] = task.result()
                elif isinstance(error, StepFailure) and failures < tolerate:
                    failures += 1
                    results[index] = error.described()
                else:
                    raise error
    finally:
        for task in running:
            task.cancel()
    walk.store(step_id, step, data, results)
    next_step: str | None = step.get("next")
    return next_step


async def _map_item(walk: Walk, iterator: Mapping[str, Any], own: dict[str, Any], path: str) -> Any:
    """Walk a map's iterator over one item's data; the item's result."""
    try:
        ended = await walk.walk_from(iterator["start"], own, path)
        if ended is not own:  # a succeed step's output
            return ended
        stored: dict[str, Any] = {}
        for written in dict.fromkeys(walk.writes(own)):
            stored = assign(stored, "$." + ".".join(written), value_at(own, written))
        return stored
    finally:
        walk.forget_writes(own)
