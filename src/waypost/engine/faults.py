"""Fault points: named places where a test can make the engine fail.

The engine calls `faults.hit(point)` at each point below; the default plan
does nothing. Tests (and `waypost.testing`) pass a plan that crashes the
process, raises, or delays at a chosen hit, to prove the guarantees hold
when real processes die at the worst moments.

Points:
- ``commit:before`` / ``commit:after``: around every transaction the engine
  commits (after = committed and durable, before the caller learns of it).
- ``activity:before`` / ``activity:after``: an attempt is about to call the
  activity / has returned or raised, before its outcome is reported.
- ``timers:fired``: due timers were fired, before their runs are processed.
"""

from __future__ import annotations

from typing import Protocol


class FaultPlan(Protocol):
    def hit(self, point: str) -> None:
        """Called at each fault point; may raise, sleep or end the process."""
        ...


class NoFaults:
    """The default: every point passes."""

    def hit(self, point: str) -> None:
        return None
