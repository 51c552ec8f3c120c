"""Recorded values as workflow code sees them: `ctx.now()`, `ctx.random()`, `ctx.uuid()`
and `ctx.patched()`.

The markers seam of a run: `Markers`, a part the instance owns. A value is recorded
once (MarkerRecorded, its own step) and read back from the history on replay.
`patched()` markers are keyed by change id, not by step id, so adding a `patched()`
call does not shift the ids of the steps after it.
"""

from __future__ import annotations

import uuid as uuid_mod
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from waypost.model.events import EventType, MarkerRecorded

from .loop import call_site
from .port import InstancePort

_E = EventType


class Markers:
    """The values one run recorded, and the changes it took (`patched`)."""

    def __init__(self, port: InstancePort) -> None:
        self._port = port
        self._patches: dict[str, bool] = {}

    def marker(self, kind: str, make: Callable[[], Any]) -> Any:
        self._port.check_usable()
        site = self._port.site_label or call_site()
        step = self._port.next_step()
        ev = self._port.match(step, _E.MARKER_RECORDED, kind, f"ctx.{kind}()", site)
        if ev is not None:
            return MarkerRecorded.parse(ev).value
        value = make()
        self._port.command(MarkerRecorded(step=step, kind=kind, value=value, site=site))
        return value

    def patched(self, change_id: str) -> bool:
        self._port.check_usable()
        known = self._patches.get(change_id)
        if known is not None:
            return known
        if self._port.recorded_patch(change_id) is not None:
            result = True
        elif self._port.replaying:
            result = False
        else:
            self._port.command(MarkerRecorded(kind="patch", change_id=change_id, site=call_site()))
            result = True
        self._patches[change_id] = result
        return result

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.marker("now", self._port.clock), UTC)

    def random(self) -> float:
        import random as random_mod

        return float(self.marker("random", random_mod.SystemRandom().random))

    def uuid(self) -> uuid_mod.UUID:
        return uuid_mod.UUID(self.marker("uuid", lambda: str(uuid_mod.uuid4())))
