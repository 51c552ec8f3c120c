"""Forking a run: which of its events a new, linked run starts from (pure).

A fork is a new run whose history begins with a RunStarted that records where it
came from (`forked_from`), followed by copies of the source's events up to a cut.
The new run replays them — the copied steps' results are reused, not executed
again — and goes on live from there. The rules, decided once here (decision 0008):

- **The cut.** `at_step=S` cuts just before the event that started step S (so S
  and everything after it runs again); `up_to_seq=N` cuts after the source's event
  N; neither cuts after the last event that can be copied.
- **Completed steps only.** A step is copied, with all its events up to the cut,
  only if it was finished by the cut: an activity completed, failed for good or
  cancelled; a timer fired or cancelled; a recorded value (`now`, `random`, `uuid`,
  `patched`); a correlated wait withdrawn. A step started but not finished by the
  cut is left out, so the new run starts it again. Signals received by the cut are
  copied (the code may have taken them in); later ones are not.
- **Where copying stops.** Nothing from an approval on is copied (its credentials
  are never copied: the new run asks again), nor from a cancellation request (a fork
  is not cancelled), a migration to another definition version (a fork stays on
  the version its source started on) or a child run's start (the child is the
  source's; a fork starts its own, under its own run ids) on. A cut past one of
  these is refused.
- **Never copied.** The run timeout's timer (a fork's run timeout counts from the
  fork: its RunStarted keeps the source's `run_timeout`, not the deadline of its
  chain of generations), audit facts (late results, refused approvals, changed
  approvers, forks), operator events (pause, resume, suspension, termination) and
  the run's end (completed, failed, cancelled): the new run ends by its own code.
- **Re-chained.** Copies keep their type, data and time and are numbered and hashed
  anew in the new run's chain; a command's `cause` (the event the code was handling
  when it issued it) is renumbered with it.
- **Replay checks.** The new run's `processed_seq` is set to the last copied event
  whose consequences were all copied (and that the source's code had seen): up to
  it, replay requires the code to issue exactly the copied commands, as any replay
  does; after it, the code goes on live.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model.events import (
    COMMAND_EVENTS,
    RUN_TIMEOUT_STEP,
    Command,
    Event,
    EventType,
    NewEvent,
    RunRetried,
    parse_event,
)
from waypost.model.identity import preview
from waypost.model.repairs import effective

_E = EventType

# Events at which copying stops: nothing from them on can be copied meaningfully.
STOPS = {
    _E.APPROVAL_REQUESTED: "an approval (a fork asks again; credentials are never copied)",
    _E.CANCEL_REQUESTED: "a cancellation request (a fork is not cancelled)",
    _E.RUN_MIGRATED: "a migration to another definition version (a fork keeps its source's)",
    _E.STEP_SKIPPED: "a step an operator skipped (fork before it, and skip again if need be)",
    _E.INPUT_UPDATED: "an operator's update of the run's data (fork before it)",
    _E.UPDATE_ACCEPTED: "an update (its caller waits on the source run, not on a fork)",
    # A copied ChildStarted would name the source's child (its run id, its parent link):
    # the fork would share it. From a child on, a fork starts children of its own.
    _E.CHILD_STARTED: "a child run (a fork starts its children again, as its own runs)",
}

# Events of a step that may be copied with it.
_STEP_EVENTS = frozenset(
    {
        _E.ACTIVITY_SCHEDULED,
        _E.ACTIVITY_COMPLETED,
        _E.ACTIVITY_FAILED,
        _E.ACTIVITY_CANCEL_REQUESTED,
        _E.TIMER_STARTED,
        _E.TIMER_FIRED,
        _E.TIMER_CANCELLED,
        _E.MARKER_RECORDED,
        _E.CORRELATION_REGISTERED,
        _E.CORRELATION_WITHDRAWN,
    }
)

# The commands that start a step (what `at_step` names).
_STARTS_STEP = frozenset(
    {
        _E.ACTIVITY_SCHEDULED,
        _E.TIMER_STARTED,
        _E.MARKER_RECORDED,
        _E.APPROVAL_REQUESTED,
        _E.CORRELATION_REGISTERED,
        _E.CHILD_STARTED,
    }
)

# Ends of the code's own making: when the source has one, the event it was handling
# (its `processed_seq`) issued something a fork does not copy.
_CODE_ENDS = frozenset({_E.RUN_COMPLETED, _E.RUN_FAILED, _E.RUN_CANCELLED})


@dataclass(frozen=True)
class Forked:
    """A fork: the new run's id, where it came from, and whether this call created it."""

    run_id: str
    forked_from: dict[str, Any]
    """As the new run's RunStarted records it: `run_id` (the source), `seq` (the source's
    last event considered), `step` (the step asked for, or None), `by`, `reason`,
    `copied` (how many of the source's events follow RunStarted)."""
    created: bool = True


