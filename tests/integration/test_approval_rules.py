"""Human approval: the rules hold on every path, on both stores.

Each test is an attack: a way the rules of an approval could be bent (a vote
counted against the wrong electorate, an escalation that asks for fewer
people, a credential that outlives its holder's membership or its expiry, a
history grown by anyone holding a made-up token, a log line forged, bad text,
an identity declared rather than taken from the caller).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

import waypost as wp
from tests.helpers import approvals, db_query, eventually, of_type
from tests.helpers.approvals import approve_as_itself, pending_approval, purchase, refusals
from tests.helpers.mail import Mailbox
from waypost.features.senders import FileSender, LogSender
from waypost.model import approvals as ap_model, operations as ops
from waypost.model.identity import Principal, Role
from waypost.store.base import DecideRequest, NewCredential

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="lenient_board")
async def lenient_board(ctx: wp.WorkflowContext) -> dict[str, Any]:
    decision = await ctx.approval(
        "board", approvers=wp.Quorum(2, group="board", veto=False), expires_in=3600
    )
    return {"outcome": decision.outcome, "by": sorted(decision.decided_by)}


@wp.workflow(name="cosign")
async def cosign(ctx: wp.WorkflowContext) -> dict[str, Any]:
    decision = await ctx.approval(
        "cosign",
        approvers=wp.AllOf(["ann", "bob"]),
        escalate_to="directors",
        escalate_after=0.2,
        expires_in=3600,
    )
    return {"outcome": decision.outcome, "by": sorted(decision.decided_by)}


@pytest.fixture
def engine(make_engine: Any, mailbox: Mailbox) -> Any:
    with approvals.managers_engine(make_engine, mailbox) as eng:
        yield eng


class Board:
    """A host application's directory, changed by the test as people come and go."""

    def __init__(self, members: list[str]) -> None:
        self.groups = {"board": members}

    async def members(self, tenant: str, group: str) -> list[str]:
        return list(self.groups.get(group, []))


def credential_statuses(engine: Any, approval_id: str, approver: str) -> list[str]:
    return approvals.approver_credentials(
        engine, approval_id, approver, "created_at, credential_id"
    )


# == 1. without a veto, eligibility is counted once, in the deciding transaction ========
@pytest.mark.parametrize("directory", ["built-in", "host"])
def test_without_veto_a_rejecter_who_left_is_not_subtracted_twice(
    make_engine: Any, mailbox: Mailbox, directory: str
) -> None:
    board = Board(["ann", "bob", "cid"])
    options: dict[str, Any] = {"notifier": FileSender(mailbox.path)}
    if directory == "host":
        options["directory"] = board
    eng = make_engine(lenient_board, **options)
    eng.add_to_group("board", ["ann", "bob", "cid"])
    with eng.running():
        run = eng.start(lenient_board)
        aid = pending_approval(eng, run.run_id).approval_id
        notes = {who: mailbox.wait(aid, who) for who in ("ann", "bob", "cid")}
        assert eng.decide(aid, notes["ann"]["reject_token"], "ann", "reject", "no").outcome == (
            "pending"
        )
        # Ann leaves the board. Her rejection stays counted, once: bob and cid can
        # still make the two approvals needed.
        eng.remove_from_group("board", ["ann"])
        board.groups["board"] = ["bob", "cid"]
        bob = eng.decide(aid, notes["bob"]["approve_token"], "bob", "approve")
        assert bob.outcome == "pending"
        cid = eng.decide(aid, notes["cid"]["approve_token"], "cid", "approve")
        assert cid.outcome == "approved"
        assert eng.result(run.run_id, timeout=10) == {
            "outcome": "approved",
            "by": ["ann", "bob", "cid"],
        }


