"""The events of a run as a whole: its start and end, cancellation, operator commands,
repairs, migration, forks, children, updates and admission (see `base.py` for how a
class reads and writes its data)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .base import UNSET, Command, EventData, register
from .core import EventType as _E

RUN_TIMEOUT_STEP = "run-timeout"
"""The step of the timer after which a run that has not ended fails (`RunTimedOut`)."""


@register
class RunStarted(EventData):
    """A run (or a generation) began. `parent` links a child to its parent, `definition`
    names the definition a definition run runs, `forked_from` the run it was forked
    from, `continued_from` and `generation` the generation before it; `started_by`, who
    started it, when known. `run_timeout` (seconds) is the timeout the start gave the
    run; `run_deadline` (epoch seconds) the end of the timeout a generation it continues
    had (the timeout spans the whole chain of generations)."""

    TYPE: ClassVar = _E.RUN_STARTED
    OMIT_NONE: ClassVar = frozenset(
        {
            "started_by",
            "parent",
            "definition",
            "forked_from",
            "continued_from",
            "generation",
            "trace",
            "run_timeout",
            "run_deadline",
        }
    )
    workflow: str
    version: str = ""
    input: Any = None
    started_by: str | None = None
    parent: dict[str, Any] | None = None
    definition: dict[str, Any] | None = None
    forked_from: dict[str, Any] | None = None
    continued_from: dict[str, Any] | None = None
    generation: int | None = None
    # The trace the run's spans belong to (when tracing is on).
    trace: Any = None
    run_timeout: float | None = None
    run_deadline: float | None = None


@register
class RunCompleted(EventData):
    TYPE: ClassVar = _E.RUN_COMPLETED
    result: Any = None


@register
class RunFailed(EventData):
    TYPE: ClassVar = _E.RUN_FAILED
    error: dict[str, Any]


@register
class RunSuspended(EventData):
    TYPE: ClassVar = _E.RUN_SUSPENDED
    error: dict[str, Any]


@register
class CancelRequested(EventData):
    """A cancel request: its reason, the grace the code has to wind down, and who asked
    (`by`, when a parent's end closes its child)."""

    TYPE: ClassVar = _E.CANCEL_REQUESTED
    OMIT_NONE: ClassVar = frozenset({"grace", "by"})
    reason: str
    grace: float | None = None
    by: Any = None


@register
class RunCancelled(EventData):
    """The run ended cancelled; `forced` after a grace of `after` seconds; `result`, the
    code's result when it finished anyway."""

    TYPE: ClassVar = _E.RUN_CANCELLED
    OMIT_NONE: ClassVar = frozenset({"forced", "after", "details", "by"})
    reason: str
    forced: bool | None = None
    after: float | None = None
    result: Any = UNSET
    details: dict[str, Any] | None = None
    by: Any = None


@register
class RunContinuedAsNew(EventData):
    TYPE: ClassVar = _E.RUN_CONTINUED_AS_NEW
    input: Any
    generation: int
    signals: list[Any]


@register
class LateResultIgnored(EventData):
    """An outcome from an attempt that no longer held its task: its `result` or `error`."""

    TYPE: ClassVar = _E.LATE_RESULT_IGNORED
    step: str
    attempt: int
    fence: int
    outcome: str
    reason: str
    result: Any = UNSET
    error: Any = UNSET


@dataclass(frozen=True, slots=True, kw_only=True)
class Operated(EventData):
    """An operator command or repair: who (`by`), why, and the run's status before and
    after."""

    by: str
    reason: str
    status_before: str
    status_after: str


@register
class RunPaused(Operated):
    TYPE: ClassVar = _E.RUN_PAUSED


@register
class RunResumed(Operated):
    TYPE: ClassVar = _E.RUN_RESUMED


@register
class RunTerminated(EventData):
    """Terminated by an operator (statuses given), or closed as its parent ended (`by`
    names the parent)."""

    TYPE: ClassVar = _E.RUN_TERMINATED
    OMIT_NONE: ClassVar = frozenset({"status_before", "status_after"})
    by: Any
    reason: str
    status_before: str | None = None
    status_after: str | None = None


@register
class RunRetried(Operated):
    TYPE: ClassVar = _E.RUN_RETRIED
    step: str
    attempt: int
    voids: list[int]


@register
class StepSkipped(Operated):
    TYPE: ClassVar = _E.STEP_SKIPPED
    OMIT_NONE: ClassVar = frozenset({"voids"})
    step: str
    activity: str
    output: Any
    voids: list[int] | None = None


@register
class InputUpdated(Operated):
    TYPE: ClassVar = _E.INPUT_UPDATED
    step: str
    old: dict[str, Any]
    new: dict[str, Any]


@register
class RunMigrated(EventData):
    TYPE: ClassVar = _E.RUN_MIGRATED
    definition: str
    from_version: int
    to_version: int
    to_digest: str
    mapping: dict[str, str | None]
    from_step: str
    to_step: str | None
    revoked_approvals: list[Any]
    by: str | None
    reason: str | None


@register
class RunForked(EventData):
    TYPE: ClassVar = _E.RUN_FORKED
    to_run_id: str
    seq: int
    step: str | None
    by: str
    reason: str


@register
class ChildStarted(Command):
    TYPE: ClassVar = _E.CHILD_STARTED
    OMIT_NONE: ClassVar = frozenset({"definition"})
    step: str
    run_id: str
    kind: str
    workflow: str
    version: str
    input: Any
    queue: str
    close: str
    depth: int
    definition: dict[str, Any] | None = None
    site: str = ""


@register
class ChildCompleted(EventData):
    TYPE: ClassVar = _E.CHILD_COMPLETED
    step: str
    run_id: str
    status: str
    result: Any = None


@register
class ChildFailed(EventData):
    """The child failed, was cancelled or terminated (`status`), or never started."""

    TYPE: ClassVar = _E.CHILD_FAILED
    step: str
    run_id: str
    status: str
    error: dict[str, Any] | None = None


@register
class UpdateAccepted(EventData):
    TYPE: ClassVar = _E.UPDATE_ACCEPTED
    update_id: str
    name: str
    args: list[Any]


@register
class UpdateCompleted(Command):
    """An update's handler returned `result` or raised `error`."""

    TYPE: ClassVar = _E.UPDATE_COMPLETED
    step: str
    update_id: str | None
    name: str
    kind: str = "update"
    result: Any = UNSET
    error: Any = UNSET


@register
class RunAdmitted(EventData):
    TYPE: ClassVar = _E.RUN_ADMITTED
    queue: str
