"""The engine's background tasks: spawned by any part, cancelled when the engine closes.

One object every part is given, rather than a host that spawns for them: a task that
fails is logged here once (a simulated crash quietly, a database error as a warning).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from waypost.errors import StoreError
from waypost.model.logs import logger

from .faults import Crash

log = logger("waypost")


class Background:
    """The tasks this engine runs in the background."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `coro` in the background; it is cancelled when the engine closes."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._reap)
        return task

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def all(self) -> list[asyncio.Task[Any]]:
        return list(self._tasks)

    def pending(self) -> list[asyncio.Task[Any]]:
        return [t for t in self._tasks if not t.done()]

    def _reap(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, Crash):
            log.debug("task ended by a simulated crash: %s", exc)
        elif isinstance(exc, StoreError):
            # The database failed (a restart, a lost connection): the task's lease
            # lapses and the work is taken up again; no traceback needed.
            log.warning("work put off by a database error: %s", exc)
        elif exc is not None:
            log.error("background task failed", exc_info=exc)
