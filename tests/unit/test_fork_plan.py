"""What a fork copies from its source's history (pure rules, model/fork.py)."""

from __future__ import annotations

from typing import Any

import pytest

from waypost.errors import InvalidRequest
from waypost.model.chain import seal
from waypost.model.events import Event, EventType, NewEvent
from waypost.model.fork import children_in_flight, in_flight, plan_fork

E = EventType


def history(*events: tuple[EventType, dict[str, Any]]) -> list[Event]:
    """A sealed history: RunStarted, then `events` (type, data) at seconds 2, 3, ..."""
    new = [NewEvent(E.RUN_STARTED, {"workflow": "w", "version": "1", "input": None}, 1.0)]
    new += [NewEvent(t, d, float(i + 2)) for i, (t, d) in enumerate(events)]
    return seal(0, "", new)


def sched(step: str, cause: int, **extra: Any) -> tuple[EventType, dict[str, Any]]:
    return E.ACTIVITY_SCHEDULED, {"step": step, "activity": "a", "cause": cause, **extra}


def done(step: str) -> tuple[EventType, dict[str, Any]]:
    return E.ACTIVITY_COMPLETED, {"step": step, "result": step}


# 1 RunStarted, 2 sched 1, 3 done 1, 4 sched 2, 5 done 2, 6 sched 3, 7 failed 3, 8 RunFailed
THREE_STEPS = history(
    sched("1", 1),
    done("1"),
    sched("2", 3),
    done("2"),
    sched("3", 5),
    (E.ACTIVITY_FAILED, {"step": "3", "retrying": False, "error": {}}),
    (E.RUN_FAILED, {"error": {}}),
)


def types(plan: Any) -> list[str]:
    return [str(e.type) for e in plan.events]


def test_a_cut_before_a_step_copies_the_steps_finished_before_it_and_not_it() -> None:
    plan = plan_fork(THREE_STEPS, 7, at_step="3")
    assert plan.cut == 5 and plan.step == "3"
    assert types(plan) == ["ActivityScheduled", "ActivityCompleted"] * 2
    assert plan.source_seqs == [2, 3, 4, 5]
    # Step 3 was issued while handling event 5: replay checks strictly up to event 4,
    # then feeds event 5 live, where the code issues step 3 anew.
    assert plan.processed_seq == 4


def test_without_a_cut_every_finished_step_is_copied_but_not_the_runs_end() -> None:
    plan = plan_fork(THREE_STEPS, 7)
    assert plan.cut == 7
    assert types(plan) == ["ActivityScheduled", "ActivityCompleted"] * 2 + [
        "ActivityScheduled",
        "ActivityFailed",
    ]
    assert "RunFailed" not in types(plan)
    # The code failed the run while handling event 7: that event is fed live again.
    assert plan.processed_seq == 6


def test_a_cut_by_event_number_leaves_out_a_step_not_finished_by_it() -> None:
    plan = plan_fork(THREE_STEPS, 7, up_to_seq=4)
    assert plan.cut == 4
    assert types(plan) == ["ActivityScheduled", "ActivityCompleted"]  # step 2 runs again
    assert plan.processed_seq == 2


def test_causes_are_renumbered_with_the_copies() -> None:
    # Step 1 was scheduled, then a signal came, then steps 1 and 2 finished.
    hist = history(
        sched("1", 1),
        (E.LATE_RESULT_IGNORED, {"step": "0", "outcome": "completed"}),
        (E.RUN_PAUSED, {"by": "o", "reason": "r"}),
        (E.RUN_RESUMED, {"by": "o", "reason": "r"}),
        done("1"),
        sched("2", 6),
        done("2"),
    )
    plan = plan_fork(hist, 8)
    assert types(plan) == ["ActivityScheduled", "ActivityCompleted"] * 2
    assert plan.events[0].data["cause"] == 1
    assert plan.events[2].data["cause"] == 3  # event 6 of the source is event 3 of the fork
    assert plan.source_seqs == [2, 6, 7, 8]
    assert plan.processed_seq == 5  # the source's code had seen all: replay checks all


def test_parallel_steps_only_the_finished_one_is_copied() -> None:
    # gather(a, b): both issued at RunStarted; b finished, a had not by the cut.
    hist = history(sched("1", 1), sched("2", 1), done("2"), done("1"))
    plan = plan_fork(hist, 5, up_to_seq=4)
    assert plan.source_seqs == [3, 4]
    assert plan.events[0].data["cause"] == 1
    # Step 1 was issued at RunStarted and is not copied: nothing is replayed strictly.
    assert plan.processed_seq == 0


def test_the_fork_replays_no_further_than_the_source_code_had_seen() -> None:
    # A signal arrived while the run was paused: its code never took it in.
    hist = history(sched("1", 1), done("1"), (E.SIGNAL_RECEIVED, {"name": "go", "payload": 1}))
    plan = plan_fork(hist, 3)
    assert types(plan) == ["ActivityScheduled", "ActivityCompleted", "SignalReceived"]
    assert plan.processed_seq == 3