@pytest.mark.parametrize("directory", ["built-in", "host"])
def test_without_veto_rejected_once_those_who_may_still_vote_cannot_reach_the_count(
    make_engine: Any, mailbox: Mailbox, directory: str
) -> None:
    board = Board(["ann", "bob", "cid", "dan"])
    options: dict[str, Any] = {"notifier": FileSender(mailbox.path)}
    if directory == "host":
        options["directory"] = board
    eng = make_engine(lenient_board, **options)
    eng.add_to_group("board", ["ann", "bob", "cid", "dan"])
    with eng.running():
        run = eng.start(lenient_board)
        aid = pending_approval(eng, run.run_id).approval_id
        notes = {who: mailbox.wait(aid, who) for who in ("ann", "bob", "cid", "dan")}
        eng.decide(aid, notes["ann"]["approve_token"], "ann", "approve")
        eng.remove_from_group("board", ["dan"])  # dan may no longer vote
        board.groups["board"] = ["ann", "bob", "cid"]
        assert eng.decide(aid, notes["bob"]["reject_token"], "bob", "reject").outcome == "pending"
        # One approval, and only cid left to vote: two are still reachable until cid rejects.
        assert eng.decide(aid, notes["cid"]["reject_token"], "cid", "reject").outcome == (
            "rejected"
        )
        assert eng.result(run.run_id, timeout=10)["outcome"] == "rejected"


def test_the_deciding_transaction_checks_who_may_decide(engine: Any, mailbox: Mailbox) -> None:
    """A decision that passed the engine's checks just before the directory changed is
    judged again by the transaction that counts it (the built-in directory's groups)."""
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    cid = mailbox.wait(aid, "cid")
    store = engine.aio.store
    engine._call(store.remove_group_members("default", "managers", ["cid"], engine.aio.clock()))
    # Even a credential left active (the removal above is the store's alone) is refused.
    engine._call(
        store.issue_credentials(
            "default",
            aid,
            "cid",
            [NewCredential("cid-left", "approve", ap_model.hash_secret("s" * 43))],
            engine.aio.clock(),
        )
    )
    result = engine._call(
        store.decide_approval(
            DecideRequest(
                tenant="default",
                approval_id=aid,
                credential_id="cid-left",
                principal="cid",
                decision="approve",
                comment="",
                auth="api",
                now=engine.aio.clock(),
            )
        )
    )
    assert not result.accepted and "not among the approvers" in result.reason
    assert engine.approval(aid).votes == []
    assert cid["approve_token"]  # the notification cid had is dead too
    with pytest.raises(wp.InvalidCredential):
        engine.decide(aid, cid["approve_token"], "cid", "approve")


def test_changes_of_approvers_at_once_are_all_kept(engine: Any, mailbox: Mailbox) -> None:
    """A policy change is computed from the policy the transaction locked, not from one
    read before it: two revocations at once both hold."""
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    mailbox.wait(aid, "cid")

    async def both() -> None:
        await asyncio.gather(
            engine.aio.revoke(aid, "bob", by="ops", reason="left"),
            engine.aio.revoke(aid, "cid", by="ops", reason="on leave"),
        )

    engine._call(both())
    assert sorted(engine.approval(aid).policy["excluded"]) == ["bob", "cid"]
    changed = of_type(engine.history(run.run_id), "ApproversChanged")
    # Each event shows the policy its change made: the second one includes the first.
    assert [sorted(c.data["policy"]["excluded"]) for c in changed][-1] == ["bob", "cid"]


# == 2. escalating an AllOf never asks for fewer people ==================================
def test_escalating_all_of_still_needs_every_named_user(make_engine: Any, mailbox: Mailbox) -> None:
    eng = make_engine(cosign, notifier=FileSender(mailbox.path))
    eng.add_to_group("directors", ["dora"])
    with eng.running():
        run = eng.start(cosign)
        aid = pending_approval(eng, run.run_id).approval_id
        dora = mailbox.wait(aid, "dora")  # after the escalation: asked, and may decide
        assert of_type(eng.history(run.run_id), "ApprovalEscalated")
        assert eng.decide(aid, dora["approve_token"], "dora", "approve").outcome == "pending"
        ann = mailbox.wait(aid, "ann")
        # Ann and a director are two people, but not "ann and bob".
        assert eng.decide(aid, ann["approve_token"], "ann", "approve").outcome == "pending"
        bob = mailbox.wait(aid, "bob")
        assert eng.decide(aid, bob["approve_token"], "bob", "approve").outcome == "approved"
        assert eng.result(run.run_id, timeout=10) == {
            "outcome": "approved",
            "by": ["ann", "bob", "dora"],
        }
        policy = eng.approval(aid).policy
        assert policy["kind"] == "all" and policy["users"] == ["ann", "bob"]
        assert policy["groups"] == ["directors"]


