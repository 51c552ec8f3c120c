"""A clock you control: skip hours of timers in milliseconds, or jump back."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from waypost.client.engine import AsyncEngine


class TestClock:
    """Wall-clock time shifted by an offset that `advance` and `jump` change.

    Pass it as an engine's `clock=`; the engine reads time only through it
    (timers, leases, retry delays, `ctx.now()`). Time still flows at its
    normal rate between changes, so leases and polls behave as in production.
    Engines given to `attach` (or created by `waypost.testing` helpers) are
    woken after each change, so a timer that came due fires at once.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, start: float | None = None) -> None:
        self._offset = 0.0 if start is None else start - time.time()
        self._lock = threading.Lock()
        self._engines: list[tuple[AsyncEngine, asyncio.AbstractEventLoop]] = []

    def __call__(self) -> float:
        return time.time() + self._offset

    def attach(self, engine: AsyncEngine, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Wake `engine` (running on `loop`, default the running loop) after each change."""
        self._engines.append((engine, loop or asyncio.get_running_loop()))

    def detach(self, engine: AsyncEngine) -> None:
        self._engines = [(e, lp) for e, lp in self._engines if e is not engine]

    def advance(self, by: timedelta | float) -> None:
        """Move time forward by `by` (a timedelta or seconds)."""
        seconds = by.total_seconds() if isinstance(by, timedelta) else float(by)
        if seconds < 0:
            raise ValueError("advance() moves forward; use jump() to move back")
        self.jump(seconds)

    def jump(self, seconds: float) -> None:
        """Move time by `seconds`, forward or back, as a wall clock may be set."""
        with self._lock:
            self._offset += seconds
        for engine, loop in list(self._engines):
            if loop.is_closed():
                continue
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                engine.nudge()
            else:
                loop.call_soon_threadsafe(engine.nudge)
