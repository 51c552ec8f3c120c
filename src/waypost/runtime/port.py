"""The seam between a workflow instance and its parts: what a part may ask of the run.

`instance.WorkflowInstance` owns its parts (`signals.SignalWaits`,
`approval_waits.ApprovalWaits`, `children.ChildRuns`, `updates.Handlers`,
`cancellation.CancelGrace`, `repairs.RepairHooks`, `markers.Markers`) and gives each
this port in its constructor. Through it a part numbers its steps, matches them against the history,
records commands, starts timers, and reads the run's shared state; it keeps its own
state itself, and no part writes the instance's attributes or another part's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from waypost.errors import NondeterminismError
from waypost.model.codec import Codec
from waypost.model.events import Command, Event, EventData, EventType, NewEvent

from .loop import WorkflowLoop
from .registry import WorkflowDefn


class InstancePort(Protocol):
    """What the instance offers its parts (the instance is the one implementation)."""

    # The run's state a part reads (and never writes).
    tenant: str
    run_id: str
    codec: Codec
    workflows: Callable[[str, str | None], WorkflowDefn] | None  # finds a child's workflow
    closed: bool
    replaying: bool
    generation: int
    started: dict[str, Any]  # RunStarted's data
    started_by: str | None
    site_label: str | None

    @property
    def loop(self) -> WorkflowLoop: ...

    @property
    def finished(self) -> bool: ...

    def clock(self) -> float:
        """The engine's time now (epoch seconds); not a recorded value."""
        ...

    def check_usable(self) -> None:
        """Raise if the code may not issue commands now (read-only, or finished)."""
        ...

    def next_step(self) -> str:
        """The next step id of the current task."""
        ...

    def decode(self, data: Any, hint: Any) -> Any: ...

    def encode(self, value: Any) -> Any: ...

    def match(self, step: str, type_: EventType, name: str, op: str, site: str) -> Event | None:
        """The recorded command for this step, if any; raises on a mismatch."""
        ...

    def recorded_command(self, step: str) -> Event | None:
        """The command the history records at `step`, matched or not."""
        ...

    def recorded_patch(self, change_id: str) -> Event | None:
        """The `patched()` marker the history records for `change_id`, if any."""
        ...

    def command(self, command: Command) -> NewEvent:
        """Record a new command caused by the event being handled (and answer it)."""
        ...

    def follow_up(self, step: str, command: Command, happened: str) -> None:
        """Issue a command that ends or changes an earlier one (kept per step for replay)."""
        ...

    def nondeterministic(
        self, message: str, *, expected: Event | None = ..., code_did: str = ..., site: str = ...
    ) -> NondeterminismError:
        """Record the first mismatch with the history, and return it to raise."""
        ...

    def start_timer(
        self, duration: float, site: str, *, internal: str | None = None, at: float | None = None
    ) -> tuple[str, asyncio.Future[None]]:
        """A durable timer: its step and its future."""
        ...

    def timer_due(self, step: str) -> float:
        """When the timer of `step` fires (epoch seconds)."""
        ...

    def fail_from_callback(self, exc: BaseException) -> None:
        """A callback of the workflow's code raised `exc`."""
        ...

    def end_run(self, outcome: EventData) -> None:
        """End the run with this outcome and drop what is still pending."""
        ...
