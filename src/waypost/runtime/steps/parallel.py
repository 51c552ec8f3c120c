"""The `parallel` step type: each branch walks in its own task on a copy of the data.

When all have ended, each branch's writes are copied back by path, in the order of the
branches (see interpreter.py for the rule, and for runs that joined before it). The
first branch to fail cancels the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from .walk import Walk, value_at

JOIN_BY_PATHS = "waypost:join-by-paths"
"""The patch marker of runs whose parallel joins merge by the paths each branch wrote."""


async def run(
    walk: Walk, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
) -> str | None:
    loop = asyncio.get_running_loop()
    copies = [dict(data) for _ in step["branches"]]
    for copy in copies:
        walk.track_writes(copy)
    tasks = [
        loop.create_task(walk.walk_from(branch["start"], copy, f"{path}{step_id}[{i}]/"))
        for i, (branch, copy) in enumerate(zip(step["branches"], copies, strict=True))
    ]
    try:
        _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        for copy in copies:
            walk.forget_writes(copy)
        raise
    failed = next(
        (t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None),
        None,
    )
    if failed is not None:
        for task in pending:
            task.cancel()
        error = failed.exception()
        assert error is not None
        raise error
    if walk.ctx.patched(JOIN_BY_PATHS):
        for copy in copies:
            for written in dict.fromkeys(walk.forget_writes(copy)):
                walk.assign(data, written, value_at(copy, written))
    else:  # how runs that joined before paths were merged did it (see interpreter.py)
        before = dict(data)
        for copy in copies:
            walk.forget_writes(copy)
            for name, value in copy.items():
                if name not in before or before[name] != value:
                    data[name] = value
    joined: str | None = step.get("next")
    return joined
