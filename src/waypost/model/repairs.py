"""Repairing a run without rewriting its history: what `retry` and `skip` may void.

A history is append-only and hash-chained, so a repair never deletes or edits an
event. Instead the repair's own event (`RunRetried`, `StepSkipped`) names, in its
`voids` list, the events that no longer count: the failed step's final
`ActivityFailed` and the run's `RunFailed`. Everything that reads a history for its
meaning (the replaying instance, the invariant checks, the replay check) reads
`effective(history)`: the events in order, voided ones left out. The chain still
covers every event, voided ones included, so `verify` proves what happened first.

Only a failure the code did not act on can be undone: between the step's final
failure and `RunFailed` the code issued no command (no compensation ran, nothing
else was scheduled) and was fed nothing else. Anything more is refused; the way to
redo such a run is `fork`.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .events import COMMAND_EVENTS, TERMINAL_EVENTS, Event, EventType, feeds_code

_E = EventType
REPAIR_EVENTS = frozenset({_E.RUN_RETRIED, _E.STEP_SKIPPED})


def voided_seqs(history: Iterable[Event]) -> frozenset[int]:
    """The events that repairs in `history` voided (by sequence number)."""
    out: set[int] = set()
    for ev in history:
        if ev.type in REPAIR_EVENTS:
            out.update(int(seq) for seq in ev.data.get("voids") or ())
    return frozenset(out)


def effective(history: Sequence[Event]) -> list[Event]:
    """The history as it counts: every event but those a repair voided, in order."""
    voided = voided_seqs(history)
    if not voided:
        return list(history)
    return [ev for ev in history if ev.seq not in voided]


# Follow-ups the code issues while a failure unwinds it (a deadline timer cancelled in a
# `finally`, a parallel branch's activity cancelled): voided with the failure, their
# work made again.
_UNWINDING = frozenset({_E.TIMER_CANCELLED, _E.ACTIVITY_CANCEL_REQUESTED})


@dataclass(frozen=True, slots=True)
class FailedStep:
    """The step whose final failure failed the run, and what a repair voids."""

    step: str
    activity: str
    scheduled: Event  # its ActivityScheduled: the task to make again
    failure: Event  # its final ActivityFailed
    run_failed: Event
    attempts: int  # attempts made so far (the next is attempts + 1)
    unwound: tuple[Event, ...] = ()  # follow-ups issued as the failure unwound the code

    @property
    def voids(self) -> list[int]:
        return sorted([self.failure.seq, self.run_failed.seq, *(e.seq for e in self.unwound)])

    @property
    def definition_step(self) -> str | None:
        value = self.scheduled.data.get("definition_step")
        return None if value is None else str(value)


def failed_step(history: Sequence[Event]) -> FailedStep | str:
    """The step a failed run can be repaired at, or why it cannot (a sentence)."""
    events = effective(history)
    ending = next((ev for ev in events if ev.type in TERMINAL_EVENTS), None)
    if ending is None or ending.type != _E.RUN_FAILED:
        return "it has not failed"
    before = [ev for ev in events if ev.seq < ending.seq]
    failure = next(
        (
            ev
            for ev in reversed(before)
            if ev.type == _E.ACTIVITY_FAILED and not ev.data.get("retrying")
        ),
        None,
    )
    if failure is None:
        return "its failure is not a step's failure (the workflow itself failed); fork it instead"
    later = [ev for ev in before if ev.seq > failure.seq]
    unwound = tuple(
        ev for ev in later if ev.type in _UNWINDING and ev.data.get("cause") == failure.seq
    )
    acted = [ev for ev in later if ev.type in COMMAND_EVENTS and ev not in unwound]
    if acted:
        kind = "compensations ran" if _compensates(acted) else "the code acted on the failure"
        return (
            f"after step {failure.data.get('step')} failed, {kind} (event {acted[0].seq}, "
            f"{acted[0].type}); re-running the step would repeat that: fork it instead"
        )
    if any(feeds_code(ev) for ev in later):
        return "events arrived between the step's failure and the run's end; fork it instead"
    step = str(failure.data.get("step"))
    scheduled = next(
        (ev for ev in before if ev.type == _E.ACTIVITY_SCHEDULED and ev.data.get("step") == step),
        None,
    )
    if scheduled is None:
        return f"step {step} was never scheduled"
    found = FailedStep(
        step=step,
        activity=str(scheduled.data.get("activity")),
        scheduled=scheduled,
        failure=failure,
        run_failed=ending,
        attempts=int(failure.data.get("attempt") or 0),
        unwound=unwound,
    )
    voided = set(found.voids)
    work = open_work([ev for ev in events if ev.seq not in voided])
    if work.approvals:
        return (
            f"approval {work.approvals[0]} was open when it failed and its links died with "
            "the run; fork it instead"
        )
    return found


def _compensates(events: Iterable[Event]) -> bool:
    return any("compensates" in ev.data for ev in events)


@dataclass(frozen=True, slots=True)
class OpenWork:
    """What a run that goes on again waits for: rows its end deleted, to make again."""

    activities: dict[str, OpenStep]
    timers: dict[str, float]  # step -> fire_at
    correlations: dict[str, tuple[str, str, str]]  # step -> (signal, key, value)
    approvals: list[str]  # approval ids


def open_work(events: Sequence[Event]) -> OpenWork:
    """The open activity steps, timers, correlated waits and approvals of `events` (an
    effective history without its end)."""
    timers: dict[str, float] = {}
    correlations: dict[str, tuple[str, str, str]] = {}
    approvals: dict[str, str] = {}
    for ev in events:
        d = ev.data
        step = str(d.get("step", ""))
        if ev.type == _E.TIMER_STARTED:
            timers[step] = float(d["fire_at"])
        elif ev.type in (_E.TIMER_FIRED, _E.TIMER_CANCELLED):
            timers.pop(step, None)
        elif ev.type == _E.CORRELATION_REGISTERED:
            correlations[step] = (str(d["signal"]), str(d["key"]), str(d["value"]))
        elif ev.type == _E.CORRELATION_WITHDRAWN:
            correlations.pop(step, None)
        elif ev.type == _E.APPROVAL_REQUESTED:
            approvals[step] = str(d.get("approval_id"))
        elif ev.type == _E.APPROVAL_CLOSED or (
            ev.type == _E.APPROVAL_DECIDED and d.get("outcome") in ("approved", "rejected")
        ):
            approvals.pop(step, None)
    return OpenWork(open_steps(events), timers, correlations, list(approvals.values()))


@dataclass(frozen=True, slots=True)
class OpenStep:
    """An activity step still waiting for its outcome (scheduled, no final result)."""

    step: str
    activity: str
    scheduled: Event
    attempts: int


def open_steps(history: Sequence[Event]) -> dict[str, OpenStep]:
    """The activity steps of a live run that have no outcome yet, by step id."""
    events = effective(history)
    scheduled: dict[str, Event] = {}
    attempts: dict[str, int] = {}
    done: set[str] = set()
    for ev in events:
        step = str(ev.data.get("step", ""))
        if ev.type == _E.ACTIVITY_SCHEDULED:
            scheduled[step] = ev
        elif ev.type == _E.ACTIVITY_FAILED:
            attempts[step] = int(ev.data.get("attempt") or 0)
            if not ev.data.get("retrying"):
                done.add(step)
        elif ev.type in (_E.ACTIVITY_COMPLETED, _E.STEP_SKIPPED, _E.ACTIVITY_CANCEL_REQUESTED):
            done.add(step)
    return {
        step: OpenStep(step, str(ev.data.get("activity")), ev, attempts.get(step, 0))
        for step, ev in scheduled.items()
        if step not in done
    }


def find_step(candidates: Iterable[Any], wanted: str) -> Any:
    """The candidate (a `FailedStep` or `OpenStep`) whose step id, or definition step
    name, is `wanted`; None if none is."""
    for c in candidates:
        if c.step == wanted or c.scheduled.data.get("definition_step") == wanted:
            return c
    return None
