"""Whether the database answers: one log line when it is lost, one when it is back.

A server that restarts, fails over or drops off the network makes every request of
every loop fail at once; each of them says so at debug level only, and the store says
it once (`Reach.lost`) with what to expect, then once more when a request gets
through again (`Reach.back`), with how long it was away. Callers read `reachable` to
keep their own warnings quiet while the store is away.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from waypost.model.logs import logger

log = logger("waypost.store")
_LOCK = threading.Lock()  # changes of any store's reachability (rare)


class Reach:
    """The reachability of one store's database, shared by its threads."""

    _away = 0  # stores of this process whose database is away now

    @classmethod
    def all_reachable(cls) -> bool:
        return cls._away == 0

    def __init__(self, where: str) -> None:
        self.where = where
        self.lost_at: float | None = None  # monotonic time of the first failure
        self.writes_only = False  # lost for writes only (a standby): a read proves nothing

    @property
    def reachable(self) -> bool:
        return self.lost_at is None

    def lost(self, why: str, hint: str = "", *, writes_only: bool = False) -> None:
        """A request could not reach the database, or (`writes_only`) could not write
        to it (said once until it is back)."""
        with _LOCK:
            if self.lost_at is not None:
                return
            self.lost_at = time.monotonic()
            self.writes_only = writes_only
            Reach._away += 1
        log.warning(
            "the database at %s cannot be reached (%s); waypost tries again every second "
            "and goes on where it stopped once it answers%s",
            self.where,
            why,
            f". {hint}" if hint else "",
        )

    def back(self, began: float, wrote: bool = True) -> None:
        """A request that began at `began` (monotonic) got through (cheap when nothing
        was lost). One that began before the loss proves nothing: a server shutting down
        finishes some requests after it failed others. A read (not `wrote`) does not end
        a loss of writes."""
        if self.lost_at is None or (self.writes_only and not wrote):
            return
        with _LOCK:
            lost_at = self.lost_at
            if lost_at is None or began < lost_at:
                return
            self.lost_at = None
            Reach._away -= 1
        log.warning(
            "the database at %s is reachable again after %.1f s",
            self.where,
            time.monotonic() - lost_at,
        )


def warn_unless_away(log: logging.Logger, store: Any, message: str, *args: Any) -> None:
    """Warn of a failed request, unless its store is away (it said so already): then
    the line goes to the debug level, not once per loop and second."""
    if getattr(store, "reachable", True):
        log.warning(message, *args)
    else:
        log.debug(message, *args)
