"""The demo behind `waypost demo`: an order process run on a SQLite file.

It shows the parts of the engine a first-time user wants to see: activities
with retries and idempotency keys, parallel steps, a durable timer, a
signal with a timeout, and a cancellation, each with its recorded history;
then a workflow defined as data, published, run, published again as
version 2 and a waiting run migrated to it after a dry run.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from waypost.client.sync import Engine
from waypost.errors import RunEndedError, WaitTimeout
from waypost.model.retry import Retry
from waypost.runtime.context import ActivityContext, WorkflowContext
from waypost.runtime.registry import activity, workflow
from waypost.store import redact_url

_say: Callable[[str], None] = print
_charges_seen: dict[str, int] = {}
_lock = threading.Lock()


@dataclass
class Order:
    id: str
    cents: int
    email: str


@activity(timeout=timedelta(seconds=10))
def reserve_stock(ctx: ActivityContext, order: Order) -> str:
    _say(f"  [{order.id}] reserve stock for {order.cents / 100:.2f} EUR")
    return f"res-{order.id}"


class PaymentGatewayBusy(Exception):
    """A transient error: the retry policy tries again."""


@activity(retry=Retry(max_attempts=4, initial_interval=timedelta(milliseconds=200)))
def charge_card(ctx: ActivityContext, order: Order) -> dict[str, Any]:
    with _lock:
        _charges_seen[ctx.idempotency_key] = _charges_seen.get(ctx.idempotency_key, 0) + 1
    if ctx.attempt == 1:
        _say(f"  [{order.id}] charge card: gateway busy (attempt {ctx.attempt}), will retry")
        raise PaymentGatewayBusy("the payment gateway answered 503")
    _say(
        f"  [{order.id}] charge card: ok on attempt {ctx.attempt} "
        f"(idempotency key {ctx.idempotency_key[:14]}..., the same on every attempt)"
    )
    return {"charge_id": f"ch-{order.id}", "cents": order.cents}


@activity
async def send_confirmation(ctx: ActivityContext, order: Order) -> None:
    _say(f"  [{order.id}] mail confirmation to {order.email}")


@activity
async def book_courier(ctx: ActivityContext, order: Order) -> str:
    _say(f"  [{order.id}] book courier")
    return f"trk-{order.id}"


@activity
def refund(ctx: ActivityContext, charge: dict[str, Any]) -> None:
    _say(f"  refund {charge['charge_id']} ({charge['cents'] / 100:.2f} EUR)")


@workflow(name="order", version="1")
async def order_workflow(ctx: WorkflowContext, order: Order) -> dict[str, Any]:
    await ctx.run(reserve_stock, order)
    charge = await ctx.run(charge_card, order)
    try:
        # Two steps in parallel; their step ids do not depend on which ends first.
        _, tracking = await asyncio.gather(
            ctx.run(send_confirmation, order), ctx.run(book_courier, order)
        )
        await ctx.sleep(
            timedelta(milliseconds=300)
        )  # a durable timer: no memory held while waiting
        try:
            delivered = await ctx.wait_signal("delivered", timeout=timedelta(seconds=2))
        except WaitTimeout:
            return {
                "order": order.id,
                "status": "shipped, delivery not confirmed",
                "tracking": tracking,
            }
        return {
            "order": order.id,
            "status": "delivered",
            "tracking": tracking,
            "signed_by": delivered["by"],
        }
    except asyncio.CancelledError:
        await ctx.run(refund, charge)  # compensation runs even when the run is cancelled
        raise


@activity(name="refunds.pay")
def pay_refund(ctx: ActivityContext, order: str, cents: int) -> str:
    _say(f"  [{order}] refund {cents / 100:.2f} EUR")
    return f"rf-{order}"


@activity(name="refunds.notify")
def notify_customer(ctx: ActivityContext, order: str) -> None:
    _say(f"  [{order}] tell the customer")


# A process a customer of yours could write, without Python (see `waypost definitions`).
REFUND_V1 = """
name: refund
input: {type: object, required: [order, cents], properties: {order: {type: string}}}
start: check
steps:
  check:
    type: choice
    choices: [{when: "cents > `5000`", next: review}]
    default: pay
  review: {type: wait, signal: reviewed, output: $.review, timeout: PT1M, next: pay}
  pay:
    type: activity
    activity: refunds.pay
    input: {order: order, cents: cents}
    output: $.refund
    next: done
  done: {type: succeed, output: "{order: order, refund: refund}"}
