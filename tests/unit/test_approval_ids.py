"""Approval ids, without a database: random when asked, the recorded one on replay.

A new approval's id is 128 random bits, so nobody can work it out from its tenant, run
and step (as they could when it was their hash). Replay never makes one: it takes the
id recorded in the history, so runs whose approvals were recorded with the old derived
ids replay as before, and the id the code uses (to close an approval on expiry or
cancellation, in the `Decision`) is the recorded one.
"""

from __future__ import annotations

from typing import Any

import waypost as wp
from tests.helpers.runtime import Driver
from waypost.model import approvals as ap
from waypost.model.chain import seal
from waypost.model.events import Event, EventType, NewEvent

E = EventType


@wp.workflow(name="ids_ask")
async def ask(ctx: wp.WorkflowContext) -> dict[str, Any]:
    decision = await ctx.approval("ok", approvers=wp.AnyOf(users=["ann"]), expires_in=60)
    return {"outcome": decision.outcome, "approval_id": decision.approval_id}


def requested(history: list[Event]) -> Event:
    return next(e for e in history if e.type == E.APPROVAL_REQUESTED)


def test_a_new_approvals_id_is_random_not_derived_from_its_run_and_step() -> None:
    ids = set()
    for _ in range(3):
        d = Driver(ask)
        d.start()
        ev = requested(d.history)
        ids.add(ev.data["approval_id"])
        assert ev.data["approval_id"] != ap.approval_id_for("t1", "run-1", ev.data["step"])
    assert len(ids) == 3  # the same tenant, run and step: three different ids
    assert all(i.startswith("ap_") and len(i) == 35 for i in ids)


def test_replay_takes_the_recorded_id_even_one_derived_the_old_way() -> None:
    d = Driver(ask)
    d.start()
    step = requested(d.history).data["step"]
    legacy = ap.approval_id_for("t1", "run-1", step)
    # The same history as a version that derived ids would have recorded it.
    old = [
        NewEvent(
            e.type,
            {**e.data, "approval_id": legacy} if e.type == E.APPROVAL_REQUESTED else e.data,
            e.ts,
        )
        for e in d.history
    ]
    again = Driver.replayed(ask, history=seal(0, "", old))
    assert again.new_commands == []  # nothing issued again, no other id
    timer = next(e for e in again.history if e.type == E.TIMER_STARTED)
    closed = again.fire(timer.data["step"])
    assert (closed[0].type, closed[0].data["approval_id"]) == (E.APPROVAL_CLOSED, legacy)
    assert again.result() == {"outcome": "expired", "approval_id": legacy}


def test_replay_of_a_random_id_keeps_it() -> None:
    d = Driver(ask)
    d.start()
    recorded = requested(d.history).data["approval_id"]
    again = Driver.replayed(ask, history=d.history)
    assert again.new_commands == []
    again.feed(
        E.APPROVAL_DECIDED,
        step=requested(d.history).data["step"],
        approval_id=recorded,
        principal="ann",
        decision="approve",
        outcome="approved",
        votes=[{"principal": "ann", "decision": "approve"}],
    )
    assert again.result() == {"outcome": "approved", "approval_id": recorded}