def test_an_escalated_all_of_is_rejected_by_anyone_who_may_decide(
    make_engine: Any, mailbox: Mailbox
) -> None:
    eng = make_engine(cosign, notifier=FileSender(mailbox.path))
    eng.add_to_group("directors", ["dora", "dirk"])
    with eng.running():
        run = eng.start(cosign)
        aid = pending_approval(eng, run.run_id).approval_id
        ann = mailbox.wait(aid, "ann")
        assert eng.decide(aid, ann["approve_token"], "ann", "approve").outcome == "pending"
        dirk = mailbox.wait(aid, "dirk")
        assert eng.decide(aid, dirk["reject_token"], "dirk", "reject", "no").outcome == ("rejected")
        assert eng.result(run.run_id, timeout=10) == {
            "outcome": "rejected",
            "by": ["ann", "dirk"],
        }


# == 3. credentials follow membership; a redelivery replaces the pair before it ==========
def test_removal_retires_credentials_at_once_and_readding_does_not_revive_them(
    engine: Any, mailbox: Mailbox
) -> None:
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    cid = mailbox.wait(aid, "cid")
    assert credential_statuses(engine, aid, "cid") == ["active", "active"]
    assert engine.remove_from_group("managers", ["cid"]) == 1
    assert credential_statuses(engine, aid, "cid") == ["revoked", "revoked"]
    assert engine.add_to_group("managers", ["cid"]) == 1
    with pytest.raises(wp.InvalidCredential):
        engine.decide(aid, cid["approve_token"], "cid", "approve")
    # Back in the group, cid is asked again, with new credentials.
    fresh = mailbox.next_after(cid, "cid's new notification")
    assert engine.decide(aid, fresh["approve_token"], "cid", "approve").outcome == "pending"
    # Bob and ann never left: their credentials were not touched.
    assert credential_statuses(engine, aid, "bob") == ["active", "active"]


def test_removal_keeps_the_credentials_of_someone_still_allowed(
    make_engine: Any, mailbox: Mailbox
) -> None:
    @wp.workflow(name="two_groups")
    async def two_groups(ctx: wp.WorkflowContext) -> str:
        decision = await ctx.approval(
            "either", approvers=wp.AnyOf(users=["cid"], groups=["managers", "finance"])
        )
        return decision.outcome

    eng = make_engine(two_groups, notifier=FileSender(mailbox.path))
    eng.add_to_group("managers", ["ann", "cid"])
    eng.add_to_group("finance", ["ann"])
    with eng.running():
        run = eng.start(two_groups)
        aid = pending_approval(eng, run.run_id).approval_id
        ann = mailbox.wait(aid, "ann")
        cid = mailbox.wait(aid, "cid")
        eng.remove_from_group("managers", ["ann", "cid"])  # both still allowed otherwise
        assert credential_statuses(eng, aid, "ann") == ["active", "active"]
        assert credential_statuses(eng, aid, "cid") == ["active", "active"]
        eng.remove_from_group("finance", ["ann"])  # now ann is not
        assert credential_statuses(eng, aid, "ann") == ["revoked", "revoked"]
        # Added back to a group while still allowed otherwise: nothing to ask, nothing retired.
        eng.add_to_group("managers", ["cid"])
        assert credential_statuses(eng, aid, "cid") == ["active", "active"]
        asked = db_query(
            eng.url,
            "SELECT id FROM outbox WHERE kind = ? AND id LIKE ?",
            ("approval.notify", "%cid%"),
        )
        assert len(asked) == 1  # the first notification only
        assert eng.decide(aid, cid["approve_token"], "cid", "approve").outcome == "approved"
        assert ann["approve_token"]


