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
from waypost.model.events import Event, EventType, canonical_json

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


def test_every_event_type_is_in_the_fixture() -> None:
    seen = {e["type"] for h in HISTORIES for e in h["events"]}
    missing = sorted(t.value for t in EventType if t.value not in seen and t not in NOT_REACHABLE)
    assert missing == [], f"event types missing from {FIXTURE.name}: {missing}"
    assert not set(NOT_REACHABLE) & seen, "an event type listed as not reachable is in the fixture"


def test_canonical_json_is_stable() -> None:
    assert canonical_json({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'
