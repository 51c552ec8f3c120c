"""Who the console's History names for each event: the principal that acted (an
approver with her decision, the sender of a signal), never "engine" for a person."""

from __future__ import annotations

from waypost.model.events import Event
from waypost.server.console.history import story


def _ev(seq: int, type_: str, **data: object) -> Event:
    return Event(seq, type_, dict(data), 1_700_000_000.0 + seq, "")


DECIDED = {"step": "2", "approval_id": "a1", "decision": "approve", "outcome": "approved"}


def test_history_names_the_approver_and_the_signals_sender() -> None:
    events = [
        _ev(1, "RunStarted", workflow="po", version="1", started_by="rita"),
        _ev(2, "SignalReceived", name="goods", payload={"n": 1}, by="ops-bot"),
        _ev(3, "SignalReceived", name="goods", payload={"n": 2}),  # sent before `by`
        _ev(4, "ApprovalDecided", **{"principal": "mia", "comment": "fine", **DECIDED}),
    ]
    actors = [row.actor for row in story(events).rows]
    assert actors == ["rita", "ops-bot", "sender", "mia"]
