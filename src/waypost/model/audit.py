"""What a run's row says, compared with what its history says (for `verify`).

A run's row carries a check under the chain key (its MACs), which finds an edit or a
copy by someone without the key on every read. It cannot find a whole earlier row of
the same run put back (a rollback); reading the history can, where the history says
what the row must: the input its RunStarted records, and the end its terminal event
records. `verify` and the sealing of legacy rows compare them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .events import TERMINAL_EVENTS, Event, EventType, canonical_json
from .repairs import effective
from .status import RunStatus

_ENDS = {
    EventType.RUN_COMPLETED: RunStatus.COMPLETED,
    EventType.RUN_FAILED: RunStatus.FAILED,
    EventType.RUN_CANCELLED: RunStatus.CANCELLED,
    EventType.RUN_TERMINATED: RunStatus.TERMINATED,
}


def snapshot_disagreements(
    status: str, input_json: str, result: Any, error: Any, history: Sequence[Event]
) -> list[str]:
    """Where a run's row (its status, input JSON text, result and error) says other than
    its history (the current generation's, whole)."""
    out: list[str] = []
    if not history:
        return out
    first = history[0]
    started = first.type == EventType.RUN_STARTED and "input" in first.data
    if started and canonical_json(first.data["input"]) != input_json:
        out.append(f"its input (runs.input) is not the one event {first.seq} records")
    counted = effective(history)  # what a repair voided does not count
    end = next((e for e in counted if e.type in TERMINAL_EVENTS), None)
    if end is None:
        if RunStatus(status).finished:
            out.append(f"its status (runs.status) is {status}, but no event ended the run")
        return out
    expected = _ENDS.get(EventType(end.type))
    if expected is None:  # a generation's end: its row belongs to the next one
        return out
    if status != expected.value:
        out.append(
            f"its status (runs.status) is {status}, but event {end.seq} ({end.type}) "
            f"ended the run {expected.value}"
        )
    elif expected is RunStatus.COMPLETED and canonical_json(result) != canonical_json(
        end.data.get("result")
    ):
        out.append(f"its result (runs.result) is not the one event {end.seq} records")
    elif (
        expected is RunStatus.FAILED
        and "error" in end.data
        and canonical_json(error) != canonical_json(end.data["error"])
    ):
        out.append(f"its error (runs.error) is not the one event {end.seq} records")
    return out
