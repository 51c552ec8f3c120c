"""History events: canonical JSON and the hash chain that makes a history tamper-evident."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, strategies as st

from waypost.model.chain import PLAIN, plain_genesis, plain_hash as chain_hash, seal, verify_chain
from waypost.model.events import (
    COMMAND_EVENTS,
    TERMINAL_EVENTS,
    ChainProblem,
    Event,
    EventType,
    NewEvent,
    canonical_json,
    feeds_code,
)

# -- helpers ------------------------------------------------------------------

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)


RUN = ("acme", "r-1")


def history(n: int = 6) -> list[Event]:
    """A sealed history of `n` events with varied data."""
    events = [
        NewEvent(EventType.RUN_STARTED, {"workflow": "w", "version": "1", "input": {"x": 1}}, 10.0)
    ]
    for i in range(1, n):
        if i % 2:
            events.append(
                NewEvent(
                    EventType.ACTIVITY_SCHEDULED,
                    {"step": str(i), "activity": "a", "args": [i], "cause": i},
                    10.0 + i,
                )
            )
        else:
            events.append(
                NewEvent(EventType.ACTIVITY_COMPLETED, {"step": str(i - 1), "result": i}, 10.0 + i)
            )
    return PLAIN.begin(*RUN, events)


def renumbered(events: list[Event]) -> list[Event]:
    """The same events with seq rewritten to 1..n (what a careful forger would do)."""
    return [dataclasses.replace(ev, seq=i) for i, ev in enumerate(events, start=1)]


# -- canonical JSON -----------------------------------------------------------


def test_canonical_json_sorts_keys_at_every_level_and_has_no_spaces() -> None:
    value = {"b": 1, "a": {"z": [1, {"y": 2, "x": 3}], "c": None}, "ä": "ü"}
    assert canonical_json(value) == '{"a":{"c":null,"z":[1,{"x":3,"y":2}]},"b":1,"ä":"ü"}'


def test_canonical_json_keeps_non_ascii_text_as_is() -> None:
    assert canonical_json({"name": "Zoë ✓"}) == '{"name":"Zoë ✓"}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_canonical_json_refuses_nan_and_infinity(bad: float) -> None:
    with pytest.raises(ValueError, match="JSON"):
        canonical_json({"x": [bad]})


@given(JSON_VALUES)
def test_canonical_json_is_stable_through_a_parse(value: Any) -> None:
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text
    assert json.loads(text) == value


@given(st.dictionaries(st.text(max_size=8), JSON_SCALARS, min_size=2, max_size=8))
def test_canonical_json_does_not_depend_on_key_insertion_order(value: dict[str, Any]) -> None:
    reversed_order = dict(reversed(list(value.items())))
    assert canonical_json(reversed_order) == canonical_json(value)


def test_new_event_encodes_its_data_canonically() -> None:
    ev = NewEvent(EventType.SIGNAL_RECEIVED, {"payload": {"b": 2, "a": 1}, "name": "go"}, 1.5)
    assert ev.encode() == '{"name":"go","payload":{"a":1,"b":2}}'


# -- event types ----------------------------------------------------------------


def test_event_types_are_their_stored_strings() -> None:
    assert EventType.RUN_STARTED == "RunStarted"
    assert EventType("ActivityScheduled") is EventType.ACTIVITY_SCHEDULED
    commands = {
        EventType.ACTIVITY_SCHEDULED,
        EventType.ACTIVITY_CANCEL_REQUESTED,
        EventType.TIMER_STARTED,
        EventType.TIMER_CANCELLED,
        EventType.MARKER_RECORDED,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_CLOSED,
        EventType.APPROVAL_ESCALATED,
        EventType.CORRELATION_REGISTERED,
        EventType.CORRELATION_WITHDRAWN,
        EventType.CHILD_STARTED,
        EventType.UPDATE_COMPLETED,  # the end of an update's handler, at step u<seq>
    }
    assert commands == COMMAND_EVENTS
    terminal = {
        EventType.RUN_COMPLETED,
        EventType.RUN_FAILED,
        EventType.RUN_CANCELLED,
        EventType.RUN_TERMINATED,
        EventType.RUN_CONTINUED_AS_NEW,  # ends a generation: its history ends there
    }
    assert terminal == TERMINAL_EVENTS
    assert not COMMAND_EVENTS & TERMINAL_EVENTS


def test_event_time_is_utc() -> None:
    (ev,) = seal(0, "", [NewEvent(EventType.RUN_STARTED, {}, 1_700_000_000.25)])
    assert ev.time == datetime(2023, 11, 14, 22, 13, 20, 250000, tzinfo=UTC)
    assert "seq=1" in repr(ev)
    assert "RunStarted" in repr(ev)


# -- sealing ----------------------------------------------------------------------


def test_seal_numbers_events_and_chains_each_hash_to_the_one_before() -> None:
    events = history(5)
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    prev = plain_genesis(*RUN)  # the first event chains to its run's genesis
    for ev in events:
        assert ev.data_json == canonical_json(ev.data)
        assert ev.hash == chain_hash(prev, ev.seq, ev.type, ev.ts, ev.data_json)
        assert len(ev.hash) == 64
        prev = ev.hash
    assert len({e.hash for e in events}) == 5


def test_seal_continues_an_existing_chain() -> None:
    first = history(3)
    more = seal(
        first[-1].seq,
        first[-1].hash,
        [NewEvent(EventType.TIMER_STARTED, {"step": "9", "fire_at": 99.0}, 20.0)],
    )
    assert more[0].seq == 4
    assert verify_chain(first + more, run=RUN) == []
    # The same event after a different predecessor gets a different hash.
    other = seal(3, "0" * 64, [NewEvent(EventType.TIMER_STARTED, {"step": "9"}, 20.0)])
    assert other[0].hash != more[0].hash


def test_chain_hash_covers_every_field() -> None:
    base = chain_hash("p", 1, "RunStarted", 1.0, "{}")
    assert chain_hash("p", 1, "RunStarted", 1.0, "{}") == base
    assert chain_hash("q", 1, "RunStarted", 1.0, "{}") != base
    assert chain_hash("p", 2, "RunStarted", 1.0, "{}") != base
    assert chain_hash("p", 1, "RunFailed", 1.0, "{}") != base
    assert chain_hash("p", 1, "RunStarted", 1.0000001, "{}") != base
    assert chain_hash("p", 1, "RunStarted", 1.0, '{"a":1}') != base
    # Field boundaries are unambiguous: moving a digit between seq and type changes the hash.
    assert chain_hash("p", 11, "RunStarted", 1.0, "{}") != chain_hash(
        "p", 1, "1RunStarted", 1.0, "{}"
    )


# -- verifying ----------------------------------------------------------------------


def test_an_intact_history_verifies() -> None:
    assert verify_chain(history(8), run=RUN) == []
    assert verify_chain([], run=RUN) == []


def test_verify_finds_an_edited_data_text() -> None:
    events = history(6)
    ev = events[3]
    forged = ev.data_json.replace('"args":[3]', '"args":[3000]')
    assert forged != ev.data_json
    events[3] = dataclasses.replace(ev, data_json=forged, data=json.loads(forged))
    problems = verify_chain(events, run=RUN)
    assert problems == [ChainProblem(4, "hash does not match the event and its predecessor")]


def test_verify_finds_edited_data_when_no_text_is_kept() -> None:
    events = [dataclasses.replace(e, data_json="") for e in history(4)]
    assert verify_chain(events, run=RUN) == []
    events[1] = dataclasses.replace(events[1], data={**events[1].data, "activity": "other"})
    assert [p.seq for p in verify_chain(events, run=RUN)] == [2]


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param({"type": EventType.ACTIVITY_FAILED}, id="type"),
        pytest.param({"ts": 11.5}, id="time"),
    ],
)
def test_verify_finds_an_edited_type_or_time(edit: dict[str, Any]) -> None:
    events = history(5)
    events[1] = dataclasses.replace(events[1], **edit)
    assert [p.seq for p in verify_chain(events, run=RUN)] == [2]


def test_an_edit_with_a_recomputed_hash_breaks_the_next_event() -> None:
    events = history(6)
    ev = events[1]
    text = ev.data_json.replace('"args":[1]', '"args":[7]')
    assert text != ev.data_json
    new_hash = chain_hash(events[0].hash, ev.seq, ev.type, ev.ts, text)
    events[1] = dataclasses.replace(ev, data_json=text, hash=new_hash)
    problems = verify_chain(events, run=RUN)
    assert [p.seq for p in problems] == [3]


def test_verify_finds_a_removed_event() -> None:
    events = history(6)
    del events[3]
    problems = verify_chain(events, run=RUN)
    assert problems == [ChainProblem(5, "expected event 4, found 5")]


def test_verify_finds_a_removed_event_even_when_the_rest_is_renumbered() -> None:
    events = history(6)
    del events[3]
    problems = verify_chain(renumbered(events), run=RUN)
    assert problems
    assert problems[0].seq == 4
    assert "hash does not match" in problems[0].problem


def test_verify_finds_a_removed_first_event() -> None:
    events = history(4)[1:]
    assert verify_chain(events, run=RUN)[0].seq == 2
    assert verify_chain(renumbered(events), run=RUN)[0].seq == 1


def test_verify_finds_swapped_events() -> None:
    events = history(6)
    events[2], events[3] = events[3], events[2]
    problems = verify_chain(events, run=RUN)
    assert problems
    assert problems[0] == ChainProblem(4, "expected event 3, found 4")


def test_verify_finds_swapped_events_even_when_renumbered() -> None:
    events = history(6)
    events[2], events[3] = events[3], events[2]
    problems = verify_chain(renumbered(events), run=RUN)
    assert [p.seq for p in problems][:2] == [3, 4]


def test_verify_finds_a_duplicated_event() -> None:
    events = history(4)
    events.insert(2, events[1])
    problems = verify_chain(events, run=RUN)
    assert problems == [ChainProblem(2, "expected event 3, found 2")]


@given(st.lists(JSON_VALUES, min_size=1, max_size=6), st.data())
def test_any_single_data_edit_is_found(payloads: list[Any], data: st.DataObject) -> None:
    events = PLAIN.begin(
        *RUN,
        [
            NewEvent(EventType.SIGNAL_RECEIVED, {"name": "s", "payload": p}, float(i))
            for i, p in enumerate(payloads)
        ],
    )
    assert verify_chain(events, run=RUN) == []
    i = data.draw(st.integers(min_value=0, max_value=len(events) - 1))
    replacement = data.draw(JSON_VALUES)
    new_data = {"name": "s", "payload": replacement}
    text = canonical_json(new_data)
    events[i] = dataclasses.replace(events[i], data=new_data, data_json=text)
    if text == canonical_json({"name": "s", "payload": payloads[i]}):
        assert verify_chain(events, run=RUN) == []
    else:
        assert [p.seq for p in verify_chain(events, run=RUN)] == [i + 1]


def test_what_feeds_the_workflow_code() -> None:
    def ev(type_: EventType, **data: object) -> Event:
        return Event(1, type_, dict(data), 0.0, "")

    assert feeds_code(ev(EventType.SIGNAL_RECEIVED, name="go"))
    assert feeds_code(ev(EventType.RUN_MIGRATED, to_version=2))
    assert feeds_code(ev(EventType.APPROVAL_DECIDED, outcome="approved"))
    assert feeds_code(ev(EventType.APPROVAL_DECIDED, outcome="rejected"))
    assert not feeds_code(ev(EventType.APPROVAL_DECIDED, outcome="pending"))  # one vote of two
    assert not feeds_code(ev(EventType.ACTIVITY_SCHEDULED, step="1"))  # the code's own command
    assert not feeds_code(ev(EventType.LATE_RESULT_IGNORED, step="1"))  # an audit fact


@pytest.mark.parametrize(
    "value",
    [
        {"text": "a\ud800b"},  # a lone high surrogate (a surrogateescape'd byte, say)
        {"k\udc80": ["\udfff", "é", "\u2028"]},  # in a key, low, beside real characters
        {"pair": "\ud83d\ude00"[:1]},
    ],
)
def test_a_lone_surrogate_is_written_as_an_escape_that_reads_back_the_same(value: Any) -> None:
    text = canonical_json(value)
    assert text.encode("utf-8")  # storable and hashable: it would raise otherwise
    assert json.loads(text) == value


def test_text_without_surrogates_is_unchanged_by_the_escape() -> None:
    value = {"a": "é😀\u2028\\ud800", "b": "\x00\x1b"}
    assert canonical_json(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