def test_timers_markers_and_correlations_are_copied_when_finished() -> None:
    hist = history(
        (E.MARKER_RECORDED, {"step": "1", "kind": "now", "value": 5.0, "cause": 1}),
        (E.MARKER_RECORDED, {"kind": "patch", "change_id": "x", "cause": 1}),
        (E.TIMER_STARTED, {"step": "2", "kind": "timer", "fire_at": 9.0, "cause": 1}),
        (E.TIMER_FIRED, {"step": "2"}),
        (E.TIMER_STARTED, {"step": "3", "kind": "timer", "fire_at": 99.0, "cause": 5}),
        (E.CORRELATION_REGISTERED, {"step": "4", "kind": "correlation", "cause": 5}),
    )
    plan = plan_fork(hist, 7)
    assert types(plan) == ["MarkerRecorded", "MarkerRecorded", "TimerStarted", "TimerFired"]
    assert plan.processed_seq == 4  # the unfinished timer and wait were issued at event 5


def test_copying_stops_at_an_approval_a_cancellation_a_migration_and_a_child() -> None:
    for stop in (E.APPROVAL_REQUESTED, E.CANCEL_REQUESTED, E.RUN_MIGRATED, E.CHILD_STARTED):
        data: dict[str, Any] = {"reason": "r"}
        if stop is E.APPROVAL_REQUESTED:
            data = {"step": "2", "kind": "approval:x", "cause": 3}
        if stop is E.CHILD_STARTED:  # the child is the source's: never shared with a fork
            data = {"step": "2", "kind": "child", "run_id": "src-2", "cause": 3}
        hist = history(sched("1", 1), done("1"), (stop, data), sched("3", 4), done("3"))
        plan = plan_fork(hist, 6)
        assert plan.cut == 3 and plan.source_seqs == [2, 3], stop
        with pytest.raises(InvalidRequest, match="copying stops at event 4") as err:
            plan_fork(hist, 6, up_to_seq=5)
        assert err.value.field == "seq"
        with pytest.raises(InvalidRequest, match="copying stops"):
            plan_fork(hist, 6, at_step="3")
        with pytest.raises(InvalidRequest):
            plan_fork(hist, 6, up_to_seq=4)  # the stop itself
        assert plan_fork(hist, 6, up_to_seq=3).cut == 3


def test_audit_facts_appended_later_do_not_move_a_fork_without_a_cut() -> None:
    hist = history(sched("1", 1), done("1"))
    later = history(
        sched("1", 1),
        done("1"),
        (E.RUN_FORKED, {"to_run_id": "x", "seq": 3}),
        (E.RUN_PAUSED, {"by": "o", "reason": "r"}),
    )
    assert plan_fork(hist, 3).cut == plan_fork(later, 3).cut == 3
    assert types(plan_fork(later, 3)) == ["ActivityScheduled", "ActivityCompleted"]


def test_a_definition_step_is_found_by_its_name() -> None:
    hist = history(
        sched("1", 1, definition_step="reserve"),
        done("1"),
        sched("2", 3, definition_step="pay"),
        done("2"),
    )
    assert plan_fork(hist, 5, at_step="pay").cut == 3
    assert plan_fork(hist, 5, at_step="2").cut == 3


def test_unknown_steps_and_events_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="no step") as err:
        plan_fork(THREE_STEPS, 7, at_step="9")
    assert err.value.field == "step"
    with pytest.raises(InvalidRequest, match="has 8 events") as err:
        plan_fork(THREE_STEPS, 7, up_to_seq=9)
    assert err.value.field == "seq"
    with pytest.raises(InvalidRequest):
        plan_fork([], 0)


def test_steps_in_flight_are_the_activities_scheduled_and_not_finished() -> None:
    hist = history(
        sched("1", 1),
        done("1"),
        sched("2", 3),
        (E.ACTIVITY_FAILED, {"step": "2", "retrying": True, "error": {}}),
        sched("3", 3),
        (E.ACTIVITY_CANCEL_REQUESTED, {"step": "3", "cause": 3}),
        (E.TIMER_STARTED, {"step": "4", "kind": "timer", "fire_at": 9.0, "cause": 3}),
    )
    assert [e.data["step"] for e in in_flight(hist)] == ["2"]
    assert in_flight(THREE_STEPS) == []


def test_a_command_caused_by_an_event_not_copied_runs_again_with_what_followed_from_it() -> None:
    hist = history(
        sched("1", 1),
        done("1"),
        (E.RUN_RESUMED, {"reason": "r"}),  # 4: never copied
        sched("2", 4),
        (E.MARKER_RECORDED, {"kind": "patch", "change_id": "x", "cause": 4}),
        done("2"),
        sched("3", 7),
        done("3"),
    )
    plan = plan_fork(hist, 9)
    assert plan.source_seqs == [2, 3]  # step 2 (and so step 3, and the marker) run again
    # Nothing left out was issued while handling a copy: all copies are checked strictly.
    assert plan.processed_seq == 3


def test_children_in_flight_are_those_started_and_not_ended() -> None:
    hist = history(
        (E.CHILD_STARTED, {"step": "1", "run_id": "p-1", "cause": 1}),
        (E.CHILD_STARTED, {"step": "2", "run_id": "p-2", "cause": 1}),
        (E.CHILD_COMPLETED, {"step": "1", "run_id": "p-1", "result": None}),
    )
    assert [e.data["run_id"] for e in children_in_flight(hist)] == ["p-2"]
    ended = [*hist[1:], *history((E.CHILD_FAILED, {"step": "2", "run_id": "p-2"}))[1:]]
    assert children_in_flight(ended) == []
