"""What a repair may void, and what a failed run still waits for (pure, no database)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.records import history, record
from waypost.model.chain import seal
from waypost.model.definitions import DefinitionError, parse_definition
from waypost.model.events import Event, EventType, NewEvent
from waypost.model.repairs import FailedStep, effective, failed_step, open_steps, open_work
from waypost.testing import check_run

E = EventType
SCHEDULED = {"activity": "pay", "retry": {"max_attempts": 2}, "timeout": 30.0, "cause": 1}


def failed_run(*middle: tuple[EventType, dict[str, Any]]) -> list[Event]:
    return history(
        (E.RUN_STARTED, {"input": None}),
        (E.ACTIVITY_SCHEDULED, {**SCHEDULED, "step": "1"}),
        (E.ACTIVITY_FAILED, {"step": "1", "attempt": 1, "retrying": True, "error": {}}),
        (E.ACTIVITY_FAILED, {"step": "1", "attempt": 2, "retrying": False, "error": {}}),
        *middle,
        (E.RUN_FAILED, {"error": {"type": "ActivityError"}}),
    )


def test_the_failed_step_of_a_run_the_code_did_nothing_more_about() -> None:
    events = failed_run()
    found = failed_step(events)
    assert isinstance(found, FailedStep)
    assert (found.step, found.activity, found.attempts) == ("1", "pay", 2)
    assert found.voids == [4, 5]


def test_a_timer_cancelled_as_the_failure_unwound_is_voided_and_waits_again() -> None:
    events = history(
        (E.RUN_STARTED, {"input": None}),
        (E.TIMER_STARTED, {"step": "1", "fire_at": 500.0, "cause": 1}),
        (E.ACTIVITY_SCHEDULED, {**SCHEDULED, "step": "2"}),
        (E.ACTIVITY_FAILED, {"step": "2", "attempt": 1, "retrying": False, "error": {}}),
        (E.TIMER_CANCELLED, {"step": "1", "cause": 4}),
        (E.RUN_FAILED, {"error": {}}),
    )
    found = failed_step(events)
    assert isinstance(found, FailedStep)
    assert found.voids == [4, 5, 6]
    work = open_work([e for e in events if e.seq not in found.voids])
    assert work.timers == {"1": 500.0}
    assert list(work.activities) == ["2"]


@pytest.mark.parametrize(
    ("middle", "why"),
    [
        ([(E.ACTIVITY_SCHEDULED, {"activity": "undo", "step": "2", "cause": 4})], "acted"),
        (
            [(E.ACTIVITY_SCHEDULED, {"activity": "undo", "compensates": "a", "step": "2"})],
            "compensations ran",
        ),
        ([(E.SIGNAL_RECEIVED, {"name": "go"})], "events arrived"),
    ],
)
def test_a_failure_the_code_acted_on_is_refused(middle: Any, why: str) -> None:
    found = failed_step(failed_run(*middle))
    assert isinstance(found, str) and why in found and "fork" in found


def test_a_run_that_did_not_fail_by_a_step_is_refused() -> None:
    assert failed_step(history((E.RUN_STARTED, {}), (E.RUN_COMPLETED, {}))) == "it has not failed"
    assert "not a step's failure" in str(
        failed_step(history((E.RUN_STARTED, {}), (E.RUN_FAILED, {"error": {}})))
    )
    open_approval = (E.APPROVAL_REQUESTED, {"step": "9", "approval_id": "ap-1", "cause": 1})
    found = failed_step(
        history(
            (E.RUN_STARTED, {}),
            open_approval,
            (E.ACTIVITY_SCHEDULED, {**SCHEDULED, "step": "1"}),
            (E.ACTIVITY_FAILED, {"step": "1", "attempt": 1, "retrying": False}),
            (E.RUN_FAILED, {"error": {}}),
        )
    )
    assert isinstance(found, str) and "ap-1" in found


def test_a_retried_run_reads_as_one_that_never_ended_and_passes_the_invariants() -> None:
    events = failed_run()
    retried = seal(  # the repair's event, then the retried attempt and the run's real end
        events[-1].seq,
        events[-1].hash,
        [
            NewEvent(E.RUN_RETRIED, {"step": "1", "attempt": 3, "voids": [4, 5]}, 200.0),
            NewEvent(E.ACTIVITY_COMPLETED, {"step": "1", "attempt": 3, "result": 1}, 201.0),
            NewEvent(E.RUN_COMPLETED, {"result": 1}, 202.0),
        ],
    )
    full = events + retried
    assert [e.seq for e in effective(full)] == [1, 2, 3, 6, 7, 8]
    assert failed_step(full) == "it has not failed"
    assert check_run(record(full), full, has_open_task=False) == []
    # Without the repair the same events break the rules: two ends, two outcomes.
    broken = [e for e in full if e.type != E.RUN_RETRIED]
    found = check_run(record(broken), broken, has_open_task=False)
    assert {v.invariant for v in found} >= {"monotonic", "activity-attempts"}


def test_open_steps_leave_out_finished_and_skipped_steps() -> None:
    events = history(
        (E.RUN_STARTED, {}),
        (E.ACTIVITY_SCHEDULED, {**SCHEDULED, "step": "1"}),
        (E.ACTIVITY_SCHEDULED, {**SCHEDULED, "step": "2"}),
        (E.ACTIVITY_SCHEDULED, {**SCHEDULED, "step": "3"}),
        (E.ACTIVITY_FAILED, {"step": "3", "attempt": 1, "retrying": True}),
        (E.ACTIVITY_COMPLETED, {"step": "1", "attempt": 1, "result": 1}),
        (E.STEP_SKIPPED, {"step": "2", "output": 2}),
    )
    steps = open_steps(events)
    assert list(steps) == ["3"] and steps["3"].attempts == 1


def test_skippable_is_a_boolean_of_activity_steps() -> None:
    def definition(**extra: Any) -> dict[str, Any]:
        step = {"type": "activity", "activity": "work", **extra}
        return {"name": "d", "start": "a", "steps": {"a": step}}

    parsed = parse_definition(definition(skippable=True))
    assert parsed.all_steps["a"]["skippable"] is True
    with pytest.raises(DefinitionError):
        parse_definition(definition(skippable="yes"))
    with pytest.raises(DefinitionError):
        parse_definition(
            {
                "name": "d",
                "start": "w",
                "steps": {"w": {"type": "wait", "duration": 1, "skippable": True}},
            }
        )
