"""Known answers: histories written by the engine, kept as stored.

`tests/data/histories/known_answer.json` holds whole histories (plain chain) written on
SQLite by the engine before the history's events were typed: every event's type, data
text exactly as stored, time and hash. Every event type appears at least once, in each
shape (set of keys) its writers gave it. Reading them must stay possible, and so must
hashing them to the same chain.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from waypost.model.chain import verify_chain
from waypost.model.events import (
    CLASSES,
    COMMAND_EVENTS,
    UNSET,
    Command,
    Event,
    EventType,
    canonical_json,
    parse_event,
)

FIXTURE = Path(__file__).parent.parent / "data" / "histories" / "known_answer.json"

# Event types no history in the fixture holds, each with why it cannot be reached.
NOT_REACHABLE: dict[str, str] = {}


def _histories() -> list[dict[str, Any]]:
    histories: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["histories"]
    return histories


def _events(history: dict[str, Any]) -> list[Event]:
    return [
        Event(e["seq"], e["type"], json.loads(e["data_json"]), e["ts"], e["hash"], e["data_json"])
        for e in history["events"]
    ]


HISTORIES = _histories()


@pytest.mark.parametrize("history", HISTORIES, ids=[h["run_id"] for h in HISTORIES])
def test_the_stored_chain_verifies(history: dict[str, Any]) -> None:
    events = _events(history)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert verify_chain(events, run=(history["tenant"], history["run_id"])) == []


@pytest.mark.parametrize("history", HISTORIES, ids=[h["run_id"] for h in HISTORIES])
def test_the_data_text_is_the_canonical_json_of_its_data(history: dict[str, Any]) -> None:
    for ev in _events(history):
        assert ev.encode_data() == ev.data_json, ev


@pytest.mark.parametrize("history", HISTORIES, ids=[h["run_id"] for h in HISTORIES])
def test_each_event_reads_into_its_class_and_writes_back_the_same_text(
    history: dict[str, Any],
) -> None:
    for ev in _events(history):
        typed = parse_event(ev)
        assert type(typed) is CLASSES[EventType(ev.type)]
        assert canonical_json(typed.as_data()) == ev.data_json, ev
        again = typed.at(ev.ts)
        assert (again.type, again.encode(), again.ts) == (ev.type, ev.data_json, ev.ts)


def test_events_the_writers_make_name_every_key_they_store() -> None:
    # Apart from the hand-made minimal histories, and an activity's options (its spec,
    # written as given), every stored key is a field of its class.
    for h in HISTORIES:
        for ev in _events(h):
            typed = parse_event(ev)
            if ev.type != EventType.ACTIVITY_SCHEDULED:
                assert not typed.extra, (ev, typed.extra)


def test_a_history_that_lacks_keys_reads_with_defaults() -> None:
    started = parse_event(Event(1, "RunStarted", {"workflow": "wf"}, 1.0, "h"))
    assert started.as_data() == {"workflow": "wf"}
    assert {"version", "input", "started_by"} <= started.absent
    marker = parse_event(Event(2, "MarkerRecorded", {"kind": "uuid", "step": "1"}, 1.0, "h"))
    assert marker.value is UNSET
    assert marker.as_data() == {"kind": "uuid", "step": "1"}


def test_every_event_type_has_its_class() -> None:
    assert sorted(CLASSES) == sorted(EventType)
    for type_, cls in CLASSES.items():
        assert cls.TYPE is type_
    commands = {t for t, cls in CLASSES.items() if issubclass(cls, Command)}
    assert commands == COMMAND_EVENTS


def test_every_event_type_is_in_the_fixture() -> None:
    seen = {e["type"] for h in HISTORIES for e in h["events"]}
    missing = sorted(t.value for t in EventType if t.value not in seen and t not in NOT_REACHABLE)
    assert missing == [], f"event types missing from {FIXTURE.name}: {missing}"
    assert not set(NOT_REACHABLE) & seen, "an event type listed as not reachable is in the fixture"


def test_canonical_json_is_stable() -> None:
    assert canonical_json({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'