class DeliversThenFails:
    """A mail server that takes ann's first message but drops the connection before
    saying so: the message arrived, the sender saw an error, the outbox tries again."""

    def __init__(self, then: FileSender) -> None:
        self.then = then
        self.failed = False

    def send(self, notification: Any) -> None:
        self.then.send(notification)
        if notification.approver == "ann" and not self.failed:
            self.failed = True
            raise ConnectionResetError("connection reset after DATA")


def test_a_redelivered_notification_replaces_the_credentials_before_it(
    make_engine: Any, mailbox: Mailbox
) -> None:
    eng = make_engine(purchase, notifier=DeliversThenFails(FileSender(mailbox.path)))
    eng.add_to_group("managers", ["ann", "bob"])
    with eng.running():
        run = eng.start(purchase, {"amount": 5})
        aid = pending_approval(eng, run.run_id).approval_id
        copies = eventually(
            lambda: (lambda c: c if len(c) == 2 else None)(
                [n for n in mailbox.all() if n["approver"] == "ann"]
            ),
            "ann's message and its redelivery",
            timeout=30,
        )
        first, second = copies
        assert first["id"] == second["id"]  # the same message, delivered again
        assert credential_statuses(eng, aid, "ann").count("active") == 2  # one pair
        with pytest.raises(wp.InvalidCredential):
            eng.decide(aid, first["approve_token"], "ann", "approve")
        assert eng.decide(aid, second["approve_token"], "ann", "approve").outcome == "pending"


def test_deliveries_in_flight_at_once_leave_one_usable_pair(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 5})
    aid = pending_approval(engine, run.run_id).approval_id
    mailbox.wait(aid, "ann")
    store = engine.aio.store
    pairs = [
        [NewCredential(f"c{i}-{action}", action, f"h{i}") for action in ap_model.ACTIONS]
        for i in range(8)
    ]

    async def all_at_once() -> None:
        now = engine.aio.clock()
        await asyncio.gather(
            *(store.issue_credentials("default", aid, "ann", pair, now) for pair in pairs)
        )

    engine._call(all_at_once())
    active = db_query(
        engine.url,
        "SELECT credential_id FROM approval_credentials"
        " WHERE approval_id = ? AND approver = ? AND status = 'active'",
        (aid, "ann"),
    )
    ids = sorted(r[0] for r in active)
    assert len(ids) == 2 and ids[0].split("-")[0] == ids[1].split("-")[0], ids


# == 4. expiry by the database's clock =====================================================
def test_an_engine_whose_clock_is_behind_does_not_accept_an_expired_credential(
    make_engine: Any, mailbox: Mailbox
) -> None:
    with approvals.behind_the_database(make_engine, mailbox) as (behind, run_id, aid, ann):
        with pytest.raises(wp.InvalidCredential):
            behind.decide(aid, ann["approve_token"], "ann", "approve")
        assert behind.approval(aid).votes == []
        assert "expired" in refusals(behind, run_id)[-1]["reason"]


