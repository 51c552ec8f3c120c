"""Definitions run as workflows: every step type, compensation, versions and migration."""

from __future__ import annotations

import getpass
import threading
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, of_type
from tests.helpers.definitions import RELEASED_ON_UNDO, RESERVE_STEP, big_orders_approved
from tests.helpers.mail import Mailbox
from waypost.features.senders import FileSender

pytestmark = pytest.mark.timeout(120)

CALLS: list[tuple[str, dict[str, Any]]] = []
_LOCK = threading.Lock()


def _called(name: str, **kwargs: Any) -> None:
    with _LOCK:
        CALLS.append((name, kwargs))


@wp.activity(name="budget.reserve")
def reserve(ctx: wp.ActivityContext, order_id: str, amount: float) -> dict[str, Any]:
    _called("budget.reserve", order_id=order_id, amount=amount)
    return {"id": f"res-{order_id}", "amount": amount}


@wp.activity(name="budget.release")
def release(ctx: wp.ActivityContext, reservation_id: str) -> str:
    _called("budget.release", reservation_id=reservation_id)
    return "released"


@wp.activity(name="supplier.order")
def place_order(ctx: wp.ActivityContext, reference: str) -> dict[str, Any]:
    _called("supplier.order", reference=reference, key=ctx.idempotency_key)
    return {"id": f"po-{reference}"}


@wp.activity(name="supplier.cancel")
def cancel_order(ctx: wp.ActivityContext, supplier_order_id: str) -> None:
    _called("supplier.cancel", supplier_order_id=supplier_order_id)


@wp.activity(name="payments.pay")
def pay(ctx: wp.ActivityContext, order_id: str, amount: float) -> dict[str, Any]:
    _called("payments.pay", order_id=order_id)
    if amount == 666:
        raise RuntimeError("card declined")
    return {"id": f"pay-{order_id}"}


ACTIVITIES = (reserve, release, place_order, cancel_order, pay)

PURCHASE_V1 = (
    """
name: purchase
input:
  type: object
  required: [order_id, amount]
  properties:
    order_id: {type: string}
    amount: {type: number}
    currency: {type: string, default: EUR}
start: reserve
steps:
"""
    + RESERVE_STEP
    + RELEASED_ON_UNDO
    + """    next: route
"""
    + big_orders_approved("order")
    + """  approve:
    type: approval
    approvers: {groups: [managers]}
    input: {amount: amount, currency: currency}
    output: $.approval
    expires_in: P3D
    on_reject: rejected
    next: order
  order:
    type: activity
    activity: supplier.order
    input: {reference: order_id}
    output: $.supplier_order
    compensate:
      activity: supplier.cancel
      input: {supplier_order_id: supplier_order.id}
    next: goods
  goods:
    type: wait
    signal: goods_received
    output: $.delivery
    timeout: P14D
    next: pay
  pay:
    type: activity
    activity: payments.pay
    input: {order_id: order_id, amount: amount}
    output: $.payment
    retry: {max_attempts: 2, initial_interval: 0}
    next: done
  done:
    type: succeed
    output: "{order: order_id, payment: payment.id, currency: currency}"
  rejected:
    type: fail
    error: rejected
    message: The order was rejected.
"""
)


def v2_of(text: str) -> str:
    """Version 2: a second check after the approval, read from the approval's output."""
    return text.replace(
        "    on_reject: rejected\n    next: order\n",
        "    on_reject: rejected\n    next: double_check\n"
        "  double_check:\n    type: choice\n    choices:\n"
        "      - when: approval.outcome == 'approved'\n        next: order\n"
        "    default: rejected\n",
    )


@pytest.fixture
def engine(make_engine: Any, mailbox: Mailbox) -> Any:
    CALLS.clear()
    eng = make_engine(*ACTIVITIES, notifier=FileSender(mailbox.path))
    eng.add_to_group("managers", ["ann", "bob"])
    with eng.running():
        yield eng


