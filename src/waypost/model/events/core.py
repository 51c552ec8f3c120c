"""History events: what a run's history is made of.

A run's history is an append-only list of events numbered 1..n, each hashed
and chained to the one before it (`chain.py`). The data is stored as canonical
JSON (sorted keys, no spaces): the exact text that was hashed is the text that
is stored.
"""

from __future__ import annotations

import json
import re
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
    # A signal wait findable by a (key, value) while it waits (webhooks by correlation).
    CORRELATION_REGISTERED = "CorrelationRegistered"
    CORRELATION_WITHDRAWN = "CorrelationWithdrawn"
    # Operator commands (`RunResumed` above also ends a pause).
    RUN_PAUSED = "RunPaused"
    RUN_TERMINATED = "RunTerminated"
    # A fork of this run was started (fork): an audit fact pointing at the new run.
    RUN_FORKED = "RunForked"
    # The run's generation ended and the next began (`ctx.continue_as_new`).
    RUN_CONTINUED_AS_NEW = "RunContinuedAsNew"
    # Repairs: a failed step re-run or skipped (each names the events it voids), the data
    # of a waiting definition run replaced.
    RUN_RETRIED = "RunRetried"
    STEP_SKIPPED = "StepSkipped"
    INPUT_UPDATED = "InputUpdated"
    # Child runs: one started by this run's code (a command), and its end, appended by
    # the store in the commit that ends the child (completed; failed, cancelled or
    # terminated; or never started).
    CHILD_STARTED = "ChildStarted"
    CHILD_COMPLETED = "ChildCompleted"
    CHILD_FAILED = "ChildFailed"
    # An update validated and accepted (its id, name and arguments; the code runs its
    # handler), and the handler's result or error (a command, at step "u<accepted seq>").
    UPDATE_ACCEPTED = "UpdateAccepted"
    UPDATE_COMPLETED = "UpdateCompleted"
    # A run started on a workflow queue, admitted by the queue's limits (its code starts).
    RUN_ADMITTED = "RunAdmitted"


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
        EventType.CORRELATION_REGISTERED,
        EventType.CORRELATION_WITHDRAWN,
        EventType.CHILD_STARTED,
        EventType.UPDATE_COMPLETED,
    }
)

# Facts recorded for audit that the workflow code never sees.
AUDIT_EVENTS = frozenset(
    {
        EventType.LATE_RESULT_IGNORED,
        EventType.APPROVAL_REFUSED,
        EventType.APPROVERS_CHANGED,
        EventType.RUN_PAUSED,
        EventType.RUN_FORKED,
        EventType.RUN_RETRIED,
        EventType.RUN_ADMITTED,
    }
)

# Events that end a run: nothing but audit facts may follow them.
TERMINAL_EVENTS = frozenset(
    {
        EventType.RUN_COMPLETED,
        EventType.RUN_FAILED,
        EventType.RUN_CANCELLED,
        EventType.RUN_TERMINATED,
        EventType.RUN_CONTINUED_AS_NEW,
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


# A surrogate code point on its own (a string decoded with `surrogateescape`, a JSON
# text's lone "\ud800") has no UTF-8 form: no store could keep it, nor hash it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def canonical_json(value: Any) -> str:
    """The one JSON text of a value: sorted keys, no spaces, no NaN. Characters are
    written as themselves, except surrogates, written as JSON escapes (which read back as
    the same string), so that every text has a UTF-8 form."""
    text = _CANONICAL.encode(value)
    if not text.isascii() and _SURROGATE.search(text):
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


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
    # The stored data text is not JSON (damage or an edit): `data` is empty and the
    # event must never be fed to workflow code.
    undecodable: bool = False

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.ts, UTC)

    def encode_data(self) -> str:
        """The data's canonical JSON text (what was hashed)."""
        return canonical_json(self.data)

    def __repr__(self) -> str:
        return f"Event(seq={self.seq}, type={self.type!r}, data={self.data!r})"


@dataclass(frozen=True, slots=True)
class ChainProblem:
    """Where a history's chain breaks, and how."""

    seq: int
    problem: str
