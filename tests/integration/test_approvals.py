"""Human approval on both stores: credentials, quorum, segregation of duties, audit.

Notifications go to a file (the `file` sender, like a development mail backend);
the tests read the credentials from it, as an approver reads them from a mail.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

import waypost as wp
from tests.helpers import approvals, db_query, eventually, of_type
from tests.helpers.approvals import credential_statuses, pending_approval, purchase, refusals
from tests.helpers.mail import Mailbox
from tests.helpers.threads import in_threads
from waypost.features.senders import FileSender

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="two_signatures")
async def two_signatures(ctx: wp.WorkflowContext) -> list[str]:
    import asyncio

    a, b = await asyncio.gather(
        ctx.approval("legal", approvers=wp.AnyOf(users=["ann"])),
        ctx.approval("finance", approvers=wp.AnyOf(users=["ann"])),
    )
    return [a.outcome, b.outcome]


@pytest.fixture
def engine(make_engine: Any, mailbox: Mailbox) -> Any:
    with approvals.managers_engine(make_engine, mailbox, two_signatures) as eng:
        yield eng


def test_any_two_of_managers_approve(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 900}, started_by="eve")
    approval = pending_approval(engine, run.run_id)
    assert approval.name == "manager" and approval.data == {"amount": 900}
    notes = {who: mailbox.wait(approval.approval_id, who) for who in ("ann", "bob", "cid")}
    assert notes["ann"]["run_id"] == run.run_id
    for action in ("approve", "reject"):  # the server's approval page, by the token alone
        token = notes["ann"][f"{action}_token"]
        assert notes["ann"][f"{action}_url"] == f"http://127.0.0.1:8080/approve/{token}"
    assert notes["ann"]["approve_token"] != notes["bob"]["approve_token"]
    assert [a.approval_id for a in engine.approvals("ann")] == [approval.approval_id]

    first = engine.decide(approval.approval_id, notes["ann"]["approve_token"], "ann", "approve")
    assert first.outcome == "pending"
    assert engine.get(run.run_id).status == "waiting"
    second = engine.decide(
        approval.approval_id, notes["bob"]["approve_token"], "bob", "approve", "fine by me"
    )
    assert second.outcome == "approved"
    assert engine.result(run.run_id, timeout=10) == {"outcome": "approved", "by": ["ann", "bob"]}
    history = engine.history(run.run_id)
    decided = of_type(history, "ApprovalDecided")
    assert [(d.data["principal"], d.data["outcome"]) for d in decided] == [
        ("ann", "pending"),
        ("bob", "approved"),
    ]
    assert decided[1].data["comment"] == "fine by me" and decided[1].data["auth"] == "api"
    assert engine.approval(approval.approval_id).status == "approved"
    # Only hashes are stored: no token appears anywhere in the database.
    stored = db_query(engine.url, "SELECT secret_hash FROM approval_credentials")
    tokens = [n[k] for n in notes.values() for k in ("approve_token", "reject_token")]
    assert len(stored) == 6
    assert not any(t.split(".")[1] in row[0] for t in tokens for row in stored)
    assert not any(t in json.dumps([e.data for e in history]) for t in tokens)


def test_a_double_click_counts_once(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    approval = pending_approval(engine, run.run_id)
    token = mailbox.wait(approval.approval_id, "ann")["approve_token"]
    results: list[Any] = []
    barrier = threading.Barrier(2)

    def click() -> None:
        barrier.wait()
        try:
            results.append(engine.decide(approval.approval_id, token, "ann", "approve"))
        except wp.InvalidCredential as exc:
            results.append(exc)

    in_threads([click] * 2)
    accepted = [r for r in results if isinstance(r, wp.DecisionReceipt)]
    assert len(accepted) == 1 and len([r for r in results if isinstance(r, Exception)]) == 1
    assert len(engine.approval(approval.approval_id).votes) == 1
    assert len(of_type(engine.history(run.run_id), "ApprovalDecided")) == 1
    assert refusals(engine, run.run_id)[0]["credential_id"] == token.split(".")[0]


def test_the_same_approver_counts_once_toward_a_quorum(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    approval = pending_approval(engine, run.run_id)
    ann = mailbox.wait(approval.approval_id, "ann")
    engine.decide(approval.approval_id, ann["approve_token"], "ann", "approve")
    with pytest.raises(wp.InvalidCredential):  # the same link again
        engine.decide(approval.approval_id, ann["approve_token"], "ann", "approve")
    with pytest.raises(wp.InvalidCredential):  # her other link died with the first use
        engine.decide(approval.approval_id, ann["reject_token"], "ann", "reject")
    # An operator hands bob's place to ann: she gets new credentials, still one vote.
    bob = mailbox.wait(approval.approval_id, "bob")
    engine.reassign(approval.approval_id, "bob", "ann", by="ops", reason="bob is away")
    with pytest.raises(wp.InvalidCredential):  # reassignment killed bob's credentials
        engine.decide(approval.approval_id, bob["approve_token"], "bob", "approve")
    changed = of_type(engine.history(run.run_id), "ApproversChanged")
    assert [(c.data["revoked"], c.data["added"], c.data["by"]) for c in changed] == [
        ("bob", "ann", "ops")
    ]
    again = mailbox.next_after(ann, "ann's second notification")
    with pytest.raises(wp.DecisionRefused, match="decided on this approval already"):
        engine.decide(approval.approval_id, again["approve_token"], "ann", "approve")
    info = engine.approval(approval.approval_id)
    assert info.status == "pending" and [v["principal"] for v in info.votes] == ["ann"]


def test_self_approval_is_refused(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10}, started_by="ann")
    approval = pending_approval(engine, run.run_id)
    mailbox.wait(approval.approval_id, "bob")
    mailbox.wait(approval.approval_id, "cid")
    assert not [n for n in mailbox.all() if n["approver"] == "ann"]  # never asked
    assert engine.approvals("ann") == []
    # Even holding a credential of her own (say, issued before a policy change),
    # the principal who started the run may not decide.
    token = approvals.issue_credential(engine, approval.approval_id, "ann")
    with pytest.raises(wp.DecisionRefused, match="segregation of duties"):
        engine.decide(approval.approval_id, token, "ann", "approve")
    assert "segregation of duties" in refusals(engine, run.run_id)[0]["reason"]
    assert engine.approval(approval.approval_id).votes == []


def test_an_approver_removed_from_the_group_is_refused(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    approval = pending_approval(engine, run.run_id)
    cid = mailbox.wait(approval.approval_id, "cid")
    assert engine.remove_from_group("managers", ["cid"]) == 1
    # The removal retired cid's credentials: the answer every dead credential gets.
    with pytest.raises(wp.InvalidCredential):
        engine.decide(approval.approval_id, cid["approve_token"], "cid", "approve")
    assert refusals(engine, run.run_id)[0]["reason"] == "the credential was revoked"
    assert engine.approval(approval.approval_id).votes == []


def test_bad_credentials_all_get_the_same_answer(
    engine: Any, mailbox: Mailbox, make_engine: Any
) -> None:
    run = engine.start(purchase, {"amount": 10})
    approval = pending_approval(engine, run.run_id)
    aid = approval.approval_id
    ann = mailbox.wait(aid, "ann")
    bob = mailbox.wait(aid, "bob")
    mailbox.wait(aid, "cid")
    engine.revoke(aid, "bob", by="ops", reason="left the company")
    credential_id = ann["approve_token"].split(".")[0]
    attempts = {
        "revoked": lambda: engine.decide(aid, bob["approve_token"], "bob", "approve"),
        "forged secret": lambda: engine.decide(
            aid, credential_id + "." + "x" * 43, "ann", "approve"
        ),
        "forged id": lambda: engine.decide(aid, "nope.nope", "ann", "approve"),
        "malformed": lambda: engine.decide(aid, "garbage", "ann", "approve"),
        "another tenant": lambda: engine.decide(
            aid, ann["approve_token"], "ann", "approve", tenant="other"
        ),
        "another approver's": lambda: engine.decide(aid, ann["approve_token"], "cid", "approve"),
        "the wrong action": lambda: engine.decide(aid, ann["approve_token"], "ann", "reject"),
    }
    messages = {}
    for label, attempt in attempts.items():
        with pytest.raises(wp.InvalidCredential) as caught:
            attempt()
        messages[label] = str(caught.value)
    assert len(set(messages.values())) == 1, messages
    reasons = [r["reason"] for r in refusals(engine, run.run_id)]
    assert len(reasons) == len(attempts) - 1  # the other tenant's attempt has no run here
    assert any("forged" in r for r in reasons) and any("revoked" in r for r in reasons)
    assert engine.approval(aid).votes == []
    # An expired credential gets the same answer too.
    expiring = engine.start(purchase, {"amount": 10, "expires_in": 0.5})
    short = pending_approval(engine, expiring.run_id)
    note = mailbox.wait(short.approval_id, "cid")
    assert engine.result(expiring.run_id, timeout=15)["outcome"] == "expired"
    with pytest.raises(wp.InvalidCredential) as caught:
        engine.decide(short.approval_id, note["approve_token"], "cid", "approve")
    assert str(caught.value) in messages.values()


def test_a_credential_for_one_step_does_not_work_on_another(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(two_signatures)
    found = eventually(lambda: len(engine.approvals(run_id=run.run_id)) == 2 or None, "both")
    assert found
    legal, finance = sorted(engine.approvals(run_id=run.run_id), key=lambda a: a.name != "legal")
    token_for_legal = mailbox.wait(legal.approval_id, "ann")["approve_token"]
    with pytest.raises(wp.InvalidCredential):
        engine.decide(finance.approval_id, token_for_legal, "ann", "approve")
    assert "another approval" in refusals(engine, run.run_id)[0]["reason"]
    engine.decide(legal.approval_id, token_for_legal, "ann", "approve")
    engine.decide(
        finance.approval_id,
        mailbox.wait(finance.approval_id, "ann")["reject_token"],
        "ann",
        "reject",
    )
    assert engine.result(run.run_id, timeout=10) == ["approved", "rejected"]


def test_cancel_while_waiting_kills_the_credentials(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    approval = pending_approval(engine, run.run_id)
    ann = mailbox.wait(approval.approval_id, "ann")
    engine.cancel(run.run_id, "the order was withdrawn")
    with pytest.raises(wp.WorkflowCancelled):
        engine.result(run.run_id, timeout=10)
    with pytest.raises(wp.InvalidCredential):
        engine.decide(approval.approval_id, ann["approve_token"], "ann", "approve")
    assert engine.approval(approval.approval_id).status == "cancelled"
    assert credential_statuses(engine, approval.approval_id) == [("revoked",)]


def test_expiry_takes_the_timeout_path(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10, "expires_in": 0.5})
    approval = pending_approval(engine, run.run_id)
    assert engine.result(run.run_id, timeout=15) == {"outcome": "expired", "by": []}
    assert engine.approval(approval.approval_id).status == "expired"
    closed = of_type(engine.history(run.run_id), "ApprovalClosed")
    assert [c.data["status"] for c in closed] == ["expired"]


def test_a_decision_after_the_run_moved_on_is_only_an_audit_fact(
    engine: Any, mailbox: Mailbox
) -> None:
    run = engine.start(purchase, {"amount": 10})
    approval = pending_approval(engine, run.run_id)
    notes = {who: mailbox.wait(approval.approval_id, who) for who in ("ann", "bob", "cid")}
    engine.decide(approval.approval_id, notes["ann"]["approve_token"], "ann", "approve")
    engine.decide(approval.approval_id, notes["bob"]["approve_token"], "bob", "approve")
    result = engine.result(run.run_id, timeout=10)
    before = engine.history(run.run_id)
    with pytest.raises(wp.InvalidCredential):
        engine.decide(approval.approval_id, notes["cid"]["reject_token"], "cid", "reject")
    after = engine.history(run.run_id)
    assert [e.type for e in after[len(before) :]] == ["ApprovalRefused"]
    assert "approved already" in after[-1].data["reason"]
    assert after[-1].data["principal"] == "cid" and after[-1].data["auth"] == "api"
    assert engine.result(run.run_id, timeout=1) == result
    assert engine.get(run.run_id).status == "completed"
    assert engine.verify(run.run_id) == []


def test_a_reject_is_a_veto(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    approval = pending_approval(engine, run.run_id)
    ann = mailbox.wait(approval.approval_id, "ann")
    engine.decide(approval.approval_id, ann["reject_token"], "ann", "reject", "too expensive")
    assert engine.result(run.run_id, timeout=10) == {"outcome": "rejected", "by": ["ann"]}


def test_policies_are_checked_when_declared() -> None:
    with pytest.raises(wp.ConfigurationError, match="cannot be reached"):
        wp.Quorum(3, users=["a", "b"])
    with pytest.raises(wp.ConfigurationError, match="at least one user or group"):
        wp.AnyOf()
    assert wp.AllOf(["a", "b"]).needed == 2


class FlakySender:
    """Fails the first `failures` deliveries, as a mail server that is down for a while."""

    def __init__(self, failures: int, then: FileSender) -> None:
        self.failures = failures
        self.then = then
        self.calls: list[str] = []

    def send(self, notification: Any) -> None:
        self.calls.append(notification.id)
        if len(self.calls) <= self.failures:
            raise ConnectionRefusedError("the mail server is down")
        self.then.send(notification)


def test_a_failed_notification_is_retried_with_the_same_id(
    make_engine: Any, mailbox: Mailbox
) -> None:
    sender = FlakySender(2, FileSender(mailbox.path))
    eng = make_engine(purchase, notifier=sender)
    eng.add_to_group("managers", ["ann", "bob"])
    with eng.running():
        run = eng.start(purchase, {"amount": 5})
        approval = pending_approval(eng, run.run_id)
        note = eventually(
            lambda: [n for n in mailbox.all() if n["approver"] == "ann"],
            "ann's notification after the retries",
            timeout=30,
        )[0]
        mailbox.wait(approval.approval_id, "bob")
        assert sender.calls.count(note["id"]) >= 1
        assert len(sender.calls) >= 4  # two failures, then ann's and bob's
        assert len({n["id"] for n in mailbox.all()}) == 2  # one delivered message each
        query = "SELECT status, attempts FROM outbox WHERE kind = ? AND status = ?"

        def both_sent() -> list[Any]:
            rows = db_query(eng.url, query, ("approval.notify", "sent"))
            return rows if len(rows) == 2 else []

        rows = eventually(both_sent, "both messages marked sent")
        assert sum(r[1] for r in rows) == 4  # each was tried twice
        eng.decide(approval.approval_id, note["approve_token"], "ann", "approve")
        bob = mailbox.wait(approval.approval_id, "bob")
        eng.decide(approval.approval_id, bob["approve_token"], "bob", "approve")
        assert eng.result(run.run_id, timeout=10)["outcome"] == "approved"


@wp.workflow(name="escalating")
async def escalating(ctx: wp.WorkflowContext) -> dict[str, Any]:
    decision = await ctx.approval(
        "sign-off",
        approvers=wp.AnyOf(users=["ann"]),
        escalate_to="directors",
        escalate_after=0.5,
        expires_in=3600,
    )
    return {"outcome": decision.outcome, "by": decision.decided_by}


def test_an_undecided_approval_escalates_to_another_group(
    make_engine: Any, mailbox: Mailbox
) -> None:
    eng = make_engine(escalating, notifier=FileSender(mailbox.path))
    eng.add_to_group("directors", ["dora"])
    with eng.running():
        run = eng.start(escalating)
        approval = pending_approval(eng, run.run_id)
        mailbox.wait(approval.approval_id, "ann")
        assert eng.approvals("dora") == []  # not yet
        dora = mailbox.wait(approval.approval_id, "dora")  # after the delay
        assert [a.approval_id for a in eng.approvals("dora")] == [approval.approval_id]
        eng.decide(approval.approval_id, dora["approve_token"], "dora", "approve")
        assert eng.result(run.run_id, timeout=10) == {"outcome": "approved", "by": ["dora"]}
    escalated = of_type(eng.history(run.run_id), "ApprovalEscalated")
    assert [e.data["group"] for e in escalated] == ["directors"]
    assert len([n for n in mailbox.all() if n["approver"] == "ann"]) == 1  # not asked twice


class HostDirectory:
    """A host application's own directory (say, its user database), asked each time."""

    def __init__(self) -> None:
        self.groups: dict[str, list[str]] = {"managers": ["mia", "max"]}
        self.asked = 0

    async def members(self, tenant: str, group: str) -> list[str]:
        self.asked += 1
        return list(self.groups.get(group, []))


