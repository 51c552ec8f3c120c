"""What a run's end means for its parent and its children: pure policies.

When a run with a parent ends, the parent is told (`parent_told`): ChildCompleted with
the result, or ChildFailed with the error. When a run with open children ends, each
child's close policy (`child_closing`) says what becomes of it: `abandon` leaves it
running, `cancel` asks it to cancel (its code runs its cleanup), `terminate` ends it at
once; a suspended child, whose code cannot run, is cancelled at once. The store applies
both in the commit that records the end (`store/transactions/children.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .events import CancelRequested, ChildCompleted, ChildFailed, RunCancelled, RunTerminated
from .status import FINISHED, RunStatus

_FINISHED = frozenset(s.value for s in FINISHED)


def parent_told(
    step: str, run_id: str, status: str, result: Any, error: dict[str, Any] | None
) -> ChildCompleted | ChildFailed:
    """What the parent's `step` is told of its child `run_id` ending as `status`."""
    if status == RunStatus.COMPLETED.value:
        return ChildCompleted(step=step, run_id=run_id, status=status, result=result)
    error = error or {"type": status, "message": status}
    return ChildFailed(step=step, run_id=run_id, status=status, error=error)


@dataclass(frozen=True, slots=True)
class ChildClosing:
    """A parent's end applied to one of its children: `event` appended to the child's
    history; the child ends at once as `ends` (with `error`), or, if `ends` is None, is
    woken to run its cancellation."""

    event: CancelRequested | RunCancelled | RunTerminated
    ends: RunStatus | None = None
    error: dict[str, Any] | None = None


def child_closing(
    parent_run_id: str, parent_status: str, close: str, child_status: str
) -> ChildClosing | None:
    """What the end of run `parent_run_id` (as `parent_status`) does to a child of its
    with close policy `close` and status `child_status`; None: nothing."""
    if child_status in _FINISHED or close == "abandon":
        return None
    reason = f"its parent run {parent_run_id!r} ended ({parent_status})"
    by = {"parent_run_id": parent_run_id, "close": close}
    if close == "terminate":
        error = {"type": "Terminated", "message": reason}
        return ChildClosing(RunTerminated(reason=reason, by=by), RunStatus.TERMINATED, error)
    if child_status == RunStatus.SUSPENDED.value:  # its code cannot run its cancellation
        error = {"type": "Cancelled", "message": reason}
        return ChildClosing(RunCancelled(reason=reason, by=by), RunStatus.CANCELLED, error)
    return ChildClosing(CancelRequested(reason=reason, by=by))
