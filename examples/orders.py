"""An order process: charge, notify and book a courier in parallel, wait for delivery.

Run it from the repository root:  .venv/bin/python examples/orders.py
It uses ./orders-example.db (created if missing) and prints each run's result.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from datetime import timedelta

import waypost as wp


@dataclass
class Order:
    id: str
    cents: int


class Payments:
    """A stand-in payment provider that deduplicates by idempotency key, as real ones do."""

    def __init__(self) -> None:
        self.charges: dict[str, dict[str, object]] = {}

    def charge(self, order_id: str, cents: int, idempotency_key: str) -> dict[str, object]:
        return self.charges.setdefault(idempotency_key, {"id": f"ch_{order_id}", "cents": cents})


payments = Payments()


@wp.activity(retry=wp.Retry(max_attempts=5), timeout=timedelta(seconds=30))
def charge(ctx: wp.ActivityContext, order: Order) -> dict[str, object]:
    return payments.charge(order.id, order.cents, idempotency_key=ctx.idempotency_key)


@wp.activity
async def notify(ctx: wp.ActivityContext, order: Order) -> None:
    print(f"  mail: your order {order.id} is confirmed")


@wp.activity
async def book_courier(ctx: wp.ActivityContext, order: Order) -> str:
    return f"TRK-{order.id}"


@wp.workflow(name="order", version="1")
async def order_workflow(ctx: wp.WorkflowContext, order: Order) -> dict[str, object]:
    receipt = await ctx.run(charge, order)
    _, tracking = await asyncio.gather(ctx.run(notify, order), ctx.run(book_courier, order))
    try:
        delivered = await ctx.wait_signal("delivered", timeout=timedelta(seconds=2))
    except wp.WaitTimeout:
        return {"order": order.id, "status": "shipped", "tracking": tracking, "paid": receipt["id"]}
    return {"order": order.id, "status": "delivered", "signed_by": delivered["by"]}


def main() -> int:
    with wp.Engine("sqlite:///orders-example.db") as engine:
        engine.register(order_workflow, charge, notify, book_courier)
        with engine.running():
            first = engine.start(order_workflow, Order("o-1", 1299))
            second = engine.start(order_workflow, Order("o-2", 4500))
            engine.signal(first.run_id, "delivered", {"by": "Ada"})
            for run in (first, second):
                print(run.run_id, "->", run.result(timeout=30))
    return 0


if __name__ == "__main__":
    sys.exit(main())