# == 5. refused decisions are bounded ========================================================
def test_made_up_tokens_cannot_grow_a_runs_history(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    mailbox.wait(aid, "ann")
    before = len(engine.history(run.run_id))
    attempts = 0
    for _ in range(40):  # the same attempt again and again
        with pytest.raises(wp.InvalidCredential):
            engine.decide(aid, "nope.nope", "mallory", "approve")
        attempts += 1
    for i in range(120):  # a different made-up principal and credential each time
        with pytest.raises(wp.InvalidCredential):
            engine.decide(aid, f"id{i}.{'x' * 43}", f"mallory{i}", "approve")
        attempts += 1
    junk = "\x1b[2J" + "\u2028" * 100 + "." + "z" * 400  # 501 characters, control ones too
    with pytest.raises(wp.InvalidCredential):
        engine.decide(aid, junk, "mallory", "reject")
    attempts += 1
    added = engine.history(run.run_id)[before:]
    assert {e.type for e in added} == {"ApprovalRefused"}
    assert len(added) <= ap_model.REFUSALS_KEPT
    assert len(json.dumps([e.data for e in added])) < 600 * ap_model.REFUSALS_KEPT
    for e in added:
        assert e.data["credential_id"] is None or len(e.data["credential_id"]) <= 64
        assert all(str(v).isprintable() for v in e.data.values())
    # Every attempt is still visible to an auditor, counted.
    auditor = Principal("default", "audrey", frozenset({Role.AUDITOR}))
    info = engine.execute(ops.GetApproval(approval_id=aid), auditor)
    assert sum(r["count"] for r in info.refusals) == attempts
    assert len(info.refusals) <= ap_model.REFUSALS_KEPT + 1
    assert any(r["principal"] == "mallory" and r["count"] == 40 for r in info.refusals)
    # The approval still works.
    ann = mailbox.wait(aid, "ann")
    assert engine.decide(aid, ann["approve_token"], "ann", "approve").outcome == "pending"


# == 6. every refusal looks the same; log lines cannot be forged ===========================
def test_a_refusal_does_not_say_whose_credential_it_was(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    bob = mailbox.wait(aid, "bob")
    with pytest.raises(wp.InvalidCredential) as caught:
        engine.decide(aid, bob["approve_token"], "eve", "approve")
    assert "bob" not in str(caught.value)
    (refused,) = refusals(engine, run.run_id)
    assert "bob" not in refused["reason"] and refused["principal"] == "eve"
    assert refused["credential_id"] == bob["approve_token"].split(".")[0]


class OddDirectory:
    """A host directory whose names were never checked by waypost."""

    async def members(self, tenant: str, group: str) -> list[str]:
        return ["Mia", "max\nWARNING waypost.audit: forged line", "a\x00b", "eve\u2028"]


def test_log_lines_escape_what_callers_supplied(
    make_engine: Any, mailbox: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    eng = make_engine(purchase, notifier=LogSender(), directory=OddDirectory())
    caplog.set_level(logging.DEBUG, logger="waypost")
    with eng.running():
        run = eng.start(purchase, {"amount": 10})
        aid = pending_approval(eng, run.run_id).approval_id
        eventually(
            lambda: [r for r in caplog.records if r.name == "waypost.notify"],
            "mia's notification logged",
        )
        odd = Principal("default", "vera\nERROR forged", frozenset({Role.VIEWER}))
        eng.execute(ops.ListRuns(), odd)
        with pytest.raises(wp.InvalidCredential):
            eng.decide(aid, "nope.nope", "mallory", "approve")
        with pytest.raises(wp.InvalidCredential):
            eng.decide("ap_unknown", "nope.nope", "mallory", "approve", auth="sso")
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("waypost")]
    assert any("vera" in m for m in messages) and any("mia" in m for m in messages)
    forged = [m for m in messages if not m.isprintable()]
    assert forged == []
    # Names that are no identities are ignored the same way on both stores; only mia is asked.
    asked = {r.args[2] for r in caplog.records if r.name == "waypost.notify"}  # type: ignore[index]
    assert asked == {"mia"}
    assert [a.approval_id for a in eng.approvals("mia")] == [aid]


# == 7. bad text is refused the same way on both stores ====================================
def test_bad_text_is_refused_on_both_stores_and_nothing_is_written(
    engine: Any, mailbox: Mailbox
) -> None:
    run = engine.start(purchase, {"amount": "a\x00b"})  # data is JSON: NUL survives, escaped
    approval = pending_approval(engine, run.run_id)
    aid = approval.approval_id
    assert approval.data == {"amount": "a\x00b"}
    ann = mailbox.wait(aid, "ann")
    bad = ["a\x00b", "a\x1b[31mb", "a\u2028b", "a\u0085b", "a\ud800b"]
    for text in bad:
        with pytest.raises(wp.InvalidRequest):
            engine.decide(aid, ann["approve_token"], "ann", "approve", text)
        with pytest.raises(wp.InvalidRequest):
            engine.cancel(run.run_id, text)
        with pytest.raises(wp.InvalidRequest):
            engine.revoke(aid, "bob", by="ops", reason=text)
        with pytest.raises(wp.InvalidRequest):
            engine.reassign(aid, "bob", "dan", by="ops", reason=text)
        with pytest.raises(wp.InvalidRequest):
            engine.migrate(run.run_id, 2, reason=text)
        with pytest.raises(wp.InvalidRequest):
            engine.add_to_group(text, ["dan"])
        with pytest.raises(wp.InvalidRequest):
            engine.add_to_group("managers", [text])
        with pytest.raises(wp.InvalidRequest):
            engine.decide(aid, ann["approve_token"], "ann", "approve", auth=text)
        with pytest.raises(wp.InvalidRequest):
            engine.signal(run.run_id, text, None)
    # Nothing of it was written: the run waits, ann's credential still works.
    assert engine.get(run.run_id).status == "waiting"
    assert of_type(engine.history(run.run_id), "ApproversChanged") == []
    assert engine.decide(aid, ann["approve_token"], "ann", "approve", "ok\tfine\n").outcome == (
        "pending"
    )
    assert engine.approval(aid).votes[0]["comment"] == "ok\tfine\n"


@pytest.mark.parametrize("name", ["a\x00b", "a\nb", "a\u202eb"])
def test_approver_names_in_code_and_definitions_are_checked(engine: Any, name: str) -> None:
    with pytest.raises(wp.ConfigurationError, match="control or invisible"):
        wp.AnyOf(users=[name])
    with pytest.raises(wp.ConfigurationError, match="control or invisible"):
        wp.Quorum(1, group=name)
    definition = {
        "name": "ask_someone",
        "start": "ask",
        "steps": {
            "ask": {"type": "approval", "approvers": {"users": [name]}, "next": "done"},
            "done": {"type": "succeed"},
        },
    }
    with pytest.raises(wp.DefinitionError, match=r"approvers\.users\[0\]"):
        engine.publish(definition)
    definition["steps"]["ask"]["approvers"] = {"groups": [name]}  # type: ignore[index]
    with pytest.raises(wp.DefinitionError, match=r"approvers\.groups\[0\]"):
        engine.publish(definition)
    assert engine.definitions() == []


# == 8. segregation of duties uses the caller's identity ===================================
DEFINED_PURCHASE = {
    "name": "defined_purchase",
    "start": "ask",
    "steps": {
        "ask": {"type": "approval", "approvers": {"groups": ["managers"]}, "next": "done"},
        "done": {"type": "succeed"},
    },
}


@pytest.mark.parametrize("kind", ["code", "definition"])
def test_segregation_of_duties_compares_the_callers_identity(
    engine: Any, mailbox: Mailbox, kind: str
) -> None:
    engine.add_to_group("managers", ["eve"])
    if kind == "definition":
        engine.publish(DEFINED_PURCHASE)
    workflow = "purchase" if kind == "code" else "defined_purchase"
    starter = Principal("default", "Eve", frozenset({Role.STARTER}))
    with pytest.raises(wp.PermissionDenied, match="must be the caller"):
        engine.execute(ops.Start(workflow=workflow, input={"amount": 1}, started_by="ann"), starter)
    run_id = engine.execute(ops.Start(workflow=workflow, input={"amount": 1}), starter)
    assert engine.history(run_id)[0].data["started_by"] == "eve"
    approval = pending_approval(engine, run_id)
    assert approval.started_by == "eve"
    mailbox.wait(approval.approval_id, "ann")
    assert not [n for n in mailbox.all() if n["approver"] == "eve"]  # never asked
    # Even holding a credential of her own, eve (however she spells herself) may not decide.
    token = approvals.issue_credential(engine, approval.approval_id, "eve")
    approver = Principal("default", "\uff25\uff36\uff25", frozenset({Role.APPROVER}))
    decide = approve_as_itself(approval.approval_id, token)
    with pytest.raises(wp.DecisionRefused, match="segregation of duties"):
        engine.execute(decide, approver)
    assert engine.approval(approval.approval_id).votes == []
    # Another approver, deciding as itself, is counted under its own name.
    ann = mailbox.wait(approval.approval_id, "ann")
    ann_principal = Principal("default", "Ann", frozenset({Role.APPROVER}))
    receipt = engine.execute(
        approve_as_itself(approval.approval_id, ann["approve_token"]),
        ann_principal,
    )
    assert receipt.principal == "ann"