def test_a_host_directory_is_asked_at_the_moment_of_deciding(
    make_engine: Any, mailbox: Mailbox
) -> None:
    directory = HostDirectory()
    eng = make_engine(purchase, notifier=FileSender(mailbox.path), directory=directory)
    with eng.running():
        run = eng.start(purchase, {"amount": 5})
        approval = pending_approval(eng, run.run_id)
        mia = mailbox.wait(approval.approval_id, "mia")
        mx = mailbox.wait(approval.approval_id, "max")
        eng.decide(approval.approval_id, mia["approve_token"], "mia", "approve")
        directory.groups["managers"] = ["mia"]  # max moves to another team
        asked = directory.asked
        with pytest.raises(wp.DecisionRefused, match="not among the approvers"):
            eng.decide(approval.approval_id, mx["approve_token"], "max", "approve")
        assert directory.asked > asked
        assert eng.groups() == {}  # the built-in directory is not used


@wp.workflow(name="impatient")
async def impatient(ctx: wp.WorkflowContext) -> str:
    import asyncio

    asked = ctx.approval("quick look", approvers=wp.AnyOf(users=["ann"]))
    await asyncio.wait([asked, ctx.sleep(1.5)], return_when=asyncio.FIRST_COMPLETED)
    return "done without waiting"  # the approval is still open when the run ends


def test_a_run_that_ends_while_asking_closes_the_approval(
    make_engine: Any, mailbox: Mailbox
) -> None:
    eng = make_engine(impatient, notifier=FileSender(mailbox.path))
    with eng.running():
        run = eng.start(impatient)
        approval = pending_approval(eng, run.run_id)
        note = mailbox.wait(approval.approval_id, "ann")
        assert eng.result(run.run_id, timeout=10) == "done without waiting"
        assert eng.approval(approval.approval_id).status == "cancelled"
        with pytest.raises(wp.InvalidCredential):
            eng.decide(approval.approval_id, note["approve_token"], "ann", "approve")
