"""The fields of a start (re-exported by `waypost.model.operations`), shared by `Start` and
`StartRun`, and the bounds of a run's priority."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from waypost.model.identity import check_id
from waypost.model.numbers import whole_number
from waypost.model.queues import check_queue_name
from waypost.model.requests import Check, checked

MAX_PRIORITY = 1_000


def check_priority(priority: Any) -> None:
    """A run's priority: a whole number from -MAX_PRIORITY to MAX_PRIORITY (higher first)."""
    whole_number(priority, "priority", -MAX_PRIORITY, MAX_PRIORITY)


@dataclass(frozen=True)
class StartFields:
    """The fields of a start, shared by `Start` and `StartRun` (which differ only in what
    they answer). `queue`: a workflow queue the run waits in until its limits admit it
    (None: the workflow's own, if it names one; else started at once)."""

    workflow: Any
    input: Any = None
    run_id: str | None = checked(Check.OPTIONAL_ID, what="run_id", default=None)
    version: str | int | None = checked(Check.VERSION, default=None)
    started_by: str | None = checked(Check.STARTER, what="started_by", default=None)
    priority: int = 0
    concurrency_key: str | None = checked(Check.OPTIONAL_ID, what="concurrency_key", default=None)
    dedup_id: str | None = checked(Check.OPTIONAL_ID, what="dedup_id", default=None)
    queue: str | None = None

    def check_start(self) -> None:
        """The checks of a start that are not one field's own."""
        if isinstance(self.workflow, str):
            check_id(self.workflow, "workflow")
        check_priority(self.priority)
        if self.queue is not None:
            check_queue_name(self.queue)
