"""Clocks a test holds in its hand. For wall-clock time shifted by the test, use
`waypost.testing.TestClock`; these stand still between the test's moves."""

from __future__ import annotations

import time


class FrozenClock:
    """Time that moves only when the test sets `now` (it starts at the real time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class TickingClock:
    """Time that moves one second at each reading, from `start`: every event a replay
    test makes has its own time."""

    def __init__(self, start: float) -> None:
        self.t = start

    def __call__(self) -> float:
        self.t += 1.0
        return self.t
