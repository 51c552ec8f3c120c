"""A cancelled definition run compensates its completed steps when its definition says
`on_cancel: compensate`: newest first, each compensation an activity of its own in the
history, and the run ends `cancelled` saying what was undone and what could not be."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type, until_event
from tests.helpers.trips import CALLS, LOCK, TRIP, book, unbook, waiting_for_signal
from waypost.model.chain import verify_chain

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def engine(make_engine: Any) -> Any:
    with LOCK:
        CALLS.clear()
    eng = make_engine(book, unbook, cache_size=0)  # every step replays from the store
    with eng.running():
        yield eng


def test_a_cancelled_run_compensates_newest_first_and_says_what_could_not_be_undone(
    engine: Any,
) -> None:
    engine.publish(TRIP)
    run = engine.start("trip", {})
    waiting_for_signal(engine, run.run_id)
    engine.cancel(run.run_id, "the customer changed plans")
    with pytest.raises(wp.WorkflowCancelled) as ended:
        engine.result(run.run_id, timeout=20)

    error = ended.value.error
    assert error["type"] == "Cancelled" and error["message"] == "the customer changed plans"
    failed = error["details"]["compensation_failed"]
    assert [f["step"] for f in failed] == ["flight"]
    assert "the airline refuses refunds" in failed[0]["message"]
    assert error["details"]["compensated"] == ["hotel"]
    assert engine.get(run.run_id).error == error

    # Newest first: the flight (booked after the hotel) is undone first; the car has no
    # compensation. Each compensation is an activity of its own, labelled with its step.
    history = engine.history(run.run_id)
    undo = [e for e in of_type(history, "ActivityScheduled") if "compensates" in e.data]
    assert [e.data["compensates"] for e in undo] == ["flight", "hotel"]
    assert [e.data["activity"] for e in undo] == ["trip.unbook", "trip.unbook"]
    assert [c for c in CALLS if c[0] == "unbook"] == [
        ("unbook", "flight-1"),
        ("unbook", "flight-1"),  # its retry
        ("unbook", "hotel-1"),
    ]
    outcomes = {
        e.data["step"]: e.type
        for e in history
        if e.type in ("ActivityCompleted", "ActivityFailed") and not e.data.get("retrying")
    }
    assert [outcomes[e.data["step"]] for e in undo] == ["ActivityFailed", "ActivityCompleted"]
    end = history[-1]
    assert end.type == "RunCancelled"
    assert end.data["details"] == error["details"]
    assert "forced" not in end.data
    # The request comes before every compensation, and the run ends after the last.
    (requested,) = of_type(history, "CancelRequested")
    assert all(requested.seq < e.seq for e in undo)
    assert verify_chain(history, run=("default", run.run_id)) == []


@pytest.mark.parametrize("on_cancel", ["", "on_cancel: none\n"])
def test_without_on_cancel_compensate_a_cancelled_run_undoes_nothing(
    engine: Any, on_cancel: str
) -> None:
    engine.publish(TRIP.replace("on_cancel: compensate\n", on_cancel))
    run = engine.start("trip", {})
    waiting_for_signal(engine, run.run_id)
    engine.cancel(run.run_id, "no undo")
    with pytest.raises(wp.WorkflowCancelled) as ended:
        engine.result(run.run_id, timeout=20)
    assert ended.value.error == {"type": "Cancelled", "message": "no undo"}
    history = engine.history(run.run_id)
    assert [e for e in of_type(history, "ActivityScheduled") if "compensates" in e.data] == []
    assert "details" not in history[-1].data
    assert [c for c in CALLS if c[0] == "unbook"] == []


def test_a_run_cancelled_before_any_step_completed_has_nothing_to_compensate(
    make_engine: Any,
) -> None:
    gate = threading.Event()

    @wp.activity(name="slow.book")
    def slow_book(ctx: wp.ActivityContext, what: str) -> dict[str, Any]:
        gate.wait(20)
        return {"id": what}

    engine = make_engine(slow_book, book, unbook)
    engine.publish(TRIP.replace("activity: trip.book", "activity: slow.book", 1))
    with engine.running():
        run = engine.start("trip", {})
        eventually(
            lambda: "activity" in [w["kind"] for w in engine.get(run.run_id).waiting_for],
            "the hotel to be booking",
        )
        engine.cancel(run.run_id, "too slow")
        with pytest.raises(wp.WorkflowCancelled) as ended:
            engine.result(run.run_id, timeout=20)
        gate.set()
        # The booking that was still running reports into an ended run: an audit fact.
        until_event(engine, run.run_id, "LateResultIgnored", "the late result")
    assert ended.value.error["details"] == {"compensated": [], "compensation_failed": []}
    history = engine.history(run.run_id)
    assert [e for e in of_type(history, "ActivityScheduled") if "compensates" in e.data] == []
    assert engine.get(run.run_id).status == wp.RunStatus.CANCELLED


def cancelled_then_late(engine: Any, run_id: str, gate: threading.Event, what: str) -> Any:
    """The run ends cancelled while `what` runs; let by `gate`, `what` then reports into
    the ended run (an audit fact). The error the run ended with."""
    with pytest.raises(wp.WorkflowCancelled) as ended:
        engine.result(run_id, timeout=20)
    gate.set()
    eventually(
        lambda: of_type(engine.history(run_id), "LateResultIgnored"), f"the late result of {what}"
    )
    return ended.value.error


def test_the_grace_ends_a_compensation_that_hangs_and_says_what_was_undone_by_then(
    make_engine: Any,
) -> None:
    gate, running = threading.Event(), threading.Event()

    @wp.activity(name="slow.unbook", retry=wp.Retry(max_attempts=1))
    def slow_unbook(ctx: wp.ActivityContext, id: str) -> str:
        if id.startswith("hotel"):  # the oldest, so the last undone
            running.set()
            gate.wait(60)
        return f"released {id}"

    engine = make_engine(book, slow_unbook, cancel_grace=0.5)
    engine.publish(TRIP.replace("trip.unbook", "slow.unbook"))
    try:
        with engine.running():
            run = engine.start("trip", {})
            waiting_for_signal(engine, run.run_id)
            engine.cancel(run.run_id, "hurry")
            assert running.wait(10)
            error = cancelled_then_late(engine, run.run_id, gate, "the hotel's compensation")
    finally:
        gate.set()
    assert error["details"] == {
        "compensated": ["flight"],
        "compensation_failed": [],
        "forced": True,
        "after": 0.5,
    }
    history = engine.history(run.run_id)
    undo = [
        e.data["compensates"]
        for e in of_type(history, "ActivityScheduled")
        if "compensates" in e.data
    ]
    assert undo == ["flight", "hotel"]
    ended_at = of_type(history, "RunCancelled")[0]
    assert ended_at.data["details"] == {"compensated": ["flight"], "compensation_failed": []}
    assert ended_at.data["forced"] is True


FAILING_TRIP = TRIP.replace(
    "    next: confirm\n  confirm:\n    type: wait\n    signal: confirmed\n    next: done\n"
    "  done: {type: succeed}\n",
    "    next: refuse\n  refuse: {type: fail, error: refused}\n",
)


@pytest.mark.parametrize("on_cancel", ["compensate", "none"])
def test_a_cancel_during_a_failures_compensation(make_engine: Any, on_cancel: str) -> None:
    assert "refuse" in FAILING_TRIP
    gate, running = threading.Event(), threading.Event()
    undone: list[str] = []

    @wp.activity(name="gated.unbook", retry=wp.Retry(max_attempts=1))
    def gated_unbook(ctx: wp.ActivityContext, id: str) -> str:
        if id.startswith("flight"):  # the newest, so the first undone
            running.set()
            gate.wait(60)
        with LOCK:
            undone.append(id)
        return f"released {id}"

    engine = make_engine(book, gated_unbook)
    source = FAILING_TRIP.replace("trip.unbook", "gated.unbook")
    if on_cancel == "none":
        source = source.replace("on_cancel: compensate\n", "")
    engine.publish(source)
    try:
        with engine.running():
            run = engine.start("trip", {})
            assert running.wait(10)  # failed at `refuse`, undoing the flight
            engine.cancel(run.run_id, "enough")
            error = cancelled_then_late(engine, run.run_id, gate, "the interrupted compensation")
    finally:
        gate.set()
    history = engine.history(run.run_id)
    undo = [
        e.data["compensates"]
        for e in of_type(history, "ActivityScheduled")
        if "compensates" in e.data
    ]
    if on_cancel == "compensate":
        # The interrupted compensation is listed as failed; the rest still run.
        assert error["details"] == {
            "compensated": ["hotel"],
            "compensation_failed": [
                {
                    "step": "flight",
                    "message": "interrupted: the run was cancelled while the compensation ran",
                }
            ],
        }
        assert undo == ["flight", "hotel"]
        assert "hotel-1" in undone
    else:
        assert error == {"type": "Cancelled", "message": "enough"}
        assert undo == ["flight"]
        assert "hotel-1" not in undone
