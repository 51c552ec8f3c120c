"""Attempts of activity steps, and how they ended.

An attempt is leased to one engine under a fence; its outcome is reported under
that fence and accepted only if it is still the task's fence.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from waypost.model.definitions.format import describe_duration
from waypost.model.events import (
    UNSET,
    ActivityCompleted,
    ActivityFailed,
    LateResultIgnored,
    NewEvent,
)
from waypost.model.logs import logger
from waypost.model.retry import Retry
from waypost.runtime.context import ActivityContext
from waypost.store.base import ClaimedTask, TaskRef


@dataclass(slots=True)
class Attempt:
    """One attempt of one activity step, leased to this engine under `fence`."""

    tenant: str
    run_id: str
    step: str
    activity: str
    fence: int
    attempt: int
    spec: dict[str, Any]
    deadline: float
    previous_details: Any = None
    # Leased by a write that landed late: timed again from when it starts (store/landing.py).
    retime: bool = False
    ctx: ActivityContext | None = None
    task: asyncio.Task[Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.time_to(self.deadline)

    def time_to(self, deadline: float) -> None:
        """Run to `deadline`: an attempt's start-to-close deadline, no later than its
        step's schedule-to-close."""
        close_by = self.spec.get("close_by")
        self.deadline = deadline if close_by is None else min(deadline, float(close_by))

    @property
    def ref(self) -> TaskRef:
        return TaskRef(self.tenant, self.run_id, "activity", self.step, self.fence)

    @classmethod
    def from_claim(cls, t: ClaimedTask, retime: bool = False) -> Attempt:
        spec = t.spec or {}
        return cls(
            tenant=t.tenant,
            run_id=t.run_id,
            step=t.step,
            activity=t.queue,
            fence=t.fence,
            attempt=t.attempt,
            spec=spec,
            deadline=t.deadline if t.deadline is not None else 0.0,
            previous_details=t.heartbeat_details,
            retime=retime,
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended: a result, or an error and whether to retry."""

    ok: bool
    result: Any = None
    error: dict[str, Any] | None = None
    retrying: bool = False
    retry_at: float | None = None
    heartbeat_details: str | None = None
    # Made by a scheduler for an attempt that timed out, not reported by the attempt.
    synthetic: bool = False
    # The attempt lost its engine (its lease lapsed): the step's lapses, this one counted.
    lapses: int = 0

    def event(self, a: Attempt) -> ActivityCompleted | ActivityFailed:
        if self.ok:
            return ActivityCompleted(step=a.step, attempt=a.attempt, result=self.result)
        return ActivityFailed(
            step=a.step,
            attempt=a.attempt,
            error=self.error,
            retrying=self.retrying,
            retry_at=self.retry_at,
        )

    def late_event(self, a: Attempt, now: float) -> NewEvent:
        """The audit fact of an outcome from an attempt that no longer holds its task."""
        return LateResultIgnored(
            step=a.step,
            attempt=a.attempt,
            fence=a.fence,
            outcome="completed" if self.ok else "failed",
            reason="the attempt no longer holds the task (its lease lapsed, it was retried, "
            "cancelled or the run ended)",
            result=self.result if self.ok else UNSET,
            error=UNSET if self.ok else self.error,
        ).at(now)


SCHEDULE_TO_CLOSE_TIMEOUT = "ScheduleToCloseTimeout"
"""The error type of a step that did not finish within its `schedule_to_close`."""

Report = Callable[[Attempt, Outcome], Coroutine[Any, Any, None]]
"""Where an attempt's outcome goes: recorded, and decided on if it is final."""


def failure(
    a: Attempt, error: dict[str, Any], now: float, *, retryable: bool, details: str | None = None
) -> Outcome:
    """How attempt `a` failed with `error` at `now`: retried if the policy allows it and
    the step's schedule-to-close leaves time for the retry."""
    policy = Retry.from_json(a.spec["retry"]) if "retry" in a.spec else Retry()
    retrying = retryable and policy.allows(a.attempt)
    retry_at = now + policy.delay(a.attempt, random.random()) if retrying else None
    close_by = a.spec.get("close_by")
    if close_by is not None and retryable and (now >= close_by or (retry_at or 0) >= close_by):
        # No further attempt may start: the step fails, naming its bound.
        error, retrying, retry_at = schedule_to_close_error(a, error), False, None
    return Outcome(
        False, error=error, retrying=retrying, retry_at=retry_at, heartbeat_details=details
    )


def schedule_to_close_error(a: Attempt, last: dict[str, Any]) -> dict[str, Any]:
    """The error of a step whose schedule-to-close was reached; the last attempt's error
    is its `cause`."""
    seconds = float(a.spec.get("schedule_to_close") or 0)
    return {
        "type": SCHEDULE_TO_CLOSE_TIMEOUT,
        "message": (
            f"the step did not finish within its schedule_to_close of "
            f"{describe_duration(seconds)}: attempt {a.attempt} failed "
            f"({last.get('type', 'error')}: {last.get('message', '')}) and no further "
            "attempt may start"
        ),
        "details": {"schedule_to_close": seconds, "attempts": a.attempt},
        "cause": last,
    }


# == the log of claims, finishes and retries ============================================
tasks_log = logger("waypost.tasks")
"""One INFO line per workflow task claimed and finished, and per activity attempt claimed,
finished or retried; each record carries `tenant`, `run_id`, `task`, `step`, `attempt` (a
workflow task: `fence`) and `event` for a structured (JSON) formatter. Nothing is built
unless INFO is enabled."""


def log_attempt_claimed(a: Attempt) -> None:
    if tasks_log.isEnabledFor(logging.INFO):
        tasks_log.info(
            "claimed run %s step %s (%s) attempt %d",
            a.run_id,
            a.step,
            a.activity,
            a.attempt,
            extra=_extra("claimed", "activity", a.tenant, a.run_id, a.step, a.attempt),
        )


def log_attempt_outcome(a: Attempt, outcome: Outcome) -> None:
    if not tasks_log.isEnabledFor(logging.INFO):
        return
    args: tuple[str, ...] = ()
    if outcome.ok:
        event, how = "finished", "completed"
    else:
        error = outcome.error or {}
        why = f"{error.get('type', 'error')}: {error.get('message', '')}"
        if outcome.retrying:
            at = "-" if outcome.retry_at is None else _iso(outcome.retry_at)
            event, how, args = "retry", "failed (%s); retry at %s", (why, at)
        else:
            event, how, args = "finished", "failed (%s); no retry", (why,)
    tasks_log.info(
        "finished run %s step %s (%s) attempt %d: " + how,
        a.run_id,
        a.step,
        a.activity,
        a.attempt,
        *args,
        extra=_extra(event, "activity", a.tenant, a.run_id, a.step, a.attempt),
    )


def log_workflow_task(event: str, tenant: str, run_id: str, fence: int, status: str = "") -> None:
    if tasks_log.isEnabledFor(logging.INFO):
        tasks_log.info(
            "%s workflow task of run %s (fence %d)%s",
            event,
            run_id,
            fence,
            f": {status}" if status else "",
            extra={**_extra(event, "workflow", tenant, run_id, None, None), "fence": fence},
        )


def _extra(
    event: str, task: str, tenant: str, run_id: str, step: str | None, attempt: int | None
) -> dict[str, Any]:
    return {
        "event": event,
        "task": task,
        "tenant": tenant,
        "run_id": run_id,
        "step": step,
        "attempt": attempt,
    }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")
