"""Writes that land late: made at the time they land, not the time they were asked for.

A write waits before it lands when it waits for a connection, a lock, a store that is
away, or a synchronous standby's acknowledgement. The leases and start-to-close
deadlines it sets must count from when it lands, or the wait spends an attempt's
budget and the step runs again. The store moves a write's time on by the wait it sees
before its transaction (`landed_at`); a wait it cannot see (inside the statement, at
COMMIT) the engine sees by the time the call took, and times the attempts again as
they start (`retime_activity`).
"""

from __future__ import annotations

import time

LATE_AFTER = 0.25
"""A write that lands more than this many seconds after its time was read is late."""


def landed_at(now: float, asked: float) -> float:
    """`now`, read by the caller at `time.monotonic()` `asked`, moved on by the wait since,
    when that wait was longer than `LATE_AFTER`."""
    late = time.monotonic() - asked
    return now + late if late > LATE_AFTER else now


def came_late(asked: float) -> bool:
    """Whether a call whose time was read at `time.monotonic()` `asked` is late now."""
    return time.monotonic() - asked > LATE_AFTER
