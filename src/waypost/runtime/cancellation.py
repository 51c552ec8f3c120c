"""Cancellation as a workflow instance records it: how the run ends, and the grace.

The cancellation seam of a run: `CancelGrace`, a part the instance owns, ends a
cancelled run. Cancelling is cooperative: CancelRequested cancels the code's root task, and the
code may catch `asyncio.CancelledError` and clean up (run activities, wait) before
it ends. So that a run whose clean-up never ends (an activity that ignores its
cancellation and never returns, a wait nobody answers) still ends, a cancel request
made with a grace (`CancelRequested.grace`, the engine's `cancel_grace`) is followed,
once the code has taken it in without ending, by a durable timer at the fixed step
`cancel-grace`. If that timer fires before the run ended, the run ends `cancelled`
at once (`RunCancelled{forced: true, after: grace}`); whatever it still awaits is
abandoned, and a late result of an attempt is only an audit fact.

Decisions:
- The timer is a command of the instance, issued after the code has handled the
  request and not ended: it is in the history (so replay and `waypost replay`
  check it like any timer), it does not exist for the common run that ends at
  once, and the grace counts from when the code learnt of the cancellation (a
  paused run learns of it on resume), not from the request.
- Its step is not a positional step id (those are digits and dots), so adding it
  shifts no step of the code, and histories made before it replay unchanged: a
  CancelRequested without `grace` starts no timer, and one with a grace that an
  engine without this code took in (no timer recorded) is replayed without one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from waypost.model.events import EventType, RunCancelled, TimerStarted

from .port import InstancePort

_E = EventType

CANCEL_GRACE_STEP = "cancel-grace"
"""The step of the timer after which a cancelled run ends whatever its code does."""
GRACE_KIND = "cancel-grace"


class CancelGrace:
    """Whether and why a run was asked to cancel, its grace, and how it then ends."""

    def __init__(self, port: InstancePort) -> None:
        self._port = port
        self.cancel_requested = False
        self._cancel_reason = ""
        self.cancel_details: dict[str, Any] | None = None
        """What the code reports of its clean-up (a definition run: what it compensated)."""
        self.cancel_grace: float | None = None
        """The grace the cancel request gave (seconds), if any."""
        self.grace_until: float | None = None
        """When the grace ends (its timer is due), once the timer is started."""

    @property
    def reason(self) -> str:
        return self._cancel_reason

    def requested(self, d: dict[str, Any]) -> bool:
        """Take in CancelRequested `d`; False if the run was asked already."""
        if self.cancel_requested:
            return False
        self.cancel_requested = True
        self._cancel_reason = str(d.get("reason", ""))
        self.cancel_grace = d.get("grace")
        return True

    def report(self, details: dict[str, Any]) -> None:
        """What the code has cleaned up so far (RunCancelled's `details`)."""
        self.cancel_details = details

    def cancelled_data(self, **extra: Any) -> RunCancelled:
        """The data of the RunCancelled that ends the run."""
        details = dict(self.cancel_details) if self.cancel_details else None
        return RunCancelled(reason=self._cancel_reason, details=details, **extra)

    def start_grace(self) -> None:
        """The code took in the cancel request and goes on: start the grace's timer."""
        if self._port.finished or self._port.closed or self.cancel_grace is None:
            return
        if self._port.replaying and self._port.recorded_command(CANCEL_GRACE_STEP) is None:
            # An engine without the grace took the request in (a rolling upgrade): the
            # run goes on without one rather than be suspended for it.
            return
        grace = self.cancel_grace
        site = "cancel requested"
        ev = self._port.match(
            CANCEL_GRACE_STEP, _E.TIMER_STARTED, GRACE_KIND, "the cancel grace", site
        )
        if ev is None:
            fire_at = self._port.clock() + grace
            self._port.command(
                TimerStarted(
                    step=CANCEL_GRACE_STEP,
                    kind=GRACE_KIND,
                    fire_at=fire_at,
                    duration=grace,
                    site=site,
                )
            )
        else:
            fire_at = TimerStarted.parse(ev).fire_at
        self.grace_until = fire_at

    def grace_over(self) -> None:
        """The grace's timer fired: a run still going ends `cancelled` now."""
        if self._port.finished or self._port.closed:
            return
        self._port.end_run(self.cancelled_data(forced=True, after=self.cancel_grace))

    def grace_waits(self) -> list[dict[str, Any]]:
        """The grace's timer as the run's `waiting_for` shows it."""
        if self.grace_until is None or self._port.finished:
            return []
        return [
            {
                "kind": "timer",
                "step": CANCEL_GRACE_STEP,
                "until": datetime.fromtimestamp(self.grace_until, UTC).isoformat(),
                "site": "cancel requested",
                "purpose": "the cancel grace ends: the run ends cancelled whatever its code does",
            }
        ]


def cancelled_error(data: dict[str, Any]) -> dict[str, Any]:
    """The run's `error` after RunCancelled `data`: its reason, and what the ending did."""
    error: dict[str, Any] = {"type": "Cancelled", "message": data.get("reason", "")}
    details = dict(data.get("details") or {})
    if data.get("forced"):
        details.update(forced=True, after=data.get("after"))
    if details:
        error["details"] = details
    return error
