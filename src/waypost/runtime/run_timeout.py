"""A run's own deadline: the run timeout of code workflows, as a durable timer.

A run whose start (`RunStarted.run_timeout`) or workflow (`@workflow(run_timeout=...)`)
gives it a run timeout has a timer at the fixed step `run-timeout`, due that long after
the run started. If it fires before the run ended, the run ends `failed` at once with a
`RunTimedOut` error naming the timeout; whatever the code still awaits is dropped as a
forced cancel drops it (a running attempt is told; its tasks and timers go with the run).

Decisions:
- The timer is a command the instance issues when it first takes in RunStarted (before
  the code's first step), so it is in the history: replay and `waypost replay` follow
  the recorded timer whatever the workflow's decorator says today, and a history
  without it (made before run timeouts, or by a run without one) replays without one.
- Its step is not a positional step id (those are digits and dots): it shifts no step
  of the code.
- The timeout spans continue-as-new, as Temporal's execution timeout does: the next
  generation's RunStarted carries the deadline (`run_deadline`), and its timer is due
  then, not a fresh timeout after the new generation began.
- The code gets no chance to clean up: a run timeout is a limit on the whole run, not
  a request (a cancel, with its grace, is the way to ask a run to wind down).
"""

from __future__ import annotations

from typing import Any

from waypost.model.definitions.format import describe_duration
from waypost.model.events import RUN_TIMEOUT_STEP, EventType, RunFailed, TimerStarted

from .port import InstancePort

_E = EventType

__all__ = ["RUN_TIMED_OUT", "RUN_TIMEOUT_STEP", "RunTimeout"]

KIND = "run-timeout"
RUN_TIMED_OUT = "RunTimedOut"
"""The error type of a run that did not end within its run timeout."""


class RunTimeout:
    """The run's timeout (seconds) and deadline (epoch seconds), once started."""

    def __init__(self, port: InstancePort) -> None:
        self._port = port
        self.seconds: float | None = None
        self.deadline: float | None = None

    def begin(self, started: dict[str, Any], started_at: float, default: float | None) -> None:
        """Start the timer for RunStarted `started` (at `started_at`), whose workflow's own
        timeout is `default`; on replay, only as the history recorded it."""
        port = self._port
        if port.replaying and port.recorded_command(RUN_TIMEOUT_STEP) is None:
            return  # a run without one, or started before run timeouts
        given = started.get("run_timeout")
        seconds = float(given) if given is not None else default
        deadline = started.get("run_deadline")
        if not port.replaying and seconds is None and deadline is None:
            return
        recorded = port.match(RUN_TIMEOUT_STEP, _E.TIMER_STARTED, KIND, "the run timeout", "run")
        if recorded is not None:
            timer = TimerStarted.parse(recorded)
            self.deadline = float(timer.fire_at)
            self.seconds = float(given) if given is not None else float(timer.duration)
            return
        fire_at = float(deadline) if deadline is not None else started_at + float(seconds or 0)
        self.seconds, self.deadline = seconds, fire_at
        port.command(
            TimerStarted(
                step=RUN_TIMEOUT_STEP,
                kind=KIND,
                fire_at=fire_at,
                duration=seconds if seconds is not None else max(0.0, fire_at - started_at),
                site="run",
            )
        )

    def expired(self) -> None:
        """The timer fired: a run still going ends `failed` now."""
        port = self._port
        if port.finished or port.closed:
            return
        seconds = self.seconds
        what = f" of {describe_duration(seconds)}" if seconds is not None else ""
        port.end_run(
            RunFailed(
                error={
                    "type": RUN_TIMED_OUT,
                    "message": f"the run did not end within its run timeout{what}",
                    "details": {"run_timeout": seconds, "deadline": self.deadline},
                }
            )
        )