@dataclass(frozen=True)
class ForkPlan:
    """What a fork copies from its source's history."""

    cut: int  # the source's last event considered
    step: str | None  # the step the cut was asked before, if any
    events: list[NewEvent] = field(default_factory=list)  # copies, in order, after RunStarted
    processed_seq: int = 0  # in the new run's numbering (RunStarted is 1)
    source_seqs: list[int] = field(default_factory=list)  # each copy's seq in the source


def _step_of(ev: Event) -> str | None:
    step = ev.data.get("step")
    if ev.type == _E.MARKER_RECORDED and step is None:
        return None  # a patch marker: keyed by change id, finished when recorded
    return None if step is None else str(step)


def _stop(history: Sequence[Event]) -> tuple[int, int, str | None]:
    """Where copying must stop: the last seq that may be copied, the last event before
    it worth copying (audit facts and operator events appended later do not move a fork
    made without a cut), and why it stops there (None: the run's end or history's)."""
    worth = history[0].seq if history else 0
    for ev in history:
        if ev.type in STOPS:
            return ev.seq - 1, worth, STOPS[_E(ev.type)]
        if ev.type in _CODE_ENDS or ev.type == _E.RUN_TERMINATED:
            return ev.seq - 1, worth, None
        if ev.type in _STEP_EVENTS or ev.type == _E.SIGNAL_RECEIVED:
            worth = ev.seq
    return (history[-1].seq if history else 0), worth, None


def find_step(history: Sequence[Event], step: str) -> Event | None:
    """The event that started `step`: by step id, else the first activity of the
    definition step of that name."""
    for ev in history:
        if ev.type in _STARTS_STEP and ev.data.get("step") == step:
            return ev
    for ev in history:
        if ev.type == _E.ACTIVITY_SCHEDULED and ev.data.get("definition_step") == step:
            return ev
    return None


def _finished(events: list[Event]) -> bool:
    """Whether a step whose events (up to the cut) these are was finished by the cut."""
    for ev in events:
        t = ev.type
        if t in (_E.ACTIVITY_COMPLETED, _E.ACTIVITY_CANCEL_REQUESTED, _E.TIMER_FIRED):
            return True
        if t in (_E.TIMER_CANCELLED, _E.CORRELATION_WITHDRAWN, _E.MARKER_RECORDED):
            return True
        if t == _E.STEP_SKIPPED:
            return True
        if t == _E.ACTIVITY_FAILED and not ev.data.get("retrying"):
            return True
    return False


def in_flight(history: Sequence[Event]) -> list[Event]:
    """The activity steps scheduled and not finished (their ActivityScheduled events);
    what a repair voided does not count (a retried step is open again)."""
    open_steps: dict[str, Event] = {}
    for ev in effective(history):
        step = _step_of(ev)
        if step is None:
            continue
        if ev.type == _E.ACTIVITY_SCHEDULED:
            open_steps[step] = ev
        elif step in open_steps and _finished([ev]):
            del open_steps[step]
    return list(open_steps.values())


def children_in_flight(history: Sequence[Event]) -> list[Event]:
    """The child runs started and not ended (their ChildStarted events)."""
    open_children: dict[str, Event] = {}
    for ev in history:
        if ev.type == _E.CHILD_STARTED:
            open_children[str(ev.data.get("step"))] = ev
        elif ev.type in (_E.CHILD_COMPLETED, _E.CHILD_FAILED):
            open_children.pop(str(ev.data.get("step")), None)
    return list(open_children.values())


