"""The fields of a start (re-exported by `waypost.model.operations`), shared by `Start` and
`StartRun`, and the bounds of a run's priority and of its run timeout."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model.identity import check_id, preview
from waypost.model.numbers import finite, whole_number
from waypost.model.queues import check_queue_name
from waypost.model.requests import Check, checked

MAX_PRIORITY = 1_000
MAX_RUN_TIMEOUT = 100 * 365 * 24 * 3600.0
"""The longest run timeout a start may give (a hundred years, in seconds)."""


def check_priority(priority: Any) -> None:
    """A run's priority: a whole number from -MAX_PRIORITY to MAX_PRIORITY (higher first)."""
    whole_number(priority, "priority", -MAX_PRIORITY, MAX_PRIORITY)


def run_timeout_seconds(value: Any, what: str = "run_timeout") -> float | None:
    """A run timeout (a `timedelta` or a number of seconds; None: none) in seconds, or
    `InvalidRequest` on `what` if it is not a positive, finite duration of at most
    `MAX_RUN_TIMEOUT`."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else finite(value)
    if seconds is None or not 0 < seconds <= MAX_RUN_TIMEOUT:
        raise InvalidRequest(
            f"{what} must be a positive duration (a timedelta or a number of seconds) of at "
            f"most {MAX_RUN_TIMEOUT:.0f} seconds, not {preview(value)}",
            field=what,
        )
    return seconds


@dataclass(frozen=True)
class StartFields:
    """The fields of a start, shared by `Start` and `StartRun` (which differ only in what
    they answer). `queue`: a workflow queue the run waits in until its limits admit it
    (None: the workflow's own, if it names one; else started at once). `run_timeout`:
    seconds after its start when the run ends `failed` (`RunTimedOut`) if it has not
    ended (None: the workflow's own `run_timeout`, if it has one)."""

    workflow: Any
    input: Any = None
    run_id: str | None = checked(Check.OPTIONAL_ID, what="run_id", default=None)
    version: str | int | None = checked(Check.VERSION, default=None)
    started_by: str | None = checked(Check.STARTER, what="started_by", default=None)
    priority: int = 0
    concurrency_key: str | None = checked(Check.OPTIONAL_ID, what="concurrency_key", default=None)
    dedup_id: str | None = checked(Check.OPTIONAL_ID, what="dedup_id", default=None)
    queue: str | None = None
    run_timeout: float | None = None

    def check_start(self) -> None:
        """The checks of a start that are not one field's own."""
        if isinstance(self.workflow, str):
            check_id(self.workflow, "workflow")
        check_priority(self.priority)
        if self.queue is not None:
            check_queue_name(self.queue)
        run_timeout_seconds(self.run_timeout)
