"""Checking whether a waiting run can be moved to another version of its definition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.definitions import RELEASED_ON_UNDO, RESERVE_STEP, big_orders_approved
from waypost.model.definitions import Definition, ExpressionError, parse_definition
from waypost.model.definitions.migration import (
    MigrationCheck,
    check_mapping,
    check_migration,
    read_paths,
    root_fields,
    step_reads,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "definitions"

# The steps both versions share, word for word (indented as under `steps:`): the wait
# for the goods and the start of the payment; the end and the two failures.
AWAIT_GOODS_THEN_PAY = """  await_goods:
    type: wait
    signal: goods_received
    output: $.delivery
    timeout: P14D
    on_timeout: not_delivered
    next: pay
  pay:
    type: activity
    activity: payments.pay_invoice
    input:
      order_id: order_id
      amount: amount
      delivery_note: delivery.note
"""
DONE_OR_FAILED = """  done:
    type: succeed
    output: "{order_id: order_id, payment: payment.id}"
  rejected: {type: fail, error: rejected}
  not_delivered: {type: fail, error: not_delivered}
"""

# Version 1: reserve, approve, wait for the goods, pay.
V1 = (
    """
name: purchase_order
input:
  type: object
  required: [order_id, amount]
  properties:
    order_id: {type: string}
    amount: {type: number, exclusiveMinimum: 0}
start: reserve
steps:
"""
    + RESERVE_STEP
    + RELEASED_ON_UNDO
    + """    next: approve
  approve:
    type: approval
    approvers: {users: [dana, lee, sam], quorum: 2}
    input:
      order_id: order_id
      summary: "join(' ', [order_id, to_string(amount)])"
    output: $.approval
    expires_in: P5D
    on_reject: rejected
    on_expiry: rejected
    next: await_goods
"""
    + AWAIT_GOODS_THEN_PAY
    + """      currency: {literal: EUR}
    output: $.payment
    next: done
"""
    + DONE_OR_FAILED
)

# Version 2: a cost center in the input, small orders skip the approval, the
# invoice is fetched before the goods arrive and paid with, and the payment is
# announced while the order is held for a week.
V2 = (
    """
name: purchase_order
input:
  type: object
  required: [order_id, amount, cost_center]
  properties:
    order_id: {type: string}
    amount: {type: number, exclusiveMinimum: 0}
    cost_center: {type: string}
    priority: {type: string}
start: reserve
steps:
"""
    + RESERVE_STEP
    + """    next: route
"""
    + big_orders_approved("fetch_invoice")
    + """  approve:
    type: approval
    approvers: {groups: [purchasing-managers], quorum: 1}
    input:
      order_id: order_id
      cost_center: cost_center
      priority: priority || 'normal'
    output: $.approval
    expires_in: P5D
    on_reject: rejected
    on_expiry: rejected
    next: fetch_invoice
  fetch_invoice:
    type: activity
    activity: invoices.fetch
    input: {order_id: order_id}
    output: $.invoice
    next: await_goods
"""
    + AWAIT_GOODS_THEN_PAY
    + """      invoice_no: invoice.number
    output: $.payment
    next: archive
  archive:
    type: parallel
    branches:
      - start: notify
        steps:
          notify:
            type: activity
            activity: mail.send
            input: {payment: payment.id, cost_center: cost_center}
      - start: hold
        steps:
          hold: {type: wait, signal: released, timeout: P7D}
    next: done
