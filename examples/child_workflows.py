"""Child workflows: an order ships each parcel as a child run and waits for all of them.

Run it from the repository root:  .venv/bin/python examples/child_workflows.py [DB_URL]
It uses ./child-workflows-example.db unless given a database URL, and prints the order's
result, then the links between the runs.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any

import waypost as wp


@wp.activity
def book_courier(ctx: wp.ActivityContext, parcel: dict[str, Any]) -> str:
    if parcel["kg"] > 30:
        raise wp.NonRetryableError(f"no courier takes {parcel['kg']} kg")
    return f"trk-{parcel['id']}"


@wp.activity
def send_receipt(ctx: wp.ActivityContext, order_id: str) -> str:
    return f"receipt for {order_id} sent"


@wp.workflow(name="ship_parcel")
async def ship_parcel(ctx: wp.WorkflowContext, parcel: dict[str, Any]) -> str:
    return str(await ctx.run(book_courier, parcel))


@wp.workflow(name="receipt")
async def receipt(ctx: wp.WorkflowContext, order_id: str) -> str:
    return str(await ctx.run(send_receipt, order_id))


@wp.workflow(name="order")
async def order(ctx: wp.WorkflowContext, spec: dict[str, Any]) -> dict[str, Any]:
    # The receipt goes out on its own: it is not waited for, and outlives the order.
    await ctx.start_child(receipt, spec["id"], close="abandon")
    # One child run per parcel, all at once; each one's failure is caught on its own.
    shipped = await asyncio.gather(
        *(ctx.child(ship_parcel, parcel) for parcel in spec["parcels"]),
        return_exceptions=True,
    )
    tracking, problems = [], []
    for parcel, outcome in zip(spec["parcels"], shipped, strict=True):
        if isinstance(outcome, wp.ChildFailed):
            problems.append(f"parcel {parcel['id']}: {outcome.message}")
        else:
            tracking.append(outcome)
    return {"tracking": tracking, "problems": problems}


def main(url: str) -> None:
    engine = wp.Engine(url)
    engine.register(order, ship_parcel, receipt, book_courier, send_receipt)
    with engine.running():
        order_id = f"order-{uuid.uuid4().hex[:8]}"
        parcels = [{"id": "p1", "kg": 2}, {"id": "p2", "kg": 40}, {"id": "p3", "kg": 5}]
        run = engine.start(order, {"id": order_id, "parcels": parcels}, run_id=order_id)
        print("order ->", engine.result(run.run_id, timeout=60))
        info = engine.get(run.run_id)
        for child in info.children or []:
            print(f"  child {child['run_id']} ({child['workflow']}) -> {child['status']}")
        first = engine.get(f"{order_id}-2")
        print(f"  {first.run_id} -> parent {first.parent}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sqlite:///child-workflows-example.db")
