"""What the engine tells whoever measures it: one call per event worth counting.

The machinery calls an `Observer` at the few points where these things happen
(a commit, an activity attempt's outcome, a timer firing, a lapsed lease taken
over, an approval decided, a quota refusing a caller, a schedule's fire); what is done with them
(Prometheus counters, `waypost.observability`) lives above the machinery, which
never imports a metrics library. `NO_OBSERVER` does nothing and is the default.

Each call is on the hot path of a step: an observer keeps them cheap (no I/O, no
locks held for long) and never raises; the engine does not guard them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol


class Observer(Protocol):
    """Receives the engine's countable events (all times in seconds)."""

    def run_started(self, tenant: str, workflow: str) -> None:
        """A run was created (not a start that found its run already there)."""

    def run_ended(self, tenant: str, workflow: str, outcome: str) -> None:
        """A run's code ended it: `outcome` is completed, failed or cancelled."""

    def run_suspended(self, tenant: str, workflow: str) -> None:
        """A run was suspended for an operator (a bug, a poison run, a quota)."""

    def compensated(self, tenant: str, workflow: str, outcome: str, steps: int) -> None:
        """An ending run compensated `steps` steps with this `outcome` (ok or failed)."""

    def step_scheduled(self, activity: str) -> None:
        """A workflow asked for an activity step (its attempts are counted apart)."""

    def activity_attempt(self, activity: str, outcome: str, retrying: bool) -> None:
        """An attempt ended: `outcome` is completed, failed, timeout, or lost (its engine
        stopped renewing the lease); `retrying` if another attempt follows."""

    def committed(self, seconds: float, events: int) -> None:
        """A commit of one run landed: how long it took and how many events it appended."""

    def timer_fired(self, lag: float) -> None:
        """A timer fired `lag` seconds after it was due."""

    def lease_expired(self, kind: str) -> None:
        """A task's holder stopped renewing its lease (`kind`: workflow or activity)."""

    def lease_taken_over(self, kind: str) -> None:
        """This engine took up a task whose lease had lapsed."""

    def approval_decided(self, tenant: str, outcome: str, dwell: float) -> None:
        """An approval was decided (approved or rejected) `dwell` seconds after it was asked."""

    def quota_refused(self, tenant: str, quota: str) -> None:
        """A tenant's quota refused a caller, or held a run's progress."""

    def schedule_fired(self, tenant: str, outcome: str, lag: float | None) -> None:
        """A schedule's fire was handled: `outcome` is started (on time), caught_up (a
        missed fire its catch-up policy ran), backfilled, skipped or buffered (by its
        overlap policy), or not_started (refused: a quota, an unknown workflow); `lag`,
        for a fire that started a run, is the start's time minus the fire's."""


OBSERVER_CALLS = frozenset(
    name for name, value in vars(Observer).items() if callable(value) and not name.startswith("_")
)
"""The names of `Observer`'s calls."""


class FanOut:
    """Tells every one of `observers`, in order. Each of `Observer`'s calls is made
    here from the protocol (`OBSERVER_CALLS`), once per instance, so that a call added
    to the protocol needs nothing written here."""

    def __init__(self, observers: Sequence[Observer] = ()) -> None:
        self.observers = tuple(observers)

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name not in OBSERVER_CALLS:
            raise AttributeError(name)
        calls = tuple(getattr(o, name) for o in self.observers)

        def tell(*args: Any) -> None:
            for call in calls:
                call(*args)

        setattr(self, name, tell)  # found directly from now on
        return tell


class NoObserver(FanOut):
    """Counts nothing: a fan-out to no observer."""

    def __init__(self) -> None:
        super().__init__(())


NO_OBSERVER: Observer = NoObserver()


def fan_out(*observers: Observer) -> Observer:
    """One observer telling all of `observers` (none: `NO_OBSERVER`; one: itself)."""
    if not observers:
        return NO_OBSERVER
    if len(observers) == 1:
        return observers[0]
    return FanOut(observers)