def waiting_on(engine: Any, run_id: str, kind: str) -> wp.RunInfo:
    def find() -> wp.RunInfo | None:
        info: wp.RunInfo = engine.get(run_id)
        if info.status == "waiting" and any(w["kind"] == kind for w in info.waiting_for):
            return info
        return None

    found: wp.RunInfo = eventually(find, f"run {run_id} waiting on a {kind}")
    return found


def approve(engine: Any, mailbox: Mailbox, run_id: str, who: str = "ann") -> None:
    approval = eventually(lambda: engine.approvals(run_id=run_id), "an approval")[0]
    note = mailbox.wait(approval.approval_id, who)
    engine.decide(approval.approval_id, note["approve_token"], who, "approve")


def names(calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [name for name, _ in calls]


def test_a_small_order_runs_every_step_without_approval(engine: Any) -> None:
    info = engine.publish(PURCHASE_V1, by="tina")
    assert (info.name, info.version, info.created) == ("purchase", 1, True)
    run = engine.start("purchase", {"order_id": "A1", "amount": 20})
    waiting_on(engine, run.run_id, "signal")
    assert names(CALLS) == ["budget.reserve", "supplier.order"]
    engine.signal(run.run_id, "goods_received", {"note": "all there"})
    assert engine.result(run.run_id, timeout=10) == {
        "order": "A1",
        "payment": "pay-A1",
        "currency": "EUR",  # the input schema's default
    }
    got = engine.get(run.run_id)
    assert (got.workflow, got.version) == ("purchase", "1")
    history = engine.history(run.run_id)
    started = history[0].data["definition"]
    assert started == {
        "name": "purchase",
        "version": 1,
        "digest": info.digest,
        "limits": {  # the tenant's, kept for the run's whole life
            "max_run_seconds": 90 * 86400,
            "max_expression_steps": 100_000,
            "max_expression_size": 1_000_000,
            "max_run_expression_steps": 1_000_000,
            "max_run_expression_size": 50_000_000,
            "max_map_items": 1_000,
            "max_map_concurrency": 10,
        },
    }
    scheduled = of_type(history, "ActivityScheduled")
    assert [e.data["definition_step"] for e in scheduled] == ["reserve", "order", "pay"]


def test_a_large_order_waits_for_approval_and_a_rejection_compensates_in_reverse(
    engine: Any, mailbox: Mailbox
) -> None:
    engine.publish(PURCHASE_V1)
    run = engine.start("purchase", {"order_id": "B2", "amount": 5000}, started_by="eve")
    waiting_on(engine, run.run_id, "approval")
    approval = engine.approvals(run_id=run.run_id)[0]
    assert approval.name == "approve" and approval.data == {"amount": 5000, "currency": "EUR"}
    note = mailbox.wait(approval.approval_id, "bob")
    engine.decide(approval.approval_id, note["reject_token"], "bob", "reject", "too dear")
    with pytest.raises(wp.WorkflowFailed) as failed:
        engine.result(run.run_id, timeout=10)
    error = failed.value.error
    assert error["type"] == "rejected" and error["message"] == "The order was rejected."
    assert error["details"]["compensated"] == ["reserve"]
    assert names(CALLS) == ["budget.reserve", "budget.release"]
    assert CALLS[-1][1] == {"reservation_id": "res-B2"}


def test_a_failed_payment_undoes_the_order_then_the_reservation(engine: Any) -> None:
    engine.publish(PURCHASE_V1)
    run = engine.start("purchase", {"order_id": "C3", "amount": 666})
    waiting_on(engine, run.run_id, "signal")
    engine.signal(run.run_id, "goods_received", {})
    with pytest.raises(wp.WorkflowFailed) as failed:
        engine.result(run.run_id, timeout=20)
    error = failed.value.error
    assert error["type"] == "activity_failed" and "card declined" in error["message"]
    assert error["details"] == {
        "step": "pay",
        "version": 1,
        "compensated": ["order", "reserve"],
    }
    assert names(CALLS) == [
        "budget.reserve",
        "supplier.order",
        "payments.pay",
        "payments.pay",
        "supplier.cancel",
        "budget.release",
    ]
    compensations = [
        e.data["compensates"]
        for e in of_type(engine.history(run.run_id), "ActivityScheduled")
        if "compensates" in e.data
    ]
    assert compensations == ["order", "reserve"]


def test_input_that_breaks_the_schema_is_refused_and_nothing_starts(engine: Any) -> None:
    engine.publish(PURCHASE_V1)
    with pytest.raises(wp.InputError) as refused:
        engine.start("purchase", {"order_id": 7}, run_id="bad-input")
    where = [p.path for p in refused.value.problems]
    assert where == ["input", "input.order_id"]  # amount missing; order_id not a string
    with pytest.raises(wp.RunNotFound):
        engine.get("bad-input")
    with pytest.raises(wp.UnknownWorkflow, match="no definition of that name"):
        engine.start("nonesuch", {})
    with pytest.raises(wp.UnknownWorkflow, match="no version 9"):
        engine.start("purchase", {"order_id": "x", "amount": 1}, version=9)
    # Tenants are walls: another tenant has no such definition, nor sees this one's runs.
    with pytest.raises(wp.UnknownWorkflow, match="tenant 'other'"):
        engine.start("purchase", {"order_id": "x", "amount": 1}, tenant="other")
    mine = engine.start("purchase", {"order_id": "x", "amount": 1})
    with pytest.raises(wp.RunNotFound):
        engine.migrate(mine.run_id, 1, None, "r", tenant="other")


def test_a_run_stays_on_its_version_when_a_new_one_is_published(
    engine: Any, mailbox: Mailbox
) -> None:
    engine.publish(PURCHASE_V1)
    old = engine.start("purchase", {"order_id": "D4", "amount": 2000})
    waiting_on(engine, old.run_id, "approval")
    v2 = engine.publish(v2_of(PURCHASE_V1))
    assert v2.version == 2
    new = engine.start("purchase", {"order_id": "D5", "amount": 2000})
    assert engine.get(new.run_id).version == "2"
    approve(engine, mailbox, old.run_id)
    waiting_on(engine, old.run_id, "signal")
    engine.signal(old.run_id, "goods_received", {})
    assert engine.result(old.run_id, timeout=10)["order"] == "D4"
    assert engine.get(old.run_id).version == "1"
    steps = [
        e.data.get("definition_step")
        for e in of_type(engine.history(old.run_id), "ActivityScheduled")
    ]
    assert steps == ["reserve", "order", "pay"]


def test_migrating_a_waiting_run_after_a_dry_run(engine: Any, mailbox: Mailbox) -> None:
    engine.publish(PURCHASE_V1)
    run = engine.start("purchase", {"order_id": "E6", "amount": 3000})
    waiting_on(engine, run.run_id, "approval")
    old_approval = engine.approvals(run_id=run.run_id)[0]
    old_token = mailbox.wait(old_approval.approval_id, "ann")["approve_token"]
    engine.publish(v2_of(PURCHASE_V1))

    dry = engine.migrate(run.run_id, 2, dry_run=True, reason="x")
    assert dry.compatible and not dry.migrated
    assert (dry.from_step, dry.to_step, dry.from_version, dry.to_version) == (
        "approve",
        "approve",
        1,
        2,
    )
    assert engine.get(run.run_id).version == "1"
    assert len(engine.history(run.run_id)) == len(engine.history(run.run_id))
    before = len(engine.history(run.run_id))
    assert before == len(engine.history(run.run_id))

    with pytest.raises(ValueError, match="reason"):
        engine.migrate(run.run_id, 2, reason="", by="ops")
    done = engine.migrate(run.run_id, 2, reason="add the double check", by="ops")
    assert done.migrated
    assert engine.get(run.run_id).version == "2"
    migrated = of_type(engine.history(run.run_id), "RunMigrated")
    assert len(migrated) == 1
    data = migrated[0].data
    assert (data["from_version"], data["to_version"], data["by"], data["reason"]) == (
        1,
        2,
        "ops",
        "add the double check",
    )
    assert data["mapping"] == {"approve": "approve"}
    # The old approval is revoked at once; a new one is requested under version 2.
    assert engine.approval(old_approval.approval_id).status == "revoked"
    with pytest.raises(wp.InvalidCredential):
        engine.decide(old_approval.approval_id, old_token, "ann", "approve")

    def new_approval() -> Any:
        pending = engine.approvals(run_id=run.run_id)
        return [a for a in pending if a.approval_id != old_approval.approval_id]

    fresh = eventually(new_approval, "the re-issued approval")[0]
    note = mailbox.wait(fresh.approval_id, "ann")
    engine.decide(fresh.approval_id, note["approve_token"], "ann", "approve")
    waiting_on(engine, run.run_id, "signal")
    engine.signal(run.run_id, "goods_received", {})
    assert engine.result(run.run_id, timeout=10)["order"] == "E6"
    history = engine.history(run.run_id)
    closed = [e.data["status"] for e in of_type(history, "ApprovalClosed")]
    assert closed == ["revoked"]
    assert engine.verify(run.run_id) == []


def test_a_run_that_is_not_waiting_cannot_be_migrated_and_the_mapping_is_checked(
    engine: Any,
) -> None:
    engine.publish(PURCHASE_V1)
    done = engine.start("purchase", {"order_id": "F7", "amount": 1})
    waiting_on(engine, done.run_id, "signal")
    engine.publish(v2_of(PURCHASE_V1))
    report = engine.migrate(done.run_id, 2, {"goods": "nowhere"}, dry_run=True, reason="x")
    assert not report.compatible and any("nowhere" in r for r in report.reasons)
    engine.signal(done.run_id, "goods_received", {})
    engine.result(done.run_id, timeout=10)
    finished = engine.migrate(done.run_id, 2, reason="late", by="ops")
    assert not finished.migrated and finished.reasons == ["the run has finished (completed)"]
    with pytest.raises(LookupError, match="no version 5"):
        engine.migrate(done.run_id, 5, reason="x", by="ops")


def test_batch_migration_reports_each_run(engine: Any, mailbox: Mailbox) -> None:
    engine.publish(PURCHASE_V1)
    at_approval = engine.start("purchase", {"order_id": "G1", "amount": 4000})
    at_goods = engine.start("purchase", {"order_id": "G2", "amount": 4})
    waiting_on(engine, at_approval.run_id, "approval")
    waiting_on(engine, at_goods.run_id, "signal")
    engine.publish(v2_of(PURCHASE_V1))
    dry = {r.run_id: r for r in engine.migrate_all("purchase", 1, 2, reason="r", dry_run=True)}
    assert set(dry) == {at_approval.run_id, at_goods.run_id}
    assert all(r.compatible and not r.migrated for r in dry.values())
    moved = engine.migrate_all("purchase", 1, 2, reason="roll out v2", by="ops")
    assert sorted((r.run_id, r.migrated) for r in moved) == sorted(
        [(at_approval.run_id, True), (at_goods.run_id, True)]
    )
    engine.signal(at_goods.run_id, "goods_received", {})
    assert engine.result(at_goods.run_id, timeout=10)["order"] == "G2"
    rows = db_query(engine.url, "SELECT version FROM runs WHERE run_id = ?", (at_goods.run_id,))
    assert rows == [("2",)]


@wp.workflow(name="purchase")
async def purchase_in_code(ctx: wp.WorkflowContext, order: dict[str, Any]) -> str:
    return "code"


def test_a_definition_may_not_take_the_name_of_a_code_workflow(make_engine: Any) -> None:
    eng = make_engine(purchase_in_code, *ACTIVITIES)
    with pytest.raises(wp.DefinitionError, match="name of a code workflow") as refused:
        eng.publish(PURCHASE_V1)
    assert [p.path for p in refused.value.problems] == ["name"]
    assert eng.definitions() == []


def test_limits_are_set_per_tenant_on_the_engine(make_engine: Any) -> None:
    eng = make_engine(*ACTIVITIES, limits={"small": wp.Limits(max_steps=5), "*": wp.Limits()})
    with pytest.raises(wp.DefinitionError, match="at most 5") as refused:
        eng.publish(PURCHASE_V1, tenant="small")
    assert [p.path for p in refused.value.problems] == ["steps"]
    assert eng.definitions(tenant="small") == []
    assert eng.publish(PURCHASE_V1, tenant="big").version == 1


def test_a_run_with_one_of_two_votes_can_be_migrated_and_the_vote_does_not_carry_over(
    engine: Any, mailbox: Mailbox
) -> None:
    two = PURCHASE_V1.replace(
        "approvers: {groups: [managers]}", "approvers: {groups: [managers], quorum: 2}"
    )
    engine.publish(two)
    run = engine.start("purchase", {"order_id": "H8", "amount": 7000})
    waiting_on(engine, run.run_id, "approval")
    approval = engine.approvals(run_id=run.run_id)[0]
    note = mailbox.wait(approval.approval_id, "ann")
    assert (
        engine.decide(approval.approval_id, note["approve_token"], "ann", "approve").outcome
        == "pending"
    )
    engine.publish(v2_of(two))
    # The positional form of the contract: run, version, mapping, reason (by: the OS user).
    report = engine.migrate(run.run_id, 2, {"approve": "approve"}, "v2")
    assert report.migrated, report.reasons
    [moved] = of_type(engine.history(run.run_id), "RunMigrated")
    assert moved.data["by"] == getpass.getuser() and moved.data["reason"] == "v2"
    assert "1 vote already given does not carry over" in " ".join(report.notes)
    assert engine.approval(approval.approval_id).status == "revoked"


def test_publish_warns_of_activities_that_no_running_worker_serves(make_engine: Any) -> None:
    CALLS.clear()
    alone = make_engine()  # not running: nothing serves anything yet
    info = alone.publish(PURCHASE_V1)
    assert info.created
    unserved = ["budget.release", "budget.reserve", "payments.pay", "supplier.cancel"]
    unserved.append("supplier.order")
    assert info.warnings == tuple(
        f"no running worker serves activity {name!r}: runs wait at its steps until one does"
        for name in unserved
    )
    worker = make_engine(*ACTIVITIES)
    with worker.running():
        # The worker advertises what it serves; publishing again (unchanged) warns of nothing.
        again = eventually(lambda: (i := alone.publish(PURCHASE_V1)).warnings == () and i, "")
        assert not again.created


def test_a_run_whose_activity_no_worker_serves_says_so_then_goes_on(make_engine: Any) -> None:
    CALLS.clear()
    definitions_only = make_engine()  # runs definitions, but serves none of their activities
    with definitions_only.running():
        definitions_only.publish(PURCHASE_V1)
        run = definitions_only.start("purchase", {"order_id": "W1", "amount": 20})

        def unserved() -> list[dict[str, Any]]:
            waiting = definitions_only.get(run.run_id).waiting_for
            return [w for w in waiting if w["kind"] == "code"]

        found = eventually(unserved, "the run to say no worker serves its activity")
        assert found == [
            {
                "kind": "code",
                "activity": "budget.reserve",
                "detail": "no running worker serves activity 'budget.reserve'",
            }
        ]
        assert CALLS == []
        worker = make_engine(*ACTIVITIES)
        with worker.running():
            waiting_on(definitions_only, run.run_id, "signal")
            assert unserved() == []
            assert names(CALLS) == ["budget.reserve", "supplier.order"]
