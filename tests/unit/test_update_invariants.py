"""The update invariant: one acceptance per update id, one completion per acceptance."""

from __future__ import annotations

from typing import Any

from waypost.model.chain import seal
from waypost.model.events import Event, EventType, NewEvent
from waypost.store.base import RunRecord
from waypost.testing.invariants import check_run

_E = EventType


def _run(history: list[Event]) -> RunRecord:
    last = history[-1]
    return RunRecord(
        tenant="t",
        run_id="r",
        workflow="w",
        version="1",
        status="waiting",
        input=None,
        input_json="null",
        result=None,
        error=None,
        waiting_for=[{"kind": "update"}],
        last_seq=last.seq,
        last_hash=last.hash,
        processed_seq=last.seq,
        created_at=0.0,
        updated_at=0.0,
        finished_at=None,
    )


def _history(*events: tuple[EventType, dict[str, Any]]) -> list[Event]:
    return seal(0, "", [NewEvent(type_, data, float(i)) for i, (type_, data) in enumerate(events)])


def _update_violations(history: list[Event]) -> list[str]:
    found = check_run(_run(history), history, has_open_task=True)
    return [v.detail for v in found if v.invariant == "update-once"]


def test_one_acceptance_and_one_completion_hold() -> None:
    history = _history(
        (_E.RUN_STARTED, {"input": None}),
        (_E.UPDATE_ACCEPTED, {"update_id": "a", "name": "n", "args": []}),
        (_E.UPDATE_COMPLETED, {"step": "u2", "update_id": "a", "kind": "update", "result": 1}),
    )
    assert _update_violations(history) == []


def test_an_id_accepted_twice_and_a_stray_completion_are_violations() -> None:
    history = _history(
        (_E.RUN_STARTED, {"input": None}),
        (_E.UPDATE_ACCEPTED, {"update_id": "a", "name": "n", "args": []}),
        (_E.UPDATE_ACCEPTED, {"update_id": "a", "name": "n", "args": []}),
        (_E.UPDATE_COMPLETED, {"step": "u9", "update_id": "a", "kind": "update", "result": 1}),
    )
    found = _update_violations(history)
    assert len(found) == 2
    assert "accepted again" in found[0]
    assert "ends no accepted update" in found[1]
