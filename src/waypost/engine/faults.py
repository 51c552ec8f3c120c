"""Fault points: named places where a test can make the engine fail.

The engine consults its fault plan at the points below; the default plan does
nothing. Tests (and `waypost.testing`) pass a plan that crashes the process,
raises, delays or misbehaves at a chosen moment, to prove the guarantees hold
when real processes die at the worst moments and messages are lost.

`hit(point)` is called at:
- ``commit:before`` / ``commit:after``: around every transaction the engine
  commits (after = committed and durable, before the caller learns of it).
- ``activity:before`` / ``activity:after``: an attempt is about to call the
  activity / has returned or raised, before its outcome is reported.
- ``timers:fired``: due timers were fired, before their runs are processed.
- ``schedules:started``: a schedule's due fires have their runs started, before its
  `next_fire_at` is advanced.

`chance(fault)` asks whether a fault happens now:
- ``activity:lose-response``: an attempt succeeded but its outcome never
  reaches the store (a response lost on the network); its lease lapses and the
  step runs again.

`pause(fault)` returns how long to stall (0 for not at all):
- ``activity:stall``: the attempt stops renewing its lease and sleeps before
  calling the activity, as a worker stopped by the OS or a long GC pause; when
  it wakes it runs and reports as if nothing happened.
"""

from __future__ import annotations

from typing import Protocol


class Crash(Exception):
    """Raised by a fault plan to stop an engine as a process crash would.

    The engine lets it through every handler: the task that met it ends, and
    a plan that crashed keeps raising it, so nothing more of that engine
    reaches the store.
    """


class FaultPlan(Protocol):
    def hit(self, point: str) -> None:
        """Called at each fault point; may raise, sleep or end the process."""
        ...

    def chance(self, fault: str) -> bool:
        """Whether the named fault happens now."""
        ...

    def pause(self, fault: str) -> float:
        """Seconds to stall at the named fault (0: do not stall)."""
        ...


class NoFaults:
    """The default: every point passes. Subclass it to fault only some points."""

    def hit(self, point: str) -> None:
        return None

    def chance(self, fault: str) -> bool:
        return False

    def pause(self, fault: str) -> float:
        return 0.0
