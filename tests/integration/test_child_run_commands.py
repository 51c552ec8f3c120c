"""Operator commands on runs with child runs, on both stores: migrating a definition run
waiting at a `call` step is refused with the step and the reason, nothing written; a
fork never shares its source's children (decision 0019, "Fork and migrate")."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.definitions import waits_then_succeeds
from waypost.model.events import EventType

pytestmark = pytest.mark.timeout(120)

QUOTE = """
name: quote
start: hold
steps:
  hold:
    type: wait
    signal: priced
    output: $.price
    next: done
  done:
    type: succeed
    output: price
"""

ORDER = """
name: order
start: price_it
steps:
  price_it:
    type: call
    definition: quote
    input: {amount: amount}
    output: $.price
    next: confirm
""" + waits_then_succeeds(("confirm", "confirmed"))


def test_a_run_waiting_at_a_call_step_is_not_migrated_and_says_why(make_engine: Any) -> None:
    engine = make_engine()
    engine.publish(QUOTE)
    engine.publish(ORDER)
    engine.publish(ORDER.replace("type: succeed", "type: succeed\n    output: price"))
    with engine.running():
        run = engine.start("order", {"amount": 5}, version=1)
        eventually(lambda: engine.get(run.run_id).children, "the child run")
        child = engine.get(run.run_id).children[0]["run_id"]
        for dry_run in (True, False):
            report = engine.migrate(run.run_id, 2, reason="new output", dry_run=dry_run)
            assert not report.compatible and not report.migrated
            assert report.from_step == "price_it"
            (reason,) = report.reasons
            assert "call step 'price_it'" in reason and repr(child) in reason
            assert "start the child again" in reason
        # nothing written: same version, no RunMigrated, the child still the run's
        assert engine.get(run.run_id).version == "1"
        assert EventType.RUN_MIGRATED not in [e.type for e in engine.history(run.run_id)]
        # Once the child has ended and the run waits at a wait step, the move is allowed.
        engine.signal(child, "priced", 12)
        eventually(
            lambda: any(w.get("kind") == "signal" for w in engine.get(run.run_id).waiting_for),
            "the confirm step",
        )
        moved = engine.migrate(run.run_id, 2, reason="new output")
        assert moved.migrated, moved.reasons
        engine.signal(run.run_id, "confirmed", {})
        assert engine.result(run.run_id, timeout=30) == 12
        assert [c["run_id"] for c in engine.get(run.run_id).children] == [child]


@wp.workflow(name="cr_child")
async def child_flow(ctx: wp.WorkflowContext, label: str) -> str:
    await ctx.wait_signal("go")
    return f"child {label}"


@wp.workflow(name="cr_parent")
async def parent_flow(ctx: wp.WorkflowContext, label: str) -> list[str]:
    got = await ctx.child(child_flow, label)
    later = await ctx.wait_signal("more")
    return [got, later]


def test_a_fork_never_shares_its_sources_child(make_engine: Any) -> None:
    engine = make_engine(child_flow, parent_flow)
    label = uuid.uuid4().hex[:8]
    with engine.running():
        source = engine.start(parent_flow, label)
        eventually(lambda: engine.get(source.run_id).children, "the child run")
        child = engine.get(source.run_id).children[0]["run_id"]
        # While the child runs, a fork would run its work twice: refused, nothing made.
        with pytest.raises(wp.InvalidState, match=f"child run '{child}'") as busy:
            engine.fork(source.run_id, reason="redo")
        assert "would run in both" in str(busy.value)
        assert len(engine.list_runs()) == 2
        engine.signal(child, "go", None)
        eventually(
            lambda: any(w.get("kind") == "signal" for w in engine.get(source.run_id).waiting_for),
            "the source's next wait",
        )
        # A cut past the child's start is refused: nothing from it on is copied.
        last = engine.history(source.run_id)[-1].seq
        with pytest.raises(wp.InvalidRequest, match="a child run"):
            engine.fork(source.run_id, reason="redo", up_to_seq=last)
        # Without a cut, the fork stops before the child and starts its own.
        forked = engine.fork(source.run_id, reason="redo", new_run_id=f"fork-{label}")
        eventually(lambda: engine.get(forked.run_id).children, "the fork's child")
        (own,) = engine.get(forked.run_id).children
        assert own["run_id"] != child and own["run_id"].startswith(forked.run_id)
        assert [c["run_id"] for c in engine.get(source.run_id).children] == [child]
        assert engine.get(child).status == "completed"
        engine.signal(own["run_id"], "go", None)
        engine.signal(forked.run_id, "more", "f")
        engine.signal(source.run_id, "more", "s")
        assert engine.result(forked.run_id, timeout=30) == [f"child {label}", "f"]
        assert engine.result(source.run_id, timeout=30) == [f"child {label}", "s"]
