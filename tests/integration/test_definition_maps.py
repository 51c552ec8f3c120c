"""Map, catch, result and pass steps of definitions, run on both stores.

The activities are real: they record when each execution starts and ends, so the
test can measure how many items were in flight at once.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type
from waypost.model.definitions import parse_definition
from waypost.testing.replay import ReplayStatus, replay_history

pytestmark = pytest.mark.timeout(120)

_LOCK = threading.Lock()
_HOLD = threading.Event()


class Calls:
    """What the activities did: executions by sku, and the most in flight at once."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.undone: list[str] = []

    def enter(self, sku: str) -> None:
        with _LOCK:
            self.started.append(sku)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def leave(self) -> None:
        with _LOCK:
            self.in_flight -= 1


CALLS = Calls()


class PaymentDeclined(Exception):
    """The card was declined (the activity's own error type)."""


@wp.activity(name="map.charge", retry=wp.Retry(max_attempts=1))
def charge(ctx: wp.ActivityContext, sku: str, cents: int) -> dict[str, Any]:
    CALLS.enter(sku)
    try:
        time.sleep(0.15)  # long enough for the items in flight to overlap
        if cents < 0:
            raise PaymentDeclined(f"card declined for {sku}")
        if cents == 0:
            raise ValueError(f"nothing to charge for {sku}")
        return {"id": f"r-{sku}", "cents": cents, "bank": "acme"}
    finally:
        CALLS.leave()


@wp.activity(name="map.hold", retry=wp.Retry(max_attempts=1))
def hold(ctx: wp.ActivityContext, sku: str) -> str:
    CALLS.enter(sku)
    try:
        _HOLD.wait(20)
        return f"held {sku}"
    finally:
        CALLS.leave()


@wp.activity(name="map.undo")
def undo(ctx: wp.ActivityContext, sku: str) -> None:
    with _LOCK:
        CALLS.undone.append(sku)


ACTIVITIES = (charge, hold, undo)


@pytest.fixture
def engine(make_engine: Any) -> Any:
    global CALLS
    CALLS = Calls()
    _HOLD.clear()
    # Every workflow task replays the run from the store: a map, catch or pass step that
    # decided differently on replay would suspend the run instead of finishing it.
    eng = make_engine(*ACTIVITIES, cache_size=0)
    with eng.running():
        try:
            yield eng
        finally:
            _HOLD.set()  # a held activity ends before the engine shuts down


MAP = """
name: charges
start: prepare
steps:
  prepare:
    type: pass
    set:
      $.currency: {literal: EUR}
      $.count: length(lines)
    next: each
  each:
    type: map
    items: lines
    concurrency: 2
    max_items: 10
    iterator:
      start: pay
      steps:
        pay:
          type: activity
          activity: map.charge
          input: {sku: item.sku, cents: item.cents}
          output: $.receipt
          result: "{id: id, cents: cents}"
          compensate: {activity: map.undo, input: {sku: item.sku}}
    output: $.receipts
    next: done
  done:
    type: succeed
    output: "{receipts: receipts, currency: currency, count: count}"
"""


def failure(engine: Any, run_id: str) -> dict[str, Any]:
    """The stored error of a run that must fail."""
    with pytest.raises(wp.WorkflowFailed) as failed:
        engine.result(run_id, timeout=60)
    error: dict[str, Any] = failed.value.error
    return error


def lines(*cents: int) -> dict[str, Any]:
    return {"lines": [{"sku": f"s{i}", "cents": c} for i, c in enumerate(cents)]}


def test_a_map_walks_every_item_in_order_with_at_most_its_concurrency(engine: Any) -> None:
    engine.publish(MAP)
    run = engine.start("charges", lines(100, 200, 300, 400, 500))
    result = engine.result(run.run_id, timeout=60)
    assert result == {
        "receipts": [
            {"receipt": {"id": f"r-s{i}", "cents": c}}
            for i, c in enumerate((100, 200, 300, 400, 500))
        ],
        "currency": "EUR",
        "count": 5,
    }
    assert CALLS.most_in_flight == 2
    history = engine.history(run.run_id)
    scheduled = of_type(history, "ActivityScheduled")
    # Started in item order, each item's step its own id.
    assert [e.data["kwargs"]["sku"] for e in scheduled] == ["s0", "s1", "s2", "s3", "s4"]
    # Each item walks in a task of its own, created in item order: its steps' ids are
    # distinct and the same on every replay (the run replayed at each step to finish).
    steps = [e.data["step"] for e in scheduled]
    assert len(set(steps)) == 5
    assert [step.rsplit(".", 2)[-2] for step in steps] == ["1", "2", "3", "4", "5"]
    assert len({e.data["key"] for e in scheduled}) == 5
    assert engine.verify(run.run_id) == []


