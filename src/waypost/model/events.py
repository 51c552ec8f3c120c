"""History events and the hash chain that makes a history tamper-evident.

A run's history is an append-only list of events numbered 1..n. Each event's
hash covers the previous event's hash, its own number, type, time and data, so
changing, removing or reordering any stored event breaks every later hash.
The data is stored as canonical JSON (sorted keys, no spaces): the exact text
that was hashed is the text that is stored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    RUN_STARTED = "RunStarted"
    ACTIVITY_SCHEDULED = "ActivityScheduled"
    ACTIVITY_COMPLETED = "ActivityCompleted"
    ACTIVITY_FAILED = "ActivityFailed"
    ACTIVITY_CANCEL_REQUESTED = "ActivityCancelRequested"
    TIMER_STARTED = "TimerStarted"
    TIMER_FIRED = "TimerFired"
    TIMER_CANCELLED = "TimerCancelled"
    SIGNAL_RECEIVED = "SignalReceived"
    MARKER_RECORDED = "MarkerRecorded"
    CANCEL_REQUESTED = "CancelRequested"
    RUN_COMPLETED = "RunCompleted"
    RUN_FAILED = "RunFailed"
    RUN_CANCELLED = "RunCancelled"
    RUN_SUSPENDED = "RunSuspended"
    RUN_RESUMED = "RunResumed"
    LATE_RESULT_IGNORED = "LateResultIgnored"
    APPROVAL_REQUESTED = "ApprovalRequested"
    APPROVAL_DECIDED = "ApprovalDecided"
    APPROVAL_CLOSED = "ApprovalClosed"
    APPROVAL_REFUSED = "ApprovalRefused"
    APPROVERS_CHANGED = "ApproversChanged"
    APPROVAL_ESCALATED = "ApprovalEscalated"
    RUN_MIGRATED = "RunMigrated"


# Events that workflow code issues (commands). Replay matches them to the code
# by step id instead of feeding them to it.
COMMAND_EVENTS = frozenset(
    {
        EventType.ACTIVITY_SCHEDULED,
        EventType.ACTIVITY_CANCEL_REQUESTED,
        EventType.TIMER_STARTED,
        EventType.TIMER_CANCELLED,
        EventType.MARKER_RECORDED,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_CLOSED,
        EventType.APPROVAL_ESCALATED,
    }
)

# Facts recorded for audit that the workflow code never sees.
AUDIT_EVENTS = frozenset(
    {
        EventType.LATE_RESULT_IGNORED,
        EventType.APPROVAL_REFUSED,
        EventType.APPROVERS_CHANGED,
    }
)

# Events that end a run: nothing but audit facts may follow them.
TERMINAL_EVENTS = frozenset(
    {
        EventType.RUN_COMPLETED,
        EventType.RUN_FAILED,
        EventType.RUN_CANCELLED,
    }
)


def feeds_code(ev: Event) -> bool:
    """Whether workflow code must see `ev` to be up to date.

    Not its own commands, not audit facts, and not one vote of several: the
    store counts votes, the code sees only an approval's final outcome.
    """
    if ev.type in COMMAND_EVENTS or ev.type in AUDIT_EVENTS:
        return False
    if ev.type == EventType.APPROVAL_DECIDED:
        return ev.data.get("outcome") in ("approved", "rejected")
    return True


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    """The one JSON text of a value: sorted keys, no spaces, no NaN."""
    return _CANONICAL.encode(value)


def chain_hash(prev_hash: str, seq: int, type_: str, ts: float, data_json: str) -> str:
    """The hash of an event, chained to the hash of the event before it."""
    h = hashlib.sha256(prev_hash.encode())
    h.update(f"\x1e{seq}\x1f{type_}\x1f{ts!r}\x1f".encode())
    h.update(data_json.encode())
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended; the store gives it its number and hash."""

    type: EventType
    data: dict[str, Any]
    ts: float

    def encode(self) -> str:
        return canonical_json(self.data)


@dataclass(frozen=True, slots=True)
class Event:
    """One stored event of a run's history."""

    seq: int
    type: str
    data: dict[str, Any]
    ts: float
    hash: str
    data_json: str = ""

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.ts, UTC)

    def __repr__(self) -> str:
        return f"Event(seq={self.seq}, type={self.type!r}, data={self.data!r})"


def seal(prev_seq: int, prev_hash: str, events: Iterable[NewEvent]) -> list[Event]:
    """Number and hash new events that follow (prev_seq, prev_hash)."""
    sealed = []
    seq, h = prev_seq, prev_hash
    for ev in events:
        seq += 1
        text = ev.encode()
        h = chain_hash(h, seq, ev.type, ev.ts, text)
        sealed.append(Event(seq, ev.type, ev.data, ev.ts, h, text))
    return sealed


@dataclass(frozen=True, slots=True)
class ChainProblem:
    seq: int
    problem: str


def verify_chain(events: Sequence[Event]) -> list[ChainProblem]:
    """Check that a history is numbered 1..n without gaps and its hashes chain.

    Each event's hash is recomputed from the stored data text, so an edit to
    the data, a removed event or two swapped events all show up here.
    """
    problems: list[ChainProblem] = []
    prev = ""
    for expected, ev in enumerate(events, start=1):
        if ev.seq != expected:
            problems.append(ChainProblem(ev.seq, f"expected event {expected}, found {ev.seq}"))
            break
        text = ev.data_json or canonical_json(ev.data)
        if chain_hash(prev, ev.seq, ev.type, ev.ts, text) != ev.hash:
            problems.append(
                ChainProblem(ev.seq, "hash does not match the event and its predecessor")
            )
        prev = ev.hash
    return problems