def plan_fork(
    history: Sequence[Event],
    processed_seq: int,
    *,
    at_step: str | None = None,
    up_to_seq: int | None = None,
) -> ForkPlan:
    """Which events of a run (its `history`, its code having seen up to `processed_seq`)
    a fork cut before step `at_step`, after event `up_to_seq`, or after the last event
    that can be copied, copies. `InvalidRequest` for a step the history lacks or a cut
    past what can be copied."""
    if not history or history[0].type != _E.RUN_STARTED:
        raise InvalidRequest("the run's history does not start with RunStarted")
    last_seq = history[-1].seq
    history = effective(history)  # a repaired run is copied as it counts, voids left out
    limit, worth, why = _stop(history)
    if at_step is not None:
        started = find_step(history, at_step)
        if started is None:
            raise InvalidRequest(f"the run has no step {preview(at_step)}", field="step")
        cut = started.seq - 1
        wanted = f"step {preview(at_step)}"
    elif up_to_seq is not None:
        if up_to_seq > last_seq:
            raise InvalidRequest(f"the run has {last_seq} events, not {up_to_seq}", field="seq")
        cut = up_to_seq
        wanted = f"event {up_to_seq}"
    else:
        cut, wanted = worth, ""
    if cut > limit and why is not None:
        raise InvalidRequest(
            f"cannot fork at {wanted}: copying stops at event {limit + 1}, {why}; fork before it",
            field="step" if at_step is not None else "seq",
        )
    cut = min(cut, limit)
    prefix = [ev for ev in history[1:] if ev.seq <= cut]

    steps: dict[str, list[Event]] = {}
    for ev in prefix:
        step = _step_of(ev)
        if step is not None and ev.type in _STEP_EVENTS:
            steps.setdefault(step, []).append(ev)
    finished = {step for step, evs in steps.items() if _finished(evs)}

    # Copy; a command issued while handling an event that is not copied is not copied
    # either (its step runs again), which may leave out more: repeat until nothing changes.
    skipped: set[int] = set()  # step-less events left out for their cause
    while True:
        kept: list[Event] = []
        new_seq = {history[0].seq: 1}
        changed = False
        for ev in prefix:
            step = _step_of(ev)
            if ev.type == _E.SIGNAL_RECEIVED or (ev.type == _E.MARKER_RECORDED and step is None):
                keep = ev.seq not in skipped
            elif step == RUN_TIMEOUT_STEP:
                keep = False  # a fork's run timeout is its own, from when it is made
            elif ev.type in _STEP_EVENTS and step is not None:
                keep = step in finished
            elif ev.type == _E.RUN_RETRIED and step is not None:
                keep = step in finished  # the copied outcome's attempt number follows it
            else:
                keep = False  # audit facts, operator events, suspensions
            cause = ev.data.get("cause")
            if keep and ev.type in COMMAND_EVENTS and cause is not None and cause not in new_seq:
                if step is not None:
                    finished.discard(step)
                else:
                    skipped.add(ev.seq)
                changed = True
                break
            if keep:
                kept.append(ev)
                new_seq[ev.seq] = len(kept) + 1
        if not changed:
            break
    events: list[NewEvent] = []
    for ev in kept:
        copied = parse_event(ev)
        if isinstance(copied, Command) and copied.cause is not None:
            copied = replace(copied, cause=new_seq[int(copied.cause)])
        if isinstance(copied, RunRetried):
            copied = replace(copied, voids=[])  # what it voided in the source is not copied
        events.append(copied.at(ev.ts))

    return ForkPlan(
        cut=cut,
        step=at_step,
        events=events,
        processed_seq=_processed(history, processed_seq, new_seq, len(kept) + 1),
        source_seqs=[ev.seq for ev in kept],
    )


def _processed(
    history: Sequence[Event], processed_seq: int, new_seq: dict[int, int], last: int
) -> int:
    """The new run's `processed_seq`: the last copy up to which replay must find exactly
    the copied commands — before the first copy that caused something not copied, and
    no later than what the source's code had seen."""

    def position(source_seq: int) -> int:
        """The new seq of the first copy at or after the source's `source_seq`."""
        later = [new for old, new in new_seq.items() if old >= source_seq]
        return min(later) if later else last + 1

    seen = [new for old, new in new_seq.items() if old <= processed_seq]
    bound = min(last, max(seen) if seen else 0)
    for ev in history:
        if ev.type in COMMAND_EVENTS and ev.seq not in new_seq:
            cause = ev.data.get("cause")
            if cause is not None:
                bound = min(bound, position(int(cause)) - 1)
        elif ev.type in _CODE_ENDS:
            bound = min(bound, position(processed_seq) - 1)
    return max(bound, 0)
