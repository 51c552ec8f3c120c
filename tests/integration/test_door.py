"""The one door, on both stores: roles, tenants, identities and bounds are checked there,
for every caller, before anything is written."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from tests.helpers import of_type, until_event
from tests.helpers.approvals import approve_as_itself, pending_approval
from tests.helpers.mail import Mailbox
from waypost.features.senders import FileSender
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="door_purchase")
async def door_purchase(ctx: wp.WorkflowContext, req: dict[str, Any]) -> str:
    decision = await ctx.approval("manager", approvers=wp.AnyOf(group="managers"))
    return decision.outcome


@wp.workflow(name="door_wait")
async def door_wait(ctx: wp.WorkflowContext) -> Any:
    return await ctx.wait_signal("go")


@pytest.fixture
def engine(make_engine: Any, mailbox: Mailbox) -> Any:
    eng = make_engine(door_purchase, door_wait, notifier=FileSender(mailbox.path))
    with eng.running():
        yield eng


def as_(subject: str, *roles: Role, tenant: str = "default") -> Principal:
    return Principal(tenant, subject, frozenset(roles))


def test_a_principal_without_the_role_is_refused_and_nothing_is_written(engine: Any) -> None:
    viewer = as_("vera", Role.VIEWER)
    with pytest.raises(wp.PermissionDenied, match=r"vera.*may not start.*starter"):
        engine.execute(ops.Start(workflow="door_wait", run_id="by-viewer"), viewer)
    assert engine.list_runs() == []
    started = engine.execute(ops.Start(workflow="door_wait"), as_("sam", Role.STARTER))
    assert [r.run_id for r in engine.execute(ops.ListRuns(), viewer)] == [started]
    with pytest.raises(wp.PermissionDenied, match="cancel"):
        engine.execute(ops.Cancel(run_id=started, reason="no"), as_("sam", Role.STARTER))
    engine.execute(ops.Cancel(run_id=started, reason="ops says so"), as_("olga", Role.OPERATOR))
    with pytest.raises(wp.WorkflowCancelled):
        engine.result(started, timeout=10)
    # An admin may do anything in its own tenant.
    admin = as_("ada", Role.ADMIN)
    assert engine.execute(ops.AddToGroup(group="managers", members=["ann"]), admin) == 1


def test_another_tenants_run_is_not_found_as_if_it_did_not_exist(engine: Any) -> None:
    run = engine.start(door_wait, tenant="acme")
    globex = as_("gil", Role.OPERATOR, Role.VIEWER, tenant="globex")
    missing = "no-such-run"
    for request in (
        ops.GetRun(run_id=run.run_id),
        ops.Signal(run_id=run.run_id, signal="go"),
        ops.Cancel(run_id=run.run_id, reason="mine now"),
        ops.GetHistory(run_id=run.run_id),
    ):
        with pytest.raises(wp.RunNotFound) as theirs:
            engine.execute(request, globex)
        mine = type(request)(**{**request.__dict__, "run_id": missing})
        with pytest.raises(wp.RunNotFound) as nothing:
            engine.execute(mine, globex)
        assert str(theirs.value).replace(run.run_id, missing) == str(nothing.value)
    assert not engine.get(run.run_id, tenant="acme").finished
    assert of_type(engine.history(run.run_id, tenant="acme"), "CancelRequested") == []
    with pytest.raises(wp.PermissionDenied, match="every tenant"):
        engine.execute(ops.ListRuns(all_tenants=True), globex)


@pytest.mark.parametrize(
    "bad",
    [
        "x" * 10_000,
        "",
        "run\nid",
        "run\u2028id",  # a Unicode line separator: would split log lines and mail headers
        "run\u200bid",  # a zero-width space: invisible
        "run\x00id",
    ],
)
def test_a_bad_id_is_refused_with_a_short_message_and_nothing_is_written(
    engine: Any, bad: str
) -> None:
    for call in (
        lambda: engine.get(bad),
        lambda: engine.signal(bad, "go"),
        lambda: engine.cancel(bad, "why"),
        lambda: engine.start(door_wait, run_id=bad),
        lambda: engine.start(door_wait, tenant=bad),
    ):
        with pytest.raises(wp.InvalidRequest) as refused:
            call()
        assert isinstance(refused.value, ValueError)  # what callers caught before
        assert len(str(refused.value)) < 160, str(refused.value)
    assert engine.list_runs(tenant=None) == []


def test_texts_and_counts_are_bounded(engine: Any) -> None:
    run = engine.start(door_wait)
    with pytest.raises(wp.InvalidRequest, match="reason is required"):
        engine.cancel(run.run_id, "   ")
    with pytest.raises(wp.InvalidRequest, match="too long"):
        engine.cancel(run.run_id, "r" * 100_000)
    with pytest.raises(wp.InvalidRequest, match="control character"):
        engine.cancel(run.run_id, "stop\x1b[2Jnow")
    with pytest.raises(wp.InvalidRequest, match="at most 1000"):
        engine.add_to_group("big", [f"user{i}" for i in range(1001)])
    with pytest.raises(wp.InvalidRequest, match="limit"):
        engine.list_runs(limit=0)
    with pytest.raises(wp.InvalidRequest, match="unknown run status"):
        engine.list_runs(status="sleeping")
    assert of_type(engine.history(run.run_id), "CancelRequested") == []
    assert engine.groups() == {}


def test_identities_are_one_person_whatever_their_case_width_or_look_alike_letters(
    engine: Any, mailbox: Mailbox
) -> None:
    # The group lists Eve in full-width letters; she starts the run with a Cyrillic "e".
    engine.add_to_group("managers", ["\uff25\uff36\uff25", "ann"])
    assert engine.groups() == {"managers": ["ann", "eve"]}
    run = engine.start(door_purchase, {}, started_by="\u0435ve")
    approval = pending_approval(engine, run.run_id)
    assert approval.started_by == "eve"
    ann = mailbox.wait(approval.approval_id, "ann")
    # Segregation of duties knows her in every spelling: she is not asked and may not decide.
    assert [n["approver"] for n in mailbox.all()] == ["ann"]
    assert engine.approvals("EVE") == []
    assert [a.approval_id for a in engine.approvals("Ann")] == [approval.approval_id]
    receipt = engine.decide(approval.approval_id, ann["approve_token"], "ANN", "approve")
    assert receipt.principal == "ann" and receipt.outcome == "approved"
    assert engine.result(run.run_id, timeout=10) == "approved"


def test_a_principal_acts_only_as_itself_unless_local(engine: Any, mailbox: Mailbox) -> None:
    engine.add_to_group("managers", ["ann", "bob"])
    run = engine.start(door_purchase, {})
    approval = pending_approval(engine, run.run_id)
    ann_note = mailbox.wait(approval.approval_id, "ann")
    bob = as_("bob", Role.APPROVER)
    with pytest.raises(wp.PermissionDenied, match="must be the caller"):
        engine.execute(
            ops.Decide(
                approval_id=approval.approval_id,
                token=ann_note["approve_token"],
                approver="ann",
                decision="approve",
            ),
            bob,
        )
    assert of_type(engine.history(run.run_id), "ApprovalDecided") == []
    # Without naming anyone, an approver decides as itself (and Bob holds no token of Ann's).
    with pytest.raises(wp.InvalidCredential):
        engine.execute(
            approve_as_itself(approval.approval_id, ann_note["approve_token"]),
            bob,
        )
    refused = of_type(engine.history(run.run_id), "ApprovalRefused")
    assert [r.data["principal"] for r in refused] == ["bob"]
    # An operator who names no one is recorded as the one who acted.
    olga = as_("Olga", Role.OPERATOR)
    engine.execute(
        ops.Revoke(approval_id=approval.approval_id, approver="bob", reason="on leave"), olga
    )
    changed = until_event(engine, run.run_id, "ApproversChanged", "it")
    assert changed[0].data["by"] == "olga"
    with pytest.raises(wp.PermissionDenied, match="embedded API"):
        engine.execute(ops.Publish(definition={}, limits=wp.Limits()), olga)


def test_an_unknown_operation_is_refused(engine: Any) -> None:
    with pytest.raises(wp.InvalidRequest, match="not an operation"):
        engine.execute(object(), engine.aio.local())  # type: ignore[arg-type]


def test_refusals_of_valid_but_unknown_names_quote_only_a_prefix(engine: Any) -> None:
    long = "v" * 190  # a valid id, but no such thing
    for call, error in (
        (lambda: engine.start(door_wait, version=long), wp.UnknownWorkflow),
        (lambda: engine.start(long), wp.UnknownWorkflow),
        (lambda: engine.get(long), wp.RunNotFound),
        (lambda: engine.approval(long), wp.ApprovalNotFound),
        (lambda: engine.definition(long), wp.DefinitionNotFound),
    ):
        with pytest.raises(error) as refused:
            call()
        assert long not in str(refused.value) and "190 characters" in str(refused.value)
