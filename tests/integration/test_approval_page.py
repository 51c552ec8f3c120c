"""The approval page and the approver's API, engine side, on both stores.

A notification's links open the server's page: `{approval_url}/approve/{token}`.
The page shows what the token decides (`ResolveCredential`, open to a caller
nobody authenticated, changing nothing) and decides on a POST (`Decide` with the
token, auth "page"). An approver signed in with an API key decides without a
token, under the same rules, and sees an inbox of its own.

Notifications go to a file (the `file` sender); the tests take the links from it,
as an approver's browser does.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import typing
from functools import partial
from typing import Any

import pytest

import waypost as wp
from tests.helpers import approvals, db_query, eventually, of_type, pg_connect
from tests.helpers.approvals import pending_approval, purchase, refusals
from tests.helpers.mail import Mailbox
from tests.helpers.threads import in_threads
from waypost.features.outbox import approval_links
from waypost.features.senders import FileSender
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role
from waypost.store.sqlfile import load_queries
from waypost.testing.invariants import check_invariants

pytestmark = pytest.mark.timeout(120)

BASE = "http://127.0.0.1:8080"
ONE_MESSAGE = str(wp.InvalidCredential())


@wp.workflow(name="for_dora")
async def for_dora(ctx: wp.WorkflowContext) -> str:
    decision = await ctx.approval("dora's", approvers=wp.AnyOf(users=["dora"]), expires_in=3600)
    return decision.outcome


@pytest.fixture
def engine(make_engine: Any, mailbox: Mailbox) -> Any:
    with approvals.managers_engine(make_engine, mailbox, for_dora) as eng:
        yield eng


def approver(name: str, tenant: str = "default") -> Principal:
    """The principal the HTTP server builds from an approver's API key."""
    return Principal(tenant, name, frozenset({Role.APPROVER}))


def token_of(link: str) -> str:
    """The token in a notification's link, as the server's route takes it."""
    prefix = f"{BASE}/approve/"
    assert link.startswith(prefix), link
    return link.removeprefix(prefix)


def decide_signed_in(engine: Any, who: Principal, approval_id: str, decision: str) -> Any:
    return engine.execute(ops.Decide(approval_id=approval_id, decision=decision), who)


def credential_statuses(engine: Any, approval_id: str, who: str) -> list[str]:
    return approvals.approver_credentials(engine, approval_id, who, "status")


def everything(engine: Any) -> dict[str, list[Any]]:
    """The rows a decision or a refusal would change, to see that nothing did."""
    tables = {
        "approvals": "SELECT approval_id, status, policy, closed_at FROM approvals",
        "credentials": "SELECT credential_id, status, used_at FROM approval_credentials",
        "votes": "SELECT approval_id, principal FROM approval_votes",
        "refusals": "SELECT approval_id, principal, reason, attempts FROM approval_refusals",
        "events": "SELECT run_id, seq, type FROM events",
        "runs": "SELECT run_id, last_seq, status FROM runs",
    }
    return {name: sorted(map(tuple, db_query(engine.url, sql))) for name, sql in tables.items()}