"""
    + DONE_OR_FAILED
)

RUN_INPUT = {"order_id": "PO-7", "amount": 2500, "cost_center": "ops"}
# The run's data while it waits at `approve`, and at `await_goods`, of version 1.
AT_APPROVE = {**RUN_INPUT, "reservation": {"id": "R-1"}}
AT_AWAIT_GOODS = {**AT_APPROVE, "approval": {"decision": "approved"}}


def v2_with(change: Any) -> Definition:
    """Version 2 as changed by `change` (a function of its dict)."""
    data = yaml.safe_load(V2)
    change(data)
    return parse_definition(data)


@pytest.fixture
def v1() -> Definition:
    return parse_definition(V1)


@pytest.fixture
def v2() -> Definition:
    return parse_definition(V2)


def migrate(
    source: Definition,
    target: Definition,
    at: str,
    data: dict[str, Any],
    mapping: dict[str, str] | None = None,
    run_input: Any = None,
    votes: int = 0,
) -> MigrationCheck:
    return check_migration(
        source,
        target,
        at=at,
        data=data,
        run_input=RUN_INPUT if run_input is None else run_input,
        mapping=mapping or {},
        votes=votes,
    )


# root_fields -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "fields"),
    [
        ("amount", {"amount"}),
        ("a.b", {"a"}),
        ("a.b.c", {"a"}),
        ("a[0].b", {"a"}),
        ("items[?price > limit].name", {"items"}),
        ("items[*].price", {"items"}),
        ("items[].price", {"items"}),
        ("*.price", set()),
        ("[?price > limit]", set()),
        ("length(items)", {"items"}),
        ("sort_by(items, &price)[0].name", {"items"}),
        ("amount > `10`", {"amount"}),
        ("amount > limit && !blocked", {"amount", "limit", "blocked"}),
        ("join(' ', [a, b])", {"a", "b"}),
        ("{x: a, y: b.c}", {"a", "b"}),
        ("a.{x: b, y: c}", {"a"}),
        ("a || 'x'", {"a"}),
        ("a | b", {"a"}),
        ("@", set()),
        ("@.a", {"a"}),
        ("@ | a", {"a"}),
        ('"unit price" > `3`', {"unit price"}),
        ('`{"a": 1}`.a', set()),
    ],
)
def test_root_fields(expression: str, fields: set[str]) -> None:
    assert root_fields(expression) == fields


def test_root_fields_refuses_an_invalid_expression() -> None:
    with pytest.raises(ExpressionError, match="invalid expression"):
        root_fields("items[?")


# step_reads --------------------------------------------------------------------


def test_step_reads_locates_every_expression_of_the_example() -> None:
    definition = parse_definition((EXAMPLES / "purchase_order.yaml").read_text("utf-8"))
    steps = definition.all_steps
    # The canonical form sorts the keys of a mapping.
    assert step_reads(steps["reserve_budget"]) == [
        ("input.amount", "amount"),
        ("input.cost_center", "requester"),
        ("input.order_id", "order_id"),
        ("compensate.input.reservation_id", "reservation.id"),
    ]
    assert step_reads(steps["needs_approval"]) == [
        ("choices[0].when", "amount > `10000`"),
        ("choices[1].when", "amount > `1000`"),
    ]
    assert step_reads(steps["director_approval"])[2] == (
        "input.summary",
        "join(' ', [requester, 'asks for', to_string(amount), currency || 'EUR'])",
    )
    assert step_reads(steps["place_order"]) == [
        ("input.amount", "amount"),
        ("input.currency", "currency"),
        ("input.reference", "order_id"),
        ("input.supplier", "supplier"),
        ("compensate.input.supplier_order_id", "supplier_order.id"),
    ]
    # The literal currency is not read; an output location is not an expression.
    webhook = parse_definition((EXAMPLES / "supplier_webhook.yaml").read_text("utf-8"))
    assert step_reads(webhook.all_steps["send"]) == [
        ("http.body.amount", "amount"),
        ("http.body.reference", "order_id"),
    ]
    assert step_reads(steps["await_goods"]) == []
    assert step_reads(steps["done"]) == [("output", "{order_id: order_id, payment: payment.id}")]


def test_step_reads_of_a_wait_until() -> None:
    step = {"type": "wait", "until": "deadline", "timeout": 60, "next": "go"}
    assert step_reads(step) == [("until", "deadline")]


# check_mapping -----------------------------------------------------------------


def test_a_mapping_of_existing_top_level_steps_is_fine(v1: Definition, v2: Definition) -> None:
    assert check_mapping(v1, v2, {"approve": "approve", "await_goods": "fetch_invoice"}) == []


def test_mapping_problems_name_the_steps(v1: Definition, v2: Definition) -> None:
    mapping = {"aprove": "approve", "await_goods": "pya", "approve": "hold"}
    assert check_mapping(v1, v2, mapping) == [
        "the mapping names step 'aprove', which the old version does not have "
        "(did you mean 'approve'?)",
        "the mapping sends step 'await_goods' to 'pya', which the new version does not have "
        "(did you mean 'pay'?)",
        "the mapping sends step 'approve' to 'hold', which is inside parallel step 'archive' "
        "of the new version; a run can only be moved to a top-level step",
    ]


# check_migration ---------------------------------------------------------------


def test_identity_migration_at_an_approval_is_compatible(v1: Definition, v2: Definition) -> None:
    # `priority` is not in the data, but the new input schema declares it.
    check = migrate(v1, v2, "approve", AT_APPROVE)
    assert check == MigrationCheck(
        from_step="approve",
        to_step="approve",
        compatible=True,
        reasons=[],
        notes=[
            "the pending approval of step 'approve' is revoked: its credentials stop working",
            "a new approval of step 'approve' is requested from the new version's approvers",
        ],
    )


def test_an_input_read_only_when_declared_by_the_new_schema(v1: Definition) -> None:
    def undeclare_priority(data: dict[str, Any]) -> None:
        del data["input"]["properties"]["priority"]

    check = migrate(v1, v2_with(undeclare_priority), "approve", AT_APPROVE)
    assert not check.compatible
    assert check.reasons == [
        "step 'approve' of the new version, where the run continues, reads 'priority' "
        "(input.priority), which the run's data does not have"
    ]


def test_data_stored_only_before_the_new_step_is_missing(v1: Definition, v2: Definition) -> None:
    # Version 2 fetches the invoice before waiting for the goods; this run never did.
    check = migrate(v1, v2, "await_goods", AT_AWAIT_GOODS)
    assert not check.compatible
    assert check.to_step == "await_goods"
    assert check.reasons == [
        "step 'pay' of the new version reads 'invoice' (input.invoice_no), which the run's "
        "data does not have and no step after 'await_goods' sets"
    ]
    assert check.notes == [
        "the wait of step 'await_goods' starts again from the migration (its timeout too)"
    ]


def test_data_stored_by_a_later_step_is_not_missing(v1: Definition, v2: Definition) -> None:
    check = migrate(v1, v2, "await_goods", AT_AWAIT_GOODS, {"await_goods": "fetch_invoice"})
    assert check.compatible, check.reasons
    assert check.notes == [
        "the run moves from wait step 'await_goods' to activity step 'fetch_invoice', "
        "a step of another type"
    ]


def test_the_new_step_itself_needs_its_data_now(v1: Definition, v2: Definition) -> None:
    # The wait's own output (delivery) does not count for the step it continues at.
    check = migrate(v1, v2, "await_goods", AT_AWAIT_GOODS, {"await_goods": "pay"})
    assert check.reasons == [
        "step 'pay' of the new version, where the run continues, reads 'delivery' "
        "(input.delivery_note), which the run's data does not have",
        "step 'pay' of the new version, where the run continues, reads 'invoice' "
        "(input.invoice_no), which the run's data does not have",
    ]


def test_steps_inside_parallel_branches_are_checked(v1: Definition) -> None:
    def mail_the_requester(data: dict[str, Any]) -> None:
        notify = data["steps"]["archive"]["branches"][0]["steps"]["notify"]
        notify["input"]["to"] = "requester_email"
        notify["input"]["cc"] = "join(',', [requester_email, 'audit@example.com'])"

    check = migrate(v1, v2_with(mail_the_requester), "approve", AT_APPROVE)
    assert check.reasons == [
        "step 'notify' of the new version reads 'requester_email' (input.cc, input.to), "
        "which the run's data does not have and no step after 'approve' sets"
    ]


def test_run_input_must_satisfy_the_new_input_schema(v1: Definition, v2: Definition) -> None:
    run_input = {"order_id": "PO-7", "amount": "2500"}
    check = migrate(v1, v2, "approve", {**AT_APPROVE, "amount": "2500"}, run_input=run_input)
    assert not check.compatible
    [reason] = check.reasons
    assert reason.startswith("the run's input does not satisfy the new version's input schema: ")
    assert "$: 'cost_center' is a required property" in reason
    assert "$.amount: '2500' is not of type 'number'" in reason


def test_many_input_schema_errors_are_counted(v1: Definition, v2: Definition) -> None:
    run_input = {"order_id": 1, "amount": "x", "cost_center": 2, "priority": 3}
    [reason] = migrate(v1, v2, "approve", AT_APPROVE, run_input=run_input).reasons
    assert reason.endswith("(and 1 more)")
    assert reason.count("is not of type") == 3


def test_only_a_run_at_an_approval_or_wait_can_be_moved(v1: Definition, v2: Definition) -> None:
    check = migrate(v1, v2, "reserve", RUN_INPUT)
    assert not check.compatible
    assert check.reasons == [
        "only a run waiting at an approval or wait step can be moved; "
        "it is at activity step 'reserve'"
    ]
    assert check.notes == []


def test_a_run_at_a_call_step_cannot_be_moved_and_is_told_why() -> None:
    calling = parse_definition(
        {
            "name": "order",
            "start": "price_it",
            "steps": {
                "price_it": {"type": "call", "definition": "quote", "next": "done"},
                "done": {"type": "succeed"},
            },
        }
    )
    [reason] = migrate(calling, calling, "price_it", {}).reasons
    assert reason.startswith("the run waits at call step 'price_it' for its child run: ")
    assert "start the child again" in reason


def test_a_run_inside_a_parallel_branch_cannot_be_moved(v2: Definition) -> None:
    check = migrate(v2, v2, "hold", {**AT_AWAIT_GOODS, "payment": {"id": "P-1"}})
    assert check.reasons == [
        "step 'hold' is inside parallel step 'archive' of the old version; only a run "
        "waiting at a top-level approval or wait step can be moved",
        "the new version has step 'hold' only inside parallel step 'archive', and a run can "
        "only be moved to a top-level step: map 'hold' to a top-level step of the new version",
    ]


def test_a_run_cannot_be_moved_into_a_parallel_branch(v1: Definition, v2: Definition) -> None:
    check = migrate(v1, v2, "await_goods", AT_AWAIT_GOODS, {"await_goods": "hold"})
    assert not check.compatible
    assert check.to_step == "hold"
    assert check.reasons == [
        "the mapping sends step 'await_goods' to 'hold', which is inside parallel step "
        "'archive' of the new version; a run can only be moved to a top-level step"
    ]


def test_a_renamed_step_needs_the_mapping(v1: Definition) -> None:
    def rename_approve(data: dict[str, Any]) -> None:
        data["steps"]["review"] = data["steps"].pop("approve")
        data["steps"]["route"]["choices"][0]["next"] = "review"

    v3 = v2_with(rename_approve)
    unmapped = migrate(v1, v3, "approve", AT_APPROVE)
    assert unmapped.to_step is None
    assert unmapped.reasons == [
        "the new version has no step 'approve': map 'approve' to a step of the new version"
    ]
    mapped = migrate(v1, v3, "approve", AT_APPROVE, {"approve": "review"})
    assert mapped.compatible, mapped.reasons
    assert mapped.to_step == "review"


def test_mapping_problems_about_other_steps_do_not_concern_this_run(
    v1: Definition, v2: Definition
) -> None:
    check = migrate(v1, v2, "approve", AT_APPROVE, {"await_goods": "nowhere", "gone": "pay"})
    assert check.compatible, check.reasons


@pytest.mark.parametrize(
    ("votes", "carried"),
    [
        (0, []),
        (1, ["1 vote already given does not carry over"]),
        (2, ["2 votes already given do not carry over"]),
    ],
)
def test_votes_given_do_not_carry_over(
    v1: Definition, v2: Definition, votes: int, carried: list[str]
) -> None:
    check = migrate(v1, v2, "approve", AT_APPROVE, votes=votes)
    assert check.notes == [
        "the pending approval of step 'approve' is revoked: its credentials stop working",
        *carried,
        "a new approval of step 'approve' is requested from the new version's approvers",
    ]


def test_notes_for_moving_from_an_approval_to_a_wait(v1: Definition, v2: Definition) -> None:
    check = migrate(v1, v2, "approve", AT_APPROVE, {"approve": "await_goods"}, votes=1)
    assert check.notes == [
        "the pending approval of step 'approve' is revoked: its credentials stop working",
        "1 vote already given does not carry over",
        "the wait of step 'await_goods' starts again from the migration (its timeout too)",
        "the run moves from approval step 'approve' to wait step 'await_goods', "
        "a step of another type",
    ]


# nested paths ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "paths"),
    [
        ("a.b.c", {("a",), ("a", "b"), ("a", "b", "c")}),
        ("@.a.b", {("a",), ("a", "b")}),
        ("a | b.c", {("a",), ("a", "b"), ("a", "b", "c")}),
        ("a[0].b", {("a",)}),
        ("items[?price > limit].name", {("items",)}),
        ("{x: a.b, y: c}", {("a",), ("a", "b"), ("c",)}),
        ("length(a.b) > n", {("a",), ("a", "b"), ("n",)}),
        ("sort_by(items, &price)", {("items",)}),
        ("'text'", set()),
    ],
)
def test_read_paths(expression: str, paths: set[tuple[str, ...]]) -> None:
    assert read_paths(expression) == paths


def _reads_reservation_field(field: str) -> Any:
    def change(data: dict[str, Any]) -> None:
        data["steps"]["approve"]["input"]["reserved"] = f"reservation.{field}"

    return change


def test_a_nested_field_the_run_lacks_is_missing(v1: Definition) -> None:
    # The run's reservation has an id, not a `holder`: version 2 would read null.
    target = v2_with(_reads_reservation_field("holder.name"))
    check = migrate(v1, target, "approve", AT_APPROVE)
    assert check.reasons == [
        "step 'approve' of the new version, where the run continues, reads "
        "'reservation.holder' (input.reserved), which the run's data does not have"
    ]
    assert migrate(v1, v2_with(_reads_reservation_field("id")), "approve", AT_APPROVE).compatible


def test_a_nested_field_under_a_value_that_is_not_an_object_is_missing(v1: Definition) -> None:
    data = {**AT_APPROVE, "reservation": "R-1"}
    check = migrate(v1, v2_with(_reads_reservation_field("id")), "approve", data)
    assert "'reservation.id'" in check.reasons[0]


def test_a_nested_field_declared_by_the_input_schema_is_there(v1: Definition) -> None:
    def change(data: dict[str, Any]) -> None:
        data["steps"]["approve"]["input"]["tag"] = "meta.tag"
        data["input"]["properties"]["meta"] = {
            "type": "object",
            "properties": {"tag": {"type": "string"}},
        }

    assert migrate(v1, v2_with(change), "approve", AT_APPROVE).compatible

    def undeclared(data: dict[str, Any]) -> None:
        change(data)
        data["steps"]["approve"]["input"]["tag"] = "meta.other"

    check = migrate(v1, v2_with(undeclared), "approve", AT_APPROVE)
    assert [r.split(" (")[0] for r in check.reasons] == [
        "step 'approve' of the new version, where the run continues, reads 'meta.other'"
    ]


def test_a_nested_field_a_later_step_stores_is_there(v1: Definition, v2: Definition) -> None:
    # `pay` reads invoice.number; `fetch_invoice` (after the approval) stores $.invoice.
    check = migrate(v1, v2, "approve", AT_APPROVE)
    assert check.compatible, check.reasons
