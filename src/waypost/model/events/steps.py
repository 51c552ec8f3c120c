"""The events of a run's steps: activities, timers, markers, signals, correlations and
approvals (see `base.py` for how a class reads and writes its data)."""

from __future__ import annotations

from typing import Any, ClassVar

from .base import UNSET, Command, EventData, register
from .core import Event, EventType as _E, NewEvent


@register
class ActivityScheduled(Command):
    """The code called an activity. Besides these, the activity's options (its spec) are
    written as they were given (kept in `extra`)."""

    TYPE: ClassVar = _E.ACTIVITY_SCHEDULED
    OMIT_NONE: ClassVar = frozenset(
        {
            "kwargs",
            "queue",
            "heartbeat_timeout",
            "compensates",
            "definition_step",
            "definition_version",
            "schedule_to_close",
            "close_by",
        }
    )
    step: str
    activity: str
    args: list[Any]
    key: str
    site: str
    retry: dict[str, Any]
    timeout: float
    kwargs: Any = None
    queue: str | None = None
    heartbeat_timeout: float | None = None
    compensates: str | None = None
    definition_step: str | None = None
    definition_version: int | None = None
    # The bound on the step's whole time (seconds), and when it is reached (epoch seconds).
    schedule_to_close: float | None = None
    close_by: float | None = None

    @staticmethod
    def task_of(ev: Event | NewEvent) -> tuple[str, str, float, float | None]:
        """The step, activity, timeout and heartbeat timeout an attempt's task needs, read
        as `parse` reads them but without making the object (a step's hot path)."""
        d = ev.data
        return d["step"], d["activity"], d["timeout"], d.get("heartbeat_timeout")


@register
class ActivityCompleted(EventData):
    TYPE: ClassVar = _E.ACTIVITY_COMPLETED
    step: str
    attempt: int
    result: Any = None


@register
class ActivityFailed(EventData):
    """An attempt failed; `retrying` says whether another follows (at `retry_at`);
    `held` says why the retry waits (a suspended run)."""

    TYPE: ClassVar = _E.ACTIVITY_FAILED
    OMIT_NONE: ClassVar = frozenset({"retry_at", "held"})
    step: str
    attempt: int
    error: dict[str, Any] | None
    retrying: bool = False
    retry_at: float | None = None
    held: str | None = None


@register
class ActivityCancelRequested(Command):
    TYPE: ClassVar = _E.ACTIVITY_CANCEL_REQUESTED
    step: str
    site: str = ""


@register
class TimerStarted(Command):
    TYPE: ClassVar = _E.TIMER_STARTED
    step: str
    kind: str = "timer"
    fire_at: float = 0.0
    duration: float = 0.0
    site: str = ""


@register
class TimerFired(EventData):
    TYPE: ClassVar = _E.TIMER_FIRED
    step: str
    generation: int = 0


@register
class TimerCancelled(Command):
    TYPE: ClassVar = _E.TIMER_CANCELLED
    step: str
    site: str = ""


@register
class MarkerRecorded(Command):
    """A recorded value (`ctx.uuid()`, `ctx.now()`...) at `step`, or a patch taken
    (`kind` "patch", its `change_id`, no step and no value)."""

    TYPE: ClassVar = _E.MARKER_RECORDED
    OMIT_NONE: ClassVar = frozenset({"step", "change_id"})
    kind: str
    site: str = ""
    step: str | None = None
    value: Any = UNSET
    change_id: str | None = None


@register
class SignalReceived(EventData):
    """A signal; `webhook` names the delivery it came in (webhooks by correlation), `by`
    the principal that sent it, where one did."""

    TYPE: ClassVar = _E.SIGNAL_RECEIVED
    OMIT_NONE: ClassVar = frozenset({"webhook", "by"})
    name: str
    payload: Any = None
    webhook: dict[str, Any] | None = None
    by: str | None = None


@register
class CorrelationRegistered(Command):
    TYPE: ClassVar = _E.CORRELATION_REGISTERED
    step: str
    kind: str
    signal: str
    key: str
    value: str
    site: str = ""


@register
class CorrelationWithdrawn(Command):
    TYPE: ClassVar = _E.CORRELATION_WITHDRAWN
    step: str
    site: str = ""


@register
class ApprovalRequested(Command):
    TYPE: ClassVar = _E.APPROVAL_REQUESTED
    step: str
    approval_id: str
    name: str
    kind: str
    policy: dict[str, Any]
    data: Any = None
    expires_at: float | None = None
    timer_step: str | None = None
    started_by: str | None = None
    site: str = ""


@register
class ApprovalDecided(EventData):
    """One decision on an approval; `outcome` is "approved" or "rejected" once it is
    resolved, else "pending"; `votes`, the decisions so far, once resolved;
    `starter_unknown`, that segregation of duties let it through without a known starter
    (the policy's `allow_unknown_starter`)."""

    TYPE: ClassVar = _E.APPROVAL_DECIDED
    OMIT_NONE: ClassVar = frozenset({"votes", "starter_unknown"})
    step: str
    approval_id: str
    decision: str
    outcome: str
    principal: str = ""
    comment: str = ""
    auth: str = ""
    authenticated_by: str = ""
    credential_id: str | None = None
    votes: list[Any] | None = None
    starter_unknown: bool | None = None


@register
class ApprovalClosed(Command):
    TYPE: ClassVar = _E.APPROVAL_CLOSED
    step: str
    approval_id: str
    status: str
    site: str = ""


@register
class ApprovalRefused(EventData):
    TYPE: ClassVar = _E.APPROVAL_REFUSED
    step: str
    approval_id: str
    decision: str
    reason: str
    principal: str = ""
    auth: str = ""
    authenticated_by: str = ""
    credential_id: str | None = None


@register
class ApproversChanged(EventData):
    TYPE: ClassVar = _E.APPROVERS_CHANGED
    step: str
    approval_id: str
    revoked: str | None
    added: str | None
    by: str
    reason: str
    policy: dict[str, Any]


@register
class ApprovalEscalated(Command):
    TYPE: ClassVar = _E.APPROVAL_ESCALATED
    step: str
    approval_id: str
    approval_step: str
    group: str
    site: str = ""
