"""A tenant's purchase order, defined as data: publish, run, publish v2, migrate.

The definitions are `definitions/purchase_order.yaml` (version 1) and
`definitions/purchase_order_v2.yaml` (version 2). This file registers the
activities they call and plays the whole story in one process:

    python examples/purchase_order_definition.py [sqlite:///purchases.db]

1. publish version 1 (publishing it again returns the same version);
2. start two orders that wait for a manager's approval;
3. publish version 2 while they wait;
4. approve the first: it finishes on version 1, as it started;
5. dry-run the migration of the second to version 2, then migrate it: its
   pending approval is revoked and a new one is requested under version 2;
   it finishes on version 2 (with version 2's inspection step);
6. a third order whose supplier refuses it: the budget reservation is undone
   by its compensation, and the run fails with the reason.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import waypost as wp

HERE = Path(__file__).parent / "definitions"


@wp.activity(name="budget.reserve")
def reserve(ctx: wp.ActivityContext, order_id: str, amount: float, cost_center: str) -> dict:
    return {"id": f"res-{order_id}", "amount": amount, "cost_center": cost_center}


@wp.activity(name="budget.release")
def release(ctx: wp.ActivityContext, reservation_id: str) -> str:
    print(f"    compensation: budget reservation {reservation_id} released")
    return reservation_id


@wp.activity(name="supplier.place_order")
def place_order(
    ctx: wp.ActivityContext, reference: str, supplier: str, amount: float, currency: str
) -> dict:
    if supplier == "closed-shop":
        raise wp.NonRetryableError(f"supplier {supplier} does not take orders")
    # A real call would pass ctx.idempotency_key so that a retry orders nothing twice.
    return {"id": f"po-{reference}", "supplier": supplier, "key": ctx.idempotency_key}


@wp.activity(name="supplier.cancel_order")
def cancel_order(ctx: wp.ActivityContext, supplier_order_id: str) -> str:
    print(f"    compensation: supplier order {supplier_order_id} cancelled")
    return supplier_order_id


@wp.activity(name="payments.pay_invoice")
def pay_invoice(ctx: wp.ActivityContext, order_id: str, amount: float, delivery_note: str) -> dict:
    return {"id": f"pay-{order_id}", "amount": amount}


class Inbox:
    """Keeps the approvers' notifications (a mail server would, in production)."""

    def __init__(self) -> None:
        self._notes: list[wp.Notification] = []
        self._lock = threading.Lock()

    def send(self, notification: wp.Notification) -> None:
        with self._lock:
            self._notes.append(notification)

    def for_(self, approval_id: str, approver: str) -> wp.Notification:
        def find() -> wp.Notification | None:
            with self._lock:
                mine = [
                    n
                    for n in self._notes
                    if n.approval_id == approval_id and n.approver == approver
                ]
            return mine[-1] if mine else None

        return wait_for(find, f"a notification to {approver}")


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f}s")
        time.sleep(0.02)
    return value


def waiting_at(engine: wp.Engine, run_id: str, kind: str) -> None:
    wait_for(
        lambda: any(w["kind"] == kind for w in engine.get(run_id).waiting_for),
        f"run {run_id} waiting on a {kind}",
    )


def approve(engine: wp.Engine, inbox: Inbox, run_id: str, who: str) -> None:
    approval = wait_for(lambda: engine.approvals(run_id=run_id), "open approval")[0]
    note = inbox.for_(approval.approval_id, who)
    engine.decide(approval.approval_id, note.approve_token, who, "approve", "ok")
    print(f"  {who} approved {approval.name!r} of run {run_id}")


def main(url: str) -> None:
    inbox = Inbox()
    engine = wp.Engine(url, notifier=inbox, poll_interval=0.05)
    engine.register(reserve, release, place_order, cancel_order, pay_invoice)
    engine.add_to_group("purchasing-managers", ["mia", "max"])
    engine.add_to_group("warehouse", ["wes"])
    order = {"amount": 2500, "requester": "rob", "supplier": "acme"}
    with engine.running():
        v1 = engine.publish((HERE / "purchase_order.yaml").read_text(), by="tina")
        again = engine.publish((HERE / "purchase_order.yaml").read_text(), by="tina")
        print(f"published {v1.name} version {v1.version} (digest {v1.digest[:12]})")
        print(f"published the same text again: version {again.version}, new: {again.created}")

        first = engine.start("purchase_order", {**order, "order_id": "PO-1"}, started_by="rob")
        second = engine.start("purchase_order", {**order, "order_id": "PO-2"}, started_by="rob")
        for run in (first, second):
            waiting_at(engine, run.run_id, "approval")
        print("two orders wait for a manager on version 1")

        v2 = engine.publish((HERE / "purchase_order_v2.yaml").read_text(), by="tina")
        print(f"published version {v2.version} while they wait")

        approve(engine, inbox, first.run_id, "mia")
        waiting_at(engine, first.run_id, "signal")
        engine.signal(first.run_id, "goods_received", {"note": "DN-1, complete"})
        result = engine.result(first.run_id, timeout=30)
        print(f"  PO-1 finished on version {engine.get(first.run_id).version}: {result}")

        for dry_run in (True, False):
            report = engine.migrate(
                second.run_id,
                2,
                {"manager_approval": "manager_approval"},
                reason="orders now need the warehouse's inspection",
                by="ops-olga",
                dry_run=dry_run,
            )
            verdict = "compatible" if report.compatible else "not compatible"
            done = "migrated" if report.migrated else "dry run, nothing changed"
            print(
                f"migrate PO-2: v{report.from_version} {report.from_step} -> "
                f"v{report.to_version} {report.to_step}: {verdict}, {done}"
            )
            for line in report.reasons + report.notes:
                print(f"    {line}")
        approve(engine, inbox, second.run_id, "max")
        waiting_at(engine, second.run_id, "signal")
        engine.signal(second.run_id, "goods_received", {"note": "DN-2, complete"})
        approve(engine, inbox, second.run_id, "wes")  # version 2's inspection step
        result = engine.result(second.run_id, timeout=30)
        print(f"  PO-2 finished on version {engine.get(second.run_id).version}: {result}")

        third = engine.start(
            "purchase_order",
            {**order, "order_id": "PO-3", "amount": 300, "supplier": "closed-shop"},
        )
        try:
            engine.result(third.run_id, timeout=30)
        except wp.WorkflowFailed as failed:
            error = failed.error
            print(f"  PO-3 failed ({error['type']}): {error['message']}")
            print(f"    undone: {error['details'].get('compensated')}")
    engine.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(f"sqlite:///{Path(tmp) / 'purchases.db'}")
