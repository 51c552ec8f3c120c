"""Segregation of duties holds for every run started on someone's behalf, on both stores.

Whoever started a run may not decide its approvals. A run is started on someone's behalf
by a child step (its parent's starter), a schedule (its creator), a backfill (whoever ran
it), a fork (the forking operator), a start or signal-with-start (whoever authenticated,
or the person a local caller names). Each test starts a run one of these ways and shows
that the person it was started for is refused while another approver is not. A run whose
starter nobody knows (stored before starts recorded one) fails closed: nobody may decide,
unless its policy says explicitly that an unknown starter is allowed.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_write, eventually
from tests.helpers.approvals import issue_credential, pending_approval
from waypost.model import operations as ops, schedules as sch
from waypost.model.approvals import UNKNOWN_STARTER
from waypost.model.identity import Principal, Role
from waypost.testing import TestClock

pytestmark = pytest.mark.timeout(120)

APPROVERS = ["ann", "olga", "otto", "sam", "fred"]


@wp.workflow(name="ini_ask")
async def ask(ctx: wp.WorkflowContext, req: Any = None) -> str:
    decision = await ctx.approval("ok", approvers=wp.AnyOf(users=APPROVERS))
    return decision.outcome


@wp.workflow(name="ini_ask_lenient")
async def ask_lenient(ctx: wp.WorkflowContext, req: Any = None) -> str:
    policy = wp.AnyOf(users=APPROVERS, allow_unknown_starter=True)
    decision = await ctx.approval("ok", approvers=policy)
    return decision.outcome


@wp.workflow(name="ini_parent")
async def parent(ctx: wp.WorkflowContext, req: Any = None) -> str:
    return str(await ctx.child(ask, req))


@wp.workflow(name="ini_signalled")
async def signalled(ctx: wp.WorkflowContext, req: Any = None) -> str:
    await ctx.wait_signal("go")
    decision = await ctx.approval("ok", approvers=wp.AnyOf(users=APPROVERS))
    return decision.outcome


CALLEE = """
name: ini_callee
start: ask
steps:
  ask:
    type: approval
    approvers: {users: [ann, olga]}
    next: done
  done:
    type: succeed
"""

CALLER = """
name: ini_caller
start: call
steps:
  call:
    type: call
    definition: ini_callee
    next: done
  done:
    type: succeed