def test_a_finished_map_run_replays_on_its_definition_and_not_on_a_changed_one(
    engine: Any,
) -> None:
    text = TOLERANT
    engine.publish(text)
    run = engine.start("charges", lines(100, -1, 300, 400))
    engine.result(run.run_id, timeout=60)
    history = engine.history(run.run_id)
    same = replay_history([], history, definitions={1: parse_definition(text)})
    assert same.status is ReplayStatus.OK, same
    # An extra step in the iterator shifts the ids of the items' steps: caught.
    changed = text.replace(
        "      start: pay\n      steps:\n",
        "      start: first\n      steps:\n        first: {type: wait, duration: 0, next: pay}\n",
    )
    other = replay_history([], history, definitions={1: parse_definition(changed)})
    assert other.status is ReplayStatus.MISMATCH, other
    # Without its definition, a definition run is skipped, as before.
    assert replay_history([], history).status is ReplayStatus.SKIPPED


def test_a_map_over_an_empty_array_stores_an_empty_list(engine: Any) -> None:
    engine.publish(MAP)
    run = engine.start("charges", {"lines": []})
    assert engine.result(run.run_id, timeout=30) == {
        "receipts": [],
        "currency": "EUR",
        "count": 0,
    }
    assert CALLS.started == []


def test_a_longer_array_than_max_items_fails_with_too_many_items(engine: Any) -> None:
    engine.publish(MAP)
    run = engine.start("charges", lines(*range(11)))
    error = failure(engine, run.run_id)
    assert error["type"] == "too_many_items"
    assert "11 items, more than its 10" in error["message"]
    assert CALLS.started == []


TOLERANT = MAP.replace("    max_items: 10\n", "    max_items: 10\n    tolerate: 1\n")


def test_a_map_tolerates_n_failed_items_whose_places_hold_their_error(engine: Any) -> None:
    engine.publish(TOLERANT)
    run = engine.start("charges", lines(100, -1, 300))
    result = engine.result(run.run_id, timeout=60)
    first, second, third = result["receipts"]
    assert first == {"receipt": {"id": "r-s0", "cents": 100}}
    assert third == {"receipt": {"id": "r-s2", "cents": 300}}
    assert second["error"] == "activity_failed"
    assert second["type"] == "PaymentDeclined"
    assert second["step"] == "pay"
    assert "card declined for s1" in second["message"]


def test_one_failure_more_than_tolerated_fails_the_step_and_compensates(engine: Any) -> None:
    engine.publish(TOLERANT)
    run = engine.start("charges", lines(100, -1, -2))
    error = failure(engine, run.run_id)
    assert error["type"] == "activity_failed"
    assert "card declined for s2" in error["message"]
    assert sorted(CALLS.undone) == ["s0"]  # not caught: the run compensates


FAIL_FAST = """
name: fail_fast
start: each
steps:
  each:
    type: map
    items: lines
    concurrency: 2
    iterator:
      start: route
      steps:
        route:
          type: choice
          choices: [{when: "item.cents < `0`", next: pay}]
          default: slow
        pay:
          type: activity
          activity: map.charge
          input: {sku: item.sku, cents: item.cents}
        slow:
          type: activity
          activity: map.hold
          input: {sku: item.sku}
    output: $.done
"""


def test_fail_fast_cancels_the_items_in_flight_and_starts_no_more(engine: Any) -> None:
    engine.publish(FAIL_FAST)
    run = engine.start("fail_fast", lines(1, -1, 3, 4))
    assert failure(engine, run.run_id)["type"] == "activity_failed"
    history = engine.history(run.run_id)
    scheduled = of_type(history, "ActivityScheduled")
    assert len(scheduled) == 2  # items 2 and 3 never started
    held = next(e.data["step"] for e in scheduled if e.data["activity"] == "map.hold")
    assert [e.data["step"] for e in of_type(history, "ActivityCancelRequested")] == [held]
    _HOLD.set()


CAUGHT = """
name: caught
start: pay
steps:
  pay:
    type: activity
    activity: map.charge
    input: {sku: sku, cents: cents}
    output: $.receipt
    compensate: {activity: map.undo, input: {sku: sku}}
    next: again
  again:
    type: activity
    activity: map.charge
    input: {sku: "'again'", cents: second}
    output: $.second_receipt
    catch:
      - errors: [PaymentDeclined]
        next: declined
        output: $.why
      - errors: ["*"]
        next: other
    next: done
  declined:
    type: succeed
    output: "{why: why, receipt: receipt.id}"
  other:
    type: succeed
    output: "{error: error}"
  done:
    type: succeed
    output: second_receipt.id
"""