"""
REFUND_V2 = REFUND_V1.replace("    next: done\n", "    next: notify\n").replace(
    "  done:",
    "  notify: {type: activity, activity: refunds.notify, input: {order: order}, next: done}\n"
    "  done:",
)


def _definitions_demo(engine: Engine, stamp: str, say: Callable[[str], None]) -> None:
    v1 = engine.publish(REFUND_V1, by="demo")
    say("")
    say(f"a workflow defined as data: 'refund' version {v1.version} (digest {v1.digest[:12]}...)")
    small = engine.start("refund", {"order": f"R-{stamp}", "cents": 1500}, version=1)
    say(f"{small.run_id}: completed -> {small.result(timeout=30)}")
    large = engine.start("refund", {"order": f"S-{stamp}", "cents": 25000}, version=1)
    _wait_for(engine, large.run_id, lambda info: info.status.value == "waiting")
    say(f"{large.run_id}: waits at step 'review' on version 1")
    v2 = engine.publish(REFUND_V2, by="demo")
    say(f"published version {v2.version} (adds a 'notify' step); the waiting run stays on 1")
    for dry_run in (True, False):
        report = engine.migrate(
            large.run_id, v2.version, reason="tell customers", by="demo", dry_run=dry_run
        )
        what = "dry run" if dry_run else ("migrated" if report.migrated else "not migrated")
        verdict = "compatible" if report.compatible else f"not compatible: {report.reasons}"
        say(f"migrate {large.run_id} to version {v2.version} ({what}): {verdict}")
    engine.signal(large.run_id, "reviewed", {"by": "Grace"})
    result = large.result(timeout=30)
    say(f"{large.run_id}: completed on version {engine.get(large.run_id).version} -> {result}")


def run_demo(url: str, say: Callable[[str], None] = print) -> int:
    """Run the demo against `url`; returns a process exit code."""
    global _say
    _say = say
    stamp = time.strftime("%H%M%S")
    orders = [
        Order(f"A-{stamp}", 1299, "ada@example.com"),
        Order(f"B-{stamp}", 4500, "bob@example.com"),
        Order(f"C-{stamp}", 990, "cy@example.com"),
    ]
    say(f"waypost demo: engine on {redact_url(url)}")
    with Engine(url, poll_interval=0.2, shutdown_grace=5) as engine:
        engine.register(
            order_workflow, reserve_stock, charge_card, send_confirmation, book_courier, refund
        )
        engine.register(pay_refund, notify_customer)
        with engine.running():
            handles = {
                o.id: engine.start(order_workflow, o, run_id=f"order-{o.id}") for o in orders
            }
            say(f"started {len(handles)} runs: {', '.join(h.run_id for h in handles.values())}")
            a, b, c = (handles[o.id] for o in orders)
            _wait_for(
                engine,
                a.run_id,
                lambda info: any(w.get("kind") == "signal" for w in info.waiting_for),
            )
            say(f"signal 'delivered' to {a.run_id}")
            engine.signal(a.run_id, "delivered", {"by": "A. Lovelace"})
            _wait_for(engine, c.run_id, lambda info: info.status.value == "waiting")
            say(f"cancel {c.run_id}")
            engine.cancel(c.run_id, "customer changed their mind")
            for handle in (a, b, c):
                try:
                    result = handle.result(timeout=30)
                    say(f"{handle.run_id}: completed -> {result}")
                except RunEndedError as exc:
                    say(f"{handle.run_id}: {exc.status} ({exc.message})")
            _definitions_demo(engine, stamp, say)
        say("")
        say(f"history of {a.run_id} (hash-chained; verify finds any edit):")
        for ev in engine.history(a.run_id):
            say(f"  {ev.seq:>3} {ev.type:<18} {_brief(ev.data)}")
        problems = engine.verify(a.run_id)
        say(f"chain check: {problems or 'intact'}")
    return 0


def _wait_for(
    engine: Engine, run_id: str, ready: Callable[[Any], bool], timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = engine.get(run_id)
        if ready(info) or info.finished:
            return
        time.sleep(0.05)


def _brief(data: dict[str, Any]) -> str:
    keep = {
        k: v
        for k, v in data.items()
        if k in ("step", "activity", "attempt", "name", "reason", "retrying")
    }
    for k in ("result", "error", "payload"):
        if k in data:
            text = str(data[k] if k != "error" else data[k].get("message"))
            keep[k] = text if len(text) < 60 else text[:57] + "..."
    return ", ".join(f"{k}={v}" for k, v in keep.items())