"""


def person(name: str, *roles: Role) -> Principal:
    return Principal("default", name, frozenset(roles))


def decide(engine: wp.Engine, approval_id: str, who: str) -> Any:
    """`who` decides as itself, signed in with its own key (no approval link)."""
    request = ops.Decide(approval_id=approval_id, decision="approve")
    return engine.execute(request, person(who, Role.APPROVER))


def refused_as_starter(engine: wp.Engine, approval_id: str, who: str) -> None:
    with pytest.raises(wp.DecisionRefused, match=f"{who} started this run"):
        decide(engine, approval_id, who)


def started_for(starter: str, engine: wp.Engine, run_id: str, decider: str) -> None:
    """The run was started for `starter`, who may not decide its approval; `decider` may."""
    approval = pending_approval(engine, run_id)
    assert engine.history(run_id)[0].data["started_by"] == starter
    refused_as_starter(engine, approval.approval_id, starter)
    assert decide(engine, approval.approval_id, decider).outcome == "approved"


def test_a_child_run_is_started_for_its_parents_starter(make_engine: Any) -> None:
    engine = make_engine(parent, ask)
    with engine.running():
        run_id = engine.execute(ops.Start(workflow="ini_parent"), person("Olga", Role.STARTER))
        child_id = f"{run_id}-1"
        approval = pending_approval(engine, child_id)
        assert engine.history(child_id)[0].data["started_by"] == "olga"
        assert approval.started_by == "olga"
        # The parent's starter may not approve the child's request for them.
        refused_as_starter(engine, approval.approval_id, "olga")
        assert decide(engine, approval.approval_id, "ann").outcome == "approved"
        assert engine.result(run_id, timeout=30) == "approved"


def test_a_definitions_call_step_starts_its_child_for_the_parents_starter(
    make_engine: Any,
) -> None:
    engine = make_engine()
    engine.publish(CALLEE)
    engine.publish(CALLER)
    with engine.running():
        run_id = engine.execute(ops.Start(workflow="ini_caller"), person("olga", Role.STARTER))
        children = eventually(lambda: engine.get(run_id).children, "the child run")
        child_id = children[0]["run_id"]
        approval = pending_approval(engine, child_id)
        assert approval.started_by == "olga"
        refused_as_starter(engine, approval.approval_id, "olga")
        assert decide(engine, approval.approval_id, "ann").outcome == "approved"
        eventually(lambda: engine.get(run_id).status == "completed", "the caller completes")


def test_a_scheduled_run_is_started_for_the_schedules_creator(make_engine: Any) -> None:
    clock = TestClock(start=1_780_000_000.0)
    engine = make_engine(ask, clock=clock)
    sid = f"ini-{uuid.uuid4().hex[:6]}"
    olga = person("Olga", Role.OPERATOR)
    created = engine.execute(
        sch.CreateSchedule(schedule_id=sid, workflow="ini_ask", every=3600.0), olga
    )
    assert created.created_by == "Olga" and created.changed_by is None
    # Someone else pausing and resuming it is recorded; the runs stay olga's.
    otto = person("otto", Role.OPERATOR)
    paused = engine.execute(sch.PauseSchedule(schedule_id=sid), otto)
    assert paused.changed_by == "otto" and (paused.changed_at or 0) >= created.created_at
    resumed = engine.execute(sch.ResumeSchedule(schedule_id=sid), otto)
    assert resumed.changed_by == "otto" and not resumed.paused
    assert engine.describe_schedule(sid).changed_by == "otto"
    with engine.running():
        fire_at = resumed.next_fire_at
        assert fire_at is not None
        clock.jump(fire_at + 1 - clock())
        run_id = sch.fire_run_id(sid, fire_at)
        started_for("olga", engine, run_id, decider="otto")


def test_a_backfilled_run_is_started_for_whoever_ran_the_backfill(make_engine: Any) -> None:
    engine = make_engine(ask)
    sid = f"ini-{uuid.uuid4().hex[:6]}"
    engine.execute(
        sch.CreateSchedule(schedule_id=sid, workflow="ini_ask", every=3600.0),
        person("olga", Role.OPERATOR),
    )
    start = 1_700_000_000.0 - 1_700_000_000.0 % 3600
    with engine.running():
        done = engine.execute(
            sch.BackfillSchedule(schedule_id=sid, start=start, end=start),
            person("Otto", Role.OPERATOR),
        )
        run_id = done.fires[0][1]
        assert run_id is not None
        started_for("otto", engine, run_id, decider="olga")


def test_a_fork_is_started_for_the_forking_operator(make_engine: Any) -> None:
    engine = make_engine(signalled)
    with engine.running():
        source = engine.execute(ops.Start(workflow="ini_signalled"), person("sam", Role.STARTER))
        eventually(lambda: engine.get(source).status == "waiting", "the source waits")
        forked = engine.execute(
            ops.Fork(run_id=source, reason="redo it", new_run_id=f"{source}-fork"),
            person("Fred", Role.OPERATOR),
        )
        started = engine.history(forked.run_id)[0].data
        assert started["started_by"] == "fred" and started["forked_from"]["by"] == "Fred"
        engine.signal(forked.run_id, "go")
        approval = pending_approval(engine, forked.run_id)
        refused_as_starter(engine, approval.approval_id, "fred")
        # The source's starter did not start the fork: they may decide it.
        assert decide(engine, approval.approval_id, "sam").outcome == "approved"
        assert engine.result(forked.run_id, timeout=30) == "approved"


def test_starts_that_name_nobody_record_whoever_authenticated(make_engine: Any) -> None:
    engine = make_engine(signalled)
    with engine.running():
        by_key = engine.execute(
            ops.SignalWithStart(workflow="ini_signalled", input=None, run_id="sws-1", signal="go"),
            person("Sam", Role.STARTER),
        )
        assert engine.history(by_key.run_id)[0].data["started_by"] == "sam"
        approval = pending_approval(engine, by_key.run_id)
        refused_as_starter(engine, approval.approval_id, "sam")
        # The embedded API naming nobody starts the run as its own principal (the OS user).
        local = engine.aio.local("default")
        run = engine.start(signalled, run_id="local-1")
        assert engine.history(run.run_id)[0].data["started_by"] == local.subject.casefold()
        # ... and naming someone starts it for them.
        named = engine.start(signalled, run_id="local-2", started_by="Ann")
        assert engine.history(named.run_id)[0].data["started_by"] == "ann"


def test_an_approval_whose_starter_nobody_knows_refuses_every_decision(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(ask, ask_lenient)
    with engine.running():
        strict = engine.start(ask, run_id="legacy-strict")
        lenient = engine.start(ask_lenient, run_id="legacy-lenient")
        strict_ap = pending_approval(engine, strict.run_id)
        lenient_ap = pending_approval(engine, lenient.run_id)
        # As an approval stored before every start recorded its starter (and before rows
        # carried a check, which a plain chain accepts).
        db_write(db_url, "UPDATE approvals SET started_by = NULL, mac = NULL")  # and no check
        assert engine.approval(strict_ap.approval_id).started_by is None
        for who in APPROVERS:
            with pytest.raises(wp.DecisionRefused, match="nobody knows who started this run"):
                decide(engine, strict_ap.approval_id, who)
        # Nobody is offered it either.
        assert [a.approval_id for a in engine.approvals("ann")] == [lenient_ap.approval_id]
        refused = engine.approval(strict_ap.approval_id).refusals
        assert {r["reason"] for r in refused} == {UNKNOWN_STARTER}
        assert engine.approval(strict_ap.approval_id).status == "pending"
        # A policy that says so explicitly (recorded in the history) lets its approvers decide.
        requested = engine.history(lenient.run_id)[1].data
        assert requested["policy"]["allow_unknown_starter"] is True
        assert decide(engine, lenient_ap.approval_id, "ann").outcome == "approved"
        assert engine.result(lenient.run_id, timeout=30) == "approved"
        # ... and each decision it let through says so in the history.
        decided = [e.data for e in engine.history(lenient.run_id) if e.type == "ApprovalDecided"]
        assert [d.get("starter_unknown") for d in decided] == [True]


@pytest.mark.parametrize("path", ["credential", "signed in"])
def test_a_starter_listed_by_name_may_not_approve_their_own_run(
    make_engine: Any, tmp_path: Any, path: str
) -> None:
    from tests.helpers.mail import Mailbox
    from waypost.features.senders import FileSender

    mailbox = Mailbox(tmp_path / "notes.jsonl")
    engine = make_engine(ask, notifier=FileSender(mailbox.path))
    with engine.running():
        run = engine.start(ask, started_by="sam")  # sam is one of the users AnyOf lists
        approval = pending_approval(engine, run.run_id)
        mailbox.wait(approval.approval_id, "ann")
        assert not [n for n in mailbox.all() if n["approver"] == "sam"]  # never asked
        assert engine.approvals("sam") == []
        if path == "signed in":
            refused_as_starter(engine, approval.approval_id, "sam")
        else:
            # Even holding a credential of her own (issued before she was known as the
            # starter, say), sam may not decide.
            token = issue_credential(engine, approval.approval_id, "sam")
            with pytest.raises(wp.DecisionRefused, match="sam started this run"):
                engine.decide(approval.approval_id, token, "sam", "approve")
        assert engine.approval(approval.approval_id).votes == []
        assert decide(engine, approval.approval_id, "ann").outcome == "approved"
