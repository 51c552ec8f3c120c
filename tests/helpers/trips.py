"""A trip booked in steps, compensated when cancelled: a definition with the activities
it calls, which record their calls in `CALLS`."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import waypost as wp

from .polling import eventually

LOCK = threading.Lock()
CALLS: list[tuple[str, str]] = []


@wp.activity(name="trip.book")
def book(ctx: wp.ActivityContext, what: str) -> dict[str, Any]:
    with LOCK:
        CALLS.append(("book", what))
    return {"id": f"{what}-1"}


@wp.activity(name="trip.unbook", retry=wp.Retry(max_attempts=2, initial_interval=timedelta(0)))
def unbook(ctx: wp.ActivityContext, id: str) -> str:
    with LOCK:
        CALLS.append(("unbook", id))
    if id.startswith("flight"):
        raise RuntimeError("the airline refuses refunds")
    return f"released {id}"


TRIP = """
name: trip
on_cancel: compensate
start: hotel
steps:
  hotel:
    type: activity
    activity: trip.book
    input: {what: "'hotel'"}
    output: $.hotel
    compensate: {activity: trip.unbook, input: {id: hotel.id}}
    next: options
  options:
    type: parallel
    branches:
      - start: flight
        steps:
          flight:
            type: activity
            activity: trip.book
            input: {what: "'flight'"}
            output: $.flight
            compensate: {activity: trip.unbook, input: {id: flight.id}}
            next: flown
          flown: {type: succeed}
      - start: car
        steps:
          car:
            type: activity
            activity: trip.book
            input: {what: "'car'"}
            output: $.car
            next: driven
          driven: {type: succeed}
    next: confirm
  confirm:
    type: wait
    signal: confirmed
    next: done
  done: {type: succeed}
"""


def waiting_for_signal(engine: Any, run_id: str) -> None:
    eventually(
        lambda: "signal" in [w["kind"] for w in engine.get(run_id).waiting_for],
        "the run to wait for its confirmation",
    )