def test_catch_by_the_activitys_error_type_goes_on_without_compensating(engine: Any) -> None:
    engine.publish(CAUGHT)
    run = engine.start("caught", {"sku": "a", "cents": 1, "second": -5})
    result = engine.result(run.run_id, timeout=60)
    assert result["receipt"] == "r-a"
    why = result["why"]
    assert (why["error"], why["type"], why["step"]) == (
        "activity_failed",
        "PaymentDeclined",
        "again",
    )
    assert "card declined for again" in why["message"]
    assert CALLS.undone == []  # a caught failure compensates nothing
    assert engine.get(run.run_id).status == "completed"


def test_catch_star_and_an_interpreter_error_name(engine: Any) -> None:
    engine.publish(CAUGHT)
    # Nothing to charge: a ValueError, not PaymentDeclined, so the `*` rule takes it.
    run = engine.start("caught", {"sku": "a", "cents": 1, "second": 0})
    result = engine.result(run.run_id, timeout=60)
    assert result["error"]["error"] == "activity_failed"
    assert result["error"]["type"] == "ValueError"
    engine.publish(
        CAUGHT.replace("errors: [PaymentDeclined]", "errors: [expression_failed]").replace(
            "input: {sku: \"'again'\", cents: second}",
            'input: {sku: "\'again\'", cents: "to_number(second) | abs(@)"}',
        )
    )
    run = engine.start("caught", {"sku": "a", "cents": 1, "second": "x"}, version=2)
    result = engine.result(run.run_id, timeout=60)
    assert result["why"]["error"] == "expression_failed"
    assert result["why"]["type"] == "expression_failed"


def test_a_wait_timeout_is_caught_by_name(engine: Any) -> None:
    engine.publish(
        """
name: waits
start: wait
steps:
  wait:
    type: wait
    signal: go
    timeout: 0.2
    output: $.go
    result: note
    catch: [{errors: [timeout], next: late}]
    next: done
  late: {type: succeed, output: "error.error"}
  done: {type: succeed, output: go}
"""
    )
    run = engine.start("waits", {})
    assert engine.result(run.run_id, timeout=30) == "timeout"


def test_a_map_step_catches_the_failure_of_an_item(engine: Any) -> None:
    engine.publish(
        MAP.replace(
            "    output: $.receipts\n    next: done\n",
            "    output: $.receipts\n    catch: [{errors: [activity_failed], next: failed}]\n"
            "    next: done\n  failed: {type: succeed, output: error}\n",
        )
    )
    run = engine.start("charges", lines(1, -1))
    result = engine.result(run.run_id, timeout=60)
    assert (result["error"], result["type"], result["step"]) == (
        "activity_failed",
        "PaymentDeclined",
        "pay",
    )
    assert CALLS.undone == []


def test_result_selects_what_a_signal_wait_stores(engine: Any) -> None:
    engine.publish(
        """
name: selected
start: wait
steps:
  wait:
    type: wait
    signal: shipped
    output: $.shipment
    result: {tracking: tracking, carrier: "carrier.name"}
    next: done
  done: {type: succeed, output: shipment}
"""
    )
    run = engine.start("selected", {})
    eventually(lambda: engine.get(run.run_id).status == "waiting", "the run waiting")
    engine.signal(run.run_id, "shipped", {"tracking": "T1", "carrier": {"name": "DHL"}, "x": 1})
    assert engine.result(run.run_id, timeout=30) == {"tracking": "T1", "carrier": "DHL"}


def test_a_map_without_bounds_takes_the_tenants_and_too_many_items_is_caught(
    make_engine: Any,
) -> None:
    global CALLS
    CALLS = Calls()
    limits = wp.Limits(max_map_items=3, max_map_concurrency=1)
    engine = make_engine(*ACTIVITIES, limits={"*": limits})
    unbounded = MAP.replace("    concurrency: 2\n    max_items: 10\n", "").replace(
        "    output: $.receipts\n    next: done\n",
        "    output: $.receipts\n    catch: [{errors: [too_many_items], next: split}]\n"
        "    next: done\n  split: {type: succeed, output: error.message}\n",
    )
    with engine.running():
        engine.publish(unbounded)
        run = engine.start("charges", lines(1, 2, 3))
        assert [
            r["receipt"]["cents"] for r in engine.result(run.run_id, timeout=60)["receipts"]
        ] == [1, 2, 3]
        assert CALLS.most_in_flight == 1  # the tenant's max_map_concurrency
        run = engine.start("charges", lines(1, 2, 3, 4))
        assert engine.result(run.run_id, timeout=60) == ("step 'each' has 4 items, more than its 3")
    assert CALLS.started == ["s0", "s1", "s2"]
