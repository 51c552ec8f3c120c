"""The invariant checker finds each kind of broken history (pure, no database)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.helpers.records import history, record
from waypost.model.events import Event, EventType
from waypost.store.base import RunRecord
from waypost.testing import Ledger, check_run

E = EventType


GOOD = [
    (E.RUN_STARTED, {"workflow": "wf", "version": "1", "input": None}),
    (E.ACTIVITY_SCHEDULED, {"step": "1", "activity": "a"}),
    (E.ACTIVITY_FAILED, {"step": "1", "attempt": 1, "retrying": True, "error": {}}),
    (E.ACTIVITY_COMPLETED, {"step": "1", "attempt": 2, "result": 1}),
    (E.TIMER_STARTED, {"step": "2", "fire_at": 100.0, "kind": "timer"}),
    (E.TIMER_FIRED, {"step": "2", "generation": 1}),
    (E.RUN_COMPLETED, {"result": 1}),
    (E.LATE_RESULT_IGNORED, {"step": "1", "attempt": 1, "fence": 1}),
]


def invariants(run: RunRecord, events: list[Event], open_task: bool = False) -> set[str]:
    return {v.invariant for v in check_run(run, events, has_open_task=open_task)}


def decided_by_ann(
    step: str, approval_id: str, credential_id: str, outcome: str
) -> tuple[EventType, dict[str, Any]]:
    """An ApprovalDecided of user ann, with her credential `credential_id`."""
    data = {"step": step, "approval_id": approval_id, "principal": "ann"}
    return E.APPROVAL_DECIDED, {**data, "credential_id": credential_id, "outcome": outcome}


def test_a_sound_history_has_no_violations() -> None:
    events = history(*GOOD)
    assert check_run(record(events), events, has_open_task=False) == []


def test_an_edited_event_breaks_the_chain() -> None:
    events = history(*GOOD)
    events[3] = dataclasses.replace(events[3], data_json='{"attempt":2,"result":999,"step":"1"}')
    assert "hash-chain" in invariants(record(events), events)


def test_a_missing_event_is_a_gap() -> None:
    events = history(*GOOD)
    del events[2]
    assert "hash-chain" in invariants(record(events), events)


def test_a_snapshot_behind_its_history() -> None:
    events = history(*GOOD)
    assert "snapshot" in invariants(record(events, last_seq=events[-2].seq), events)


def test_a_step_after_the_end_moves_the_run_backwards() -> None:
    events = history(*GOOD, (E.ACTIVITY_SCHEDULED, {"step": "3", "activity": "a"}))
    assert "monotonic" in invariants(record(events), events)


def test_a_finished_status_needs_a_terminal_event() -> None:
    events = history(*GOOD[:6])
    assert "monotonic" in invariants(record(events, status="completed"), events)


def test_a_terminal_event_needs_a_finished_status() -> None:
    events = history(*GOOD)
    assert "monotonic" in invariants(record(events, status="running"), events, True)


def test_a_stale_attempts_result_must_not_be_accepted() -> None:
    events = history(
        GOOD[0],
        GOOD[1],
        GOOD[2],
        (E.ACTIVITY_COMPLETED, {"step": "1", "attempt": 1, "result": 1}),
        GOOD[6],
    )
    assert "activity-attempts" in invariants(record(events), events)


def test_two_accepted_outcomes_for_one_step() -> None:
    events = history(*GOOD[:4], (E.ACTIVITY_COMPLETED, {"step": "1", "attempt": 2}), GOOD[6])
    assert "activity-attempts" in invariants(record(events), events)


def test_a_timer_fired_twice_in_one_generation() -> None:
    events = history(*GOOD[:6], GOOD[5], GOOD[6])
    assert "timer-once" in invariants(record(events), events)


def test_a_timer_fired_before_it_was_due() -> None:
    early = (E.TIMER_STARTED, {"step": "2", "fire_at": 10_000.0, "kind": "timer"})
    events = history(*GOOD[:4], early, GOOD[5], GOOD[6])
    assert "timer-once" in invariants(record(events), events)


@pytest.mark.parametrize("status", ["running", "waiting"])
def test_an_unfinished_run_must_say_what_it_waits_for(status: str) -> None:
    events = history(*GOOD[:4])
    assert "explained" in invariants(record(events, status=status), events)
    waiting = [{"kind": "timer", "step": "2"}]
    assert invariants(record(events, status=status, waiting_for=waiting), events) == set()
    assert invariants(record(events, status=status), events, open_task=True) == set()


def test_a_suspended_run_needs_its_reason_in_the_history() -> None:
    events = history(*GOOD[:4])
    assert "explained" in invariants(record(events, status="suspended"), events)
    events = history(*GOOD[:4], (E.RUN_SUSPENDED, {"reason": "non-determinism"}))
    assert invariants(record(events, status="suspended"), events) == set()


def test_the_ledger_applies_an_effect_once_per_key() -> None:
    ledger = Ledger()
    assert ledger.apply("k", 1) == 1
    assert ledger.apply("k", 2) == 1  # the second execution changes nothing downstream
    assert ledger.executions["k"] == 2
    assert ledger.violations() == []
    ledger.applied["k"] += 1  # what a downstream system without dedupe would record
    assert [v.invariant for v in ledger.violations()] == ["downstream-once"]


def test_an_approval_credential_counted_twice() -> None:
    asked = (E.APPROVAL_REQUESTED, {"step": "1", "approval_id": "ap1", "kind": "approval:x"})
    vote = decided_by_ann("1", "ap1", "c1", "pending")
    events = history(GOOD[0], asked, vote)
    assert invariants(record(events, status="waiting", waiting_for=[{"k": 1}]), events) == set()
    events = history(GOOD[0], asked, vote, vote)
    assert "approval-once" in invariants(record(events, status="waiting", waiting_for=[{}]), events)


# == definition runs moved between versions ====================================
STARTED = (
    E.RUN_STARTED,
    {"workflow": "d", "version": "1", "definition": {"name": "d", "version": 1, "digest": "x"}},
)
ASKED = (E.APPROVAL_REQUESTED, {"step": "1", "approval_id": "ap1", "kind": "approval:ok"})
REVOKED = (E.APPROVAL_CLOSED, {"step": "1", "approval_id": "ap1", "status": "revoked"})
ASKED_AGAIN = (E.APPROVAL_REQUESTED, {"step": "2", "approval_id": "ap2", "kind": "approval:ok"})
APPROVED = decided_by_ann("2", "ap2", "c2", "approved")
DONE = (E.RUN_COMPLETED, {"result": 1})
STORED = {"ap1": "revoked", "ap2": "approved"}


def moved(from_version: int = 1, to_version: int = 2) -> tuple[EventType, dict[str, Any]]:
    return (
        E.RUN_MIGRATED,
        {
            "definition": "d",
            "from_version": from_version,
            "to_version": to_version,
            "from_step": "ok",
            "to_step": "ok",
            "revoked_approvals": ["ap1"],
        },
    )


MIGRATED = [STARTED, ASKED, moved(), REVOKED, ASKED_AGAIN, APPROVED, DONE]


def migration_found(
    events: list[Event], approvals: dict[str, str] | None = STORED, **changes: Any
) -> bool:
    run = record(events, **{"version": "2", **changes})
    found = check_run(run, events, has_open_task=False, approvals=approvals)
    return "migration" in {v.invariant for v in found}


def test_a_sound_migration_has_no_violations() -> None:
    events = history(*MIGRATED)
    assert (
        check_run(record(events, version="2"), events, has_open_task=False, approvals=STORED) == []
    )
    twice = history(STARTED, ASKED, moved(), REVOKED, moved(2, 3), DONE)
    assert not migration_found(twice, version="3")


def test_a_migration_after_the_run_ended() -> None:
    events = history(STARTED, DONE, moved())
    assert migration_found(events)


def test_a_code_run_cannot_be_migrated() -> None:
    events = history(GOOD[0], moved(), GOOD[6])
    assert migration_found(events, version="1")


@pytest.mark.parametrize(
    "moves", [[moved(2, 3)], [moved(), moved(1, 3)]], ids=["from-a-later", "from-the-first-again"]
)
def test_a_migration_leaves_the_version_the_run_is_on(
    moves: list[tuple[EventType, dict[str, Any]]],
) -> None:
    events = history(STARTED, *moves, DONE)
    assert migration_found(events, version="3")


def test_the_runs_row_names_the_version_of_the_last_migration() -> None:
    events = history(*MIGRATED)
    assert migration_found(events, version="1")
    assert not migration_found(history(STARTED, DONE), version="1")
    assert migration_found(history(STARTED, DONE), version="2")


def test_a_revoked_approval_takes_no_decision() -> None:
    late = (E.APPROVAL_DECIDED, {**APPROVED[1], "approval_id": "ap1", "credential_id": "c1"})
    # Before the run has processed the move, only the migration stands in the way.
    events = history(*MIGRATED[:3], late, *MIGRATED[3:])
    assert invariants(record(events, version="2"), events) == {"migration"}


def test_a_revoked_approval_is_closed_revoked_once_the_move_is_processed() -> None:
    approved = (E.APPROVAL_CLOSED, {**REVOKED[1], "status": "approved"})
    assert migration_found(history(*MIGRATED[:3], approved, *MIGRATED[4:]))
    unclosed = history(STARTED, ASKED, moved())
    assert migration_found(unclosed, status="waiting", waiting_for=[{}])
    # Until the run has processed the move, only the store has revoked it.
    waiting = dict(status="waiting", waiting_for=[{}], processed_seq=unclosed[1].seq)
    assert not migration_found(unclosed, **waiting)
    assert migration_found(unclosed, {"ap1": "pending"}, **waiting)


def test_an_approval_not_open_at_the_migration_is_not_revoked_by_it() -> None:
    approved = (E.APPROVAL_DECIDED, {**APPROVED[1], "approval_id": "ap1", "credential_id": "c1"})
    events = history(STARTED, ASKED, approved, moved(), DONE)
    assert not migration_found(events, {"ap1": "approved"})
