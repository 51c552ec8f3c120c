"""State the dispatcher shares with the parts it hands work to, as small explicit objects.

Work flows one way: dispatch (claims, timers, leases) hands workflow tasks and
attempts on; their commits go to the store. What flows back is only a signal: the
parts that process work ring `Wakeups` (look for work now, or at a time), record the
workflow tasks they hold in `HeldTasks` (whose leases the lease loop renews), and read
what this engine serves from `Serving` (which the dispatcher sets). No part writes
another's attributes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .background import Background
from .cache import RunKey
from .settings import Settings


class Serving:
    """Whether this engine takes work, and the queues it serves (set by the dispatcher)."""

    def __init__(self) -> None:
        self.accepting = False  # serving: take new work into this process
        self.workflow_queues: frozenset[str] = frozenset()
        self.activity_queues: frozenset[str] = frozenset()

    def accept(self, accepting: bool) -> None:
        """Start (or stop) taking new work into this process."""
        self.accepting = accepting

    def serve(self, workflow_queues: frozenset[str], activity_queues: frozenset[str]) -> None:
        """The queues this engine serves from now on."""
        self.workflow_queues = workflow_queues
        self.activity_queues = activity_queues

    def workflow(self, queue: str) -> bool:
        """Whether this engine is serving and runs workflow tasks of `queue`."""
        return self.accepting and queue in self.workflow_queues

    def activity(self, name: str) -> bool:
        """Whether this engine is serving and runs attempts of activity `name`."""
        return self.accepting and name in self.activity_queues


class Wakeups:
    """The dispatcher's doorbells: its poller's and its timer loop's."""

    def __init__(self, clock: Callable[[], float], poll_interval: float) -> None:
        self._clock = clock
        self._poll_interval = poll_interval
        self.work = asyncio.Event()
        self.timers = asyncio.Event()
        # The last claim may have left activity tasks queued (it took all it could):
        # a slot that frees up then wakes the poller instead of waiting for a poll.
        self.activities_waiting = False

    def wake(self) -> None:
        """Look for claimable work now (something became ready)."""
        self.work.set()

    def wake_at(self, when: float) -> None:
        delay = max(0.0, when - self._clock())
        asyncio.get_running_loop().call_later(delay, self.work.set)

    def note_timer(self, fire_at: float) -> None:
        """A timer was set: fire it on time if it is due before the next look."""
        delay = max(0.0, fire_at - self._clock())
        if delay < self._poll_interval:
            asyncio.get_running_loop().call_later(delay, self.timers.set)

    def activities_queued(self, waiting: bool = True) -> None:
        """Whether activity tasks were left in the queue for want of a slot here (a slot
        that frees then takes them)."""
        self.activities_waiting = waiting

    def slot_freed(self) -> None:
        """An attempt's slot came free: queued work may take it."""
        if self.activities_waiting:
            self.work.set()


class HeldTasks:
    """The workflow tasks this engine is processing, each under the fence it holds."""

    def __init__(self) -> None:
        self._fences: dict[RunKey, int] = {}

    def hold(self, key: RunKey, fence: int) -> None:
        self._fences[key] = fence

    def release(self, key: RunKey, fence: int) -> None:
        """Done with the task held under `fence` (a later claim of the run keeps its own)."""
        if self._fences.get(key) == fence:
            del self._fences[key]

    def __len__(self) -> int:
        return len(self._fences)

    def __iter__(self) -> Iterator[tuple[RunKey, int]]:
        return iter(list(self._fences.items()))


@dataclass(frozen=True)
class Shared:
    """What every part of one engine is given: its settings and the state they share."""

    settings: Settings
    background: Background = field(default_factory=Background)
    serving: Serving = field(default_factory=Serving)
    held: HeldTasks = field(default_factory=HeldTasks)
    wakeups: Wakeups = field(init=False)

    def __post_init__(self) -> None:
        wakeups = Wakeups(self.settings.clock, self.settings.poll_interval)
        object.__setattr__(self, "wakeups", wakeups)