# == resolving a link ======================================================================
def test_a_link_resolves_to_what_its_token_decides_in_its_own_tenant(
    make_engine: Any, mailbox: Mailbox
) -> None:
    eng = make_engine(purchase, notifier=FileSender(mailbox.path))
    eng.add_to_group("managers", ["ann", "bob"], tenant="acme")
    with eng.running():
        run = eng.start(purchase, {"amount": 900}, tenant="acme", started_by="eve")
        approval = eventually(lambda: eng.approvals(tenant="acme", run_id=run.run_id), "it")[0]
        note = mailbox.wait(approval.approval_id, "ann")
        token = token_of(note["approve_url"])
        assert token == note["approve_token"]
        # The link names neither tenant nor approval: the token finds them.
        assert "acme" not in note["approve_url"] and approval.approval_id not in note["approve_url"]

        view = eng.resolve_credential(token)
        assert view == wp.CredentialView(
            tenant="acme",
            approval_id=approval.approval_id,
            run_id=run.run_id,
            step=approval.step,
            name="manager",
            action="approve",
            approver="ann",
            data={"amount": 900},
            requested_by="eve",
            decisions=[],
            expires_at=approval.expires_at,
            status="pending",
        )
        assert token not in repr(view) and token.split(".")[1] not in repr(view)
        rejecting = eng.resolve_credential(token_of(note["reject_url"]))
        assert rejecting.action == "reject" and rejecting.approver == "ann"

        # Bob decides; Ann's page shows his decision, and still lets her decide.
        bob = mailbox.wait(approval.approval_id, "bob")
        eng.decide(
            approval.approval_id, bob["approve_token"], "bob", "approve", "ok", tenant="acme"
        )
        (decided,) = eng.resolve_credential(token).decisions
        assert decided["approver"] == "bob" and decided["decision"] == "approve"
        assert decided["comment"] == "ok" and decided["at"].tzinfo is not None

        # The same through the door, as the server asks: nobody signed in.
        asked = eng.execute(ops.ResolveCredential(token=token), Principal.anonymous())
        assert asked.approval_id == approval.approval_id and asked.tenant == "acme"


def test_every_token_that_cannot_decide_gets_the_one_answer(
    engine: Any, mailbox: Mailbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="waypost")
    run = engine.start(purchase, {"amount": 10}, started_by="eve")
    aid = pending_approval(engine, run.run_id).approval_id
    ann, bob, cid = (mailbox.wait(aid, who) for who in ("ann", "bob", "cid"))
    ann_id = ann["approve_token"].split(".")[0]

    # Spent: Ann decided (both her links die); revoked: Bob was taken off.
    engine.decide(aid, ann["approve_token"], "ann", "approve")
    engine.revoke(aid, "bob", by="ops", reason="away")
    # Replaced: a later delivery to Cid retires the pair before it.
    live = approvals.issue_credential(engine, aid, "cid")
    # The run's starter holding a credential of her own (segregation of duties).
    starters = approvals.issue_credential(engine, aid, "eve")
    # An approval that ended: its credentials cannot decide any more.
    done = engine.start(purchase, {"amount": 20})
    done_aid = pending_approval(engine, done.run_id).approval_id
    notes = {who: mailbox.wait(done_aid, who) for who in ("ann", "bob", "cid")}
    engine.decide(done_aid, notes["ann"]["approve_token"], "ann", "approve")
    engine.decide(done_aid, notes["bob"]["reject_token"], "bob", "reject")
    # An approval that expired.
    short = engine.start(purchase, {"amount": 10, "expires_in": 0.5})
    short_aid = pending_approval(engine, short.run_id).approval_id
    expired = mailbox.wait(short_aid, "ann")
    assert engine.result(short.run_id, timeout=15)["outcome"] == "expired"

    tokens: dict[str, Any] = {
        "empty": "",
        "malformed": "garbage",
        "huge": "a" * 100_000 + "." + "b" * 100_000,
        "control characters": "abc\x00def.ghi\r\nX-Injected: 1",
        "a line separator": "abc\u2028.def",
        "not text": b"\xff\xfe.\x00",
        "a surrogate": "\udcff.abc",
        "no secret": ann_id + ".",
        "unknown": "nope.nope",
        "forged secret": ann_id + "." + "x" * 43,
        "spent": ann["approve_token"],
        "spent with the other action": ann["reject_token"],
        "revoked": bob["approve_token"],
        "replaced": cid["approve_token"],
        "the starter's": starters,
        "approval decided": notes["cid"]["approve_token"],
        "approval expired": expired["approve_token"],
    }
    before = everything(engine)
    messages = {}
    for label, token in tokens.items():
        with pytest.raises(wp.InvalidCredential) as caught:
            engine.resolve_credential(token)
        messages[label] = str(caught.value)
    assert set(messages.values()) == {ONE_MESSAGE}, messages
    assert everything(engine) == before  # refusing wrote nothing either
    # The one that still decides, resolves; until its approver leaves the group.
    assert engine.resolve_credential(live).approver == "cid"
    engine.remove_from_group("managers", ["cid"])
    with pytest.raises(wp.InvalidCredential) as caught:
        engine.resolve_credential(live)
    assert str(caught.value) == ONE_MESSAGE
    # No secret reached a log line, whole or in part.
    for token in (*tokens.values(), live):
        if isinstance(token, str) and "." in token and len(token) < 1000:
            secret = token.split(".", 1)[1]
            if len(secret) >= 12:
                assert secret[:12] not in caplog.text, secret


