"""Exceptions raised by waypost.

Every error a caller can act on has its own type and a message that names the
thing that was wrong (the workflow, the run, the field), so that a log line is
enough to understand it.
"""

from __future__ import annotations

from typing import Any


class WaypostError(Exception):
    """Base class of every error waypost raises on purpose."""


class ConfigurationError(WaypostError):
    """The engine was set up wrongly (a bad URL, an option out of range)."""


class UnknownWorkflow(WaypostError, LookupError):
    """No workflow of this name (and version) is registered."""


class UnknownActivity(WaypostError, LookupError):
    """No activity of this name is registered."""


class RunNotFound(WaypostError, LookupError):
    """No run with this id exists in this tenant."""


class RunIdConflict(WaypostError):
    """A run with this id exists already with a different workflow or input."""


class RunNotActive(WaypostError):
    """The command needs a run that has not finished, and this one has."""


class PayloadError(WaypostError, TypeError):
    """A value cannot be stored as JSON (or read back as the declared type)."""


class StoreError(WaypostError):
    """The store failed (I/O error, corrupted file, lost connection)."""


class StoreCorrupted(StoreError):
    """The database file is damaged; waypost refuses to serve it."""


class SchemaError(StoreError):
    """The database schema is newer than this version of waypost, or damaged."""


class ResultTimeout(WaypostError, TimeoutError):
    """`result(timeout=...)` elapsed before the run ended."""


class WaitTimeout(WaypostError, TimeoutError):
    """A workflow's `wait_signal(..., timeout=...)` elapsed without the signal."""


class NonRetryableError(WaypostError):
    """Raise from an activity to fail it at once, whatever its retry policy says."""


class ActivityCancelled(WaypostError):
    """Raised in an activity by `heartbeat()` once its run asked it to stop."""


class NondeterminismError(WaypostError):
    """Workflow code did something other than what its history records."""


class WorkflowError(WaypostError):
    """Workflow code used the context wrongly (e.g. an OS timer inside a workflow)."""


class ActivityError(WaypostError):
    """Raised inside a workflow when an activity failed for good.

    `type` and `message` describe the activity's last error; `attempts` says
    how many attempts were made.
    """

    def __init__(self, activity: str, step_id: str, error: dict[str, Any], attempts: int) -> None:
        self.activity = activity
        self.step_id = step_id
        self.error = error
        self.type = str(error.get("type", "Exception"))
        self.message = str(error.get("message", ""))
        self.attempts = attempts
        super().__init__(
            f"activity {activity!r} (step {step_id}) failed after {attempts} "
            f"attempt{'s' if attempts != 1 else ''}: {self.type}: {self.message}"
        )


class RunEndedError(WaypostError):
    """Raised by `result()` when a run ended without a result."""

    def __init__(self, run_id: str, status: str, error: dict[str, Any] | None) -> None:
        self.run_id = run_id
        self.status = status
        self.error = error or {}
        self.type = str(self.error.get("type", ""))
        self.message = str(self.error.get("message", ""))
        detail = f": {self.type}: {self.message}" if self.type else ""
        super().__init__(f"run {run_id!r} {status}{detail}")


class WorkflowFailed(RunEndedError):
    """The run ended `failed`; `.error` holds the stored error."""


class WorkflowCancelled(RunEndedError):
    """The run ended `cancelled`."""


class WorkflowTerminated(RunEndedError):
    """The run ended `terminated`."""