def test_resolving_changes_nothing(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    ann = mailbox.wait(aid, "ann")
    mailbox.wait(aid, "bob")
    mailbox.wait(aid, "cid")
    eventually(  # the notifications are marked sent: nothing else moves
        lambda: (
            db_query(engine.url, "SELECT count(*) FROM outbox WHERE status <> 'sent'")[0][0] == 0
        ),
        "every notification sent",
    )
    before = everything(engine)
    history = engine.history(run.run_id)
    for _ in range(5):  # a mail scanner, a preview, the approver: all only look
        engine.resolve_credential(ann["approve_token"])
        engine.resolve_credential(ann["reject_token"])
    assert everything(engine) == before
    assert engine.history(run.run_id) == history
    assert credential_statuses(engine, aid, "ann") == ["active", "active"]
    # And the link still decides afterwards.
    assert engine.decide(aid, ann["approve_token"], "ann", "approve").outcome == "pending"


# == deciding on the page ==================================================================
def test_the_page_decides_once(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    token = token_of(mailbox.wait(aid, "ann")["reject_url"])

    def post() -> Any:
        """What the server does on the page's POST: resolve, then decide as the approver."""
        view = engine.resolve_credential(token)
        request = ops.Decide(
            approval_id=view.approval_id,
            token=token,
            approver=view.approver,
            decision=view.action,
            comment="not this quarter",
            auth="page",
        )
        return engine.execute(request, approver(view.approver, view.tenant))

    receipt = post()
    assert (receipt.principal, receipt.decision, receipt.outcome) == ("ann", "reject", "rejected")
    assert engine.result(run.run_id, timeout=10) == {"outcome": "rejected", "by": ["ann"]}
    (decided,) = of_type(engine.history(run.run_id), "ApprovalDecided")
    assert decided.data["auth"] == "page" and decided.data["comment"] == "not this quarter"
    assert decided.data["credential_id"] == token.split(".")[0]
    with pytest.raises(wp.InvalidCredential) as caught:  # the second POST
        post()
    assert str(caught.value) == ONE_MESSAGE
    with pytest.raises(wp.InvalidCredential):  # past the page, straight to Decide
        engine.execute(
            ops.Decide(approval_id=aid, token=token, decision="reject", auth="page"),
            approver("ann"),
        )
    assert len(engine.approval(aid).votes) == 1


def test_two_posts_at_once_decide_once(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    token = token_of(mailbox.wait(aid, "bob")["approve_url"])
    barrier = threading.Barrier(2)
    results: list[Any] = []

    def post() -> None:
        barrier.wait()
        request = ops.Decide(approval_id=aid, token=token, decision="approve", auth="page")
        try:
            results.append(engine.execute(request, approver("bob")))
        except wp.InvalidCredential as exc:
            results.append(exc)

    in_threads([post] * 2)
    assert sorted(type(r).__name__ for r in results) == ["DecisionReceipt", "InvalidCredential"]
    assert [v["principal"] for v in engine.approval(aid).votes] == ["bob"]


# == the unauthenticated principal =========================================================
def _filled(kind: type[ops.Request[Any]]) -> ops.Request[Any]:
    """A request of `kind` with every required field given something."""
    hints = typing.get_type_hints(kind)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(kind):  # type: ignore[arg-type]
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = ["x"] if "list" in str(hints[f.name]) else "x"
    return kind(**values)


def test_the_anonymous_principal_may_only_resolve_a_credential(
    engine: Any, mailbox: Mailbox
) -> None:
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    ann = mailbox.wait(aid, "ann")
    mailbox.wait(aid, "bob")
    mailbox.wait(aid, "cid")
    nobody = Principal.anonymous()
    assert not nobody.authenticated and not nobody.may(Role) and not nobody.local
    before = everything(engine)
    refused = []
    for kind in ops.OPERATIONS:
        if kind.open_to_anonymous:
            continue
        request = _filled(kind)
        with pytest.raises(wp.PermissionDenied, match="signed-in caller"):
            engine.execute(request, nobody)
        refused.append(kind)
    # Even with real arguments for the operations that matter most.
    for request in (
        ops.Decide(approval_id=aid, token=ann["approve_token"], approver="ann", decision="approve"),
        ops.ListApprovals(),
        ops.GetApproval(approval_id=aid),
        ops.GetHistory(run_id=run.run_id),
        ops.Start(workflow="purchase", input={"amount": 1}),
        ops.AddToGroup(group="managers", members=["mallory"]),
    ):
        with pytest.raises(wp.PermissionDenied):
            engine.execute(request, nobody)
    # What the caller presents authenticates it: an approval link's token; a console
    # sign-in's password or key, or its session's token.
    open_to_anyone = [ops.ResolveCredential, ops.SignIn, ops.ResolveSession, ops.SignOut]
    assert [k for k in ops.OPERATIONS if k.open_to_anonymous] == open_to_anyone
    assert len(refused) == len(ops.OPERATIONS) - len(open_to_anyone)
    assert everything(engine) == before
    # An unauthenticated principal cannot be given a tenant, roles or locality.
    for bad in (
        {"tenant": "default"},
        {"roles": frozenset({Role.ADMIN})},
        {"local": True},
    ):
        fields: dict[str, Any] = {"tenant": "", "subject": "x", **bad}
        with pytest.raises(wp.InvalidRequest):
            Principal(**fields, authenticated=False)
    # A signed-in principal needs no role to resolve (the token authenticates).
    nobody_in_particular = Principal("default", "kiosk", frozenset())
    assert engine.execute(ops.ResolveCredential(token=ann["approve_token"]), nobody_in_particular)
    assert engine.resolve_credential(ann["approve_token"]).approver == "ann"


# == deciding without a token ==============================================================
def test_a_signed_in_approver_decides_without_a_token(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10}, started_by="eve")
    aid = pending_approval(engine, run.run_id).approval_id
    ann = mailbox.wait(aid, "ann")
    mailbox.wait(aid, "bob")
    mailbox.wait(aid, "cid")

    first = decide_signed_in(engine, approver("Ann"), aid, "approve")
    assert (first.principal, first.outcome) == ("ann", "pending")
    # Her emailed links died with it: one decision per approver.
    assert credential_statuses(engine, aid, "ann") == ["used", "used"]
    for token in (ann["approve_token"], ann["reject_token"]):
        with pytest.raises(wp.InvalidCredential):
            engine.decide(aid, token, "ann", "approve")
        with pytest.raises(wp.InvalidCredential):
            engine.resolve_credential(token)
    with pytest.raises(wp.DecisionRefused, match="decided on this approval already"):
        decide_signed_in(engine, approver("ann"), aid, "reject")

    second = decide_signed_in(engine, approver("bob"), aid, "approve")
    assert second.outcome == "approved"
    assert engine.result(run.run_id, timeout=10) == {"outcome": "approved", "by": ["ann", "bob"]}
    decided = of_type(engine.history(run.run_id), "ApprovalDecided")
    assert [(d.data["principal"], d.data["auth"], d.data["credential_id"]) for d in decided] == [
        ("ann", "api-key", None),
        ("bob", "api-key", None),
    ]
    # A caller cannot claim another way of signing in for a decision without a token.
    with pytest.raises(wp.DecisionRefused, match="approved already"):
        engine.execute(
            ops.Decide(approval_id=aid, decision="approve", auth="page"), approver("cid")
        )
    assert refusals(engine, run.run_id)[-1]["auth"] == "api-key"
    assert engine.verify(run.run_id) == []
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_the_same_approver_deciding_twice_at_once_counts_once(
    engine: Any, mailbox: Mailbox
) -> None:
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    barrier = threading.Barrier(3)
    results: list[Any] = []

    def click(decision: str) -> None:
        barrier.wait()
        try:
            results.append(decide_signed_in(engine, approver("ann"), aid, decision))
        except wp.DecisionRefused as exc:
            results.append(exc)

    in_threads([partial(click, d) for d in ("approve", "approve", "reject")])
    accepted = [r for r in results if isinstance(r, wp.DecisionReceipt)]
    assert len(accepted) == 1 and len(results) == 3, results
    assert [v["principal"] for v in engine.approval(aid).votes] == ["ann"]
    assert len(of_type(engine.history(run.run_id), "ApprovalDecided")) == 1


def test_without_a_token_every_rule_still_holds(engine: Any, mailbox: Mailbox) -> None:
    engine.add_to_group("managers", ["eve"])
    run = engine.start(purchase, {"amount": 10}, started_by="eve")
    aid = pending_approval(engine, run.run_id).approval_id
    mailbox.wait(aid, "ann")
    before = len(of_type(engine.history(run.run_id), "ApprovalDecided"))

    with pytest.raises(wp.DecisionRefused, match="segregation of duties"):
        decide_signed_in(engine, approver("EVE"), aid, "approve")
    with pytest.raises(wp.DecisionRefused, match="not among the approvers"):
        decide_signed_in(engine, approver("dan"), aid, "approve")
    with pytest.raises(wp.PermissionDenied, match="must be the caller"):
        engine.execute(
            ops.Decide(approval_id=aid, approver="bob", decision="approve"), approver("ann")
        )
    viewer = Principal("default", "ann", frozenset({Role.VIEWER}))
    with pytest.raises(wp.PermissionDenied, match="approver"):
        decide_signed_in(engine, viewer, aid, "approve")
    with pytest.raises(wp.InvalidRequest, match="credential"):  # the embedded API: a token
        engine.execute(
            ops.Decide(approval_id=aid, approver="ann", decision="approve"), engine.aio.local()
        )
    with pytest.raises(wp.InvalidRequest, match="decision"):
        decide_signed_in(engine, approver("ann"), aid, "maybe")
    assert len(of_type(engine.history(run.run_id), "ApprovalDecided")) == before
    assert engine.approval(aid).votes == []
    reasons = {
        (r["principal"], r["auth"], r["credential_id"]) for r in refusals(engine, run.run_id)
    }
    assert reasons == {("eve", "api-key", None), ("dan", "api-key", None)}

    # Removed from the group: refused from that moment.
    engine.remove_from_group("managers", ["cid"])
    with pytest.raises(wp.DecisionRefused, match="not among the approvers"):
        decide_signed_in(engine, approver("cid"), aid, "approve")
    # A reject is still a veto.
    assert decide_signed_in(engine, approver("bob"), aid, "reject").outcome == "rejected"
    with pytest.raises(wp.DecisionRefused, match="rejected already"):
        decide_signed_in(engine, approver("ann"), aid, "approve")


def test_without_a_token_expiry_is_judged_by_the_databases_clock(
    make_engine: Any, mailbox: Mailbox
) -> None:
    with approvals.behind_the_database(make_engine, mailbox) as (behind, _, aid, ann):
        with pytest.raises(wp.DecisionRefused, match="expired"):
            decide_signed_in(behind, approver("ann"), aid, "approve")
        with pytest.raises(wp.InvalidCredential):
            behind.resolve_credential(ann["approve_token"])
        assert behind.approval(aid).votes == []


def test_another_tenants_approval_is_not_found(engine: Any, mailbox: Mailbox) -> None:
    run = engine.start(purchase, {"amount": 10})
    aid = pending_approval(engine, run.run_id).approval_id
    ann = mailbox.wait(aid, "ann")
    made_up = "ap_" + "0" * 24
    outsider = approver("ann", tenant="other")

    def refusal(request: ops.Request[Any]) -> tuple[str, str]:
        with pytest.raises(wp.WaypostError) as caught:
            engine.execute(request, outsider)
        return type(caught.value).__name__, str(caught.value)

    for make in (
        lambda a: ops.Decide(approval_id=a, decision="approve"),
        lambda a: ops.GetApproval(approval_id=a),
    ):
        kind, message = refusal(make(aid))
        assert kind == "ApprovalNotFound"
        assert (kind, message.replace(aid, made_up)) == refusal(make(made_up))
    # With ann's own token, from the other tenant: the one answer every bad token gets.
    with pytest.raises(wp.InvalidCredential):
        engine.execute(
            ops.Decide(approval_id=aid, token=ann["approve_token"], decision="approve"), outsider
        )
    assert engine.execute(ops.ListApprovals(), outsider) == []
    assert engine.approval(aid).votes == []


# == the inbox =============================================================================
def test_an_approvers_inbox_holds_what_it_may_decide_now(engine: Any, mailbox: Mailbox) -> None:
    theirs = engine.start(for_dora)  # first, so a limit of one would show only it
    theirs_aid = pending_approval(engine, theirs.run_id).approval_id
    run = engine.start(purchase, {"amount": 10}, started_by="bob")
    aid = pending_approval(engine, run.run_id).approval_id
    ann = approver("ann")

    def inbox(who: Principal, **options: Any) -> list[str]:
        return [a.approval_id for a in engine.execute(ops.ListApprovals(**options), who)]

    assert inbox(ann) == [aid]
    assert inbox(ann, limit=1) == [aid]  # others' approvals do not hide hers
    assert inbox(ann, approver="ANN") == [aid]
    assert inbox(approver("bob")) == []  # he started the run
    assert inbox(approver("dora")) == [theirs_aid]
    with pytest.raises(wp.PermissionDenied, match="own approvals"):
        inbox(ann, approver="cid")
    with pytest.raises(wp.PermissionDenied, match="pending"):
        inbox(ann, status="approved")
    decide_signed_in(engine, ann, aid, "approve")
    assert inbox(ann) == []  # decided: no longer hers to decide
    assert inbox(approver("cid")) == [aid]

    # Operators, auditors and viewers see the tenant's approvals, as before.
    for roles in ({Role.OPERATOR}, {Role.AUDITOR}, {Role.VIEWER}, {Role.APPROVER, Role.VIEWER}):
        reader = Principal("default", "ann", frozenset(roles))
        assert sorted(inbox(reader)) == sorted([aid, theirs_aid])
        assert inbox(reader, approver="cid") == [aid]
    assert sorted(inbox(engine.aio.local())) == sorted([aid, theirs_aid])


# == links and the lookup ==================================================================
def test_a_link_is_the_servers_base_url_and_the_token() -> None:
    tokens = {"approve": "id1.s3cr3t", "reject": "id2.0ther"}
    for base in ("https://approve.example.org/waypost", "https://approve.example.org/waypost/"):
        assert approval_links(base, tokens) == {
            "approve": "https://approve.example.org/waypost/approve/id1.s3cr3t",
            "reject": "https://approve.example.org/waypost/approve/id2.0ther",
        }


def test_a_credential_is_looked_up_by_an_index(engine: Any) -> None:
    params = {"credential_id": "abc"}
    if engine.url.startswith("sqlite"):
        import sqlite3

        sql = load_queries("sqlite")["find_credential"]
        conn = sqlite3.connect(engine.url.removeprefix("sqlite:///"))
        try:
            plan = " ".join(str(r) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
        finally:
            conn.close()
        assert "approval_credentials_by_id" in plan, plan
        assert "SCAN" not in plan, plan
    else:
        sql = load_queries("postgres")["find_credential"]
        with pg_connect(engine.url) as conn:
            conn.execute("SET enable_seqscan = off")  # a tiny table would be scanned anyway
            plan = " ".join(r[0] for r in conn.execute(f"EXPLAIN {sql}", params))
        assert "approval_credentials_by_id" in plan, plan
