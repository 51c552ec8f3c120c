"""Order lines charged by a map step, defined as data (`definitions/order_lines.yaml`).

    python examples/order_lines_definition.py [sqlite:///order_lines.db]

1. an order of four lines: each line is charged (three at a time), the results come
   back in line order, and the order ships;
2. an order with one declined line: the map tolerates it, its place holds the error;
3. an order with two declined lines: the map fails, its `catch` routes the failure to
   a step that tells the customer, and the run fails with `payment_declined`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import waypost as wp

HERE = Path(__file__).parent / "definitions"


class PaymentDeclined(Exception):
    """The bank refused the charge."""


@wp.activity(
    name="payments.charge", retry=wp.Retry(max_attempts=3, non_retryable=(PaymentDeclined,))
)
def charge(ctx: wp.ActivityContext, order_id: str, sku: str, cents: int) -> dict[str, Any]:
    if sku.startswith("stolen"):
        raise PaymentDeclined(f"the card was declined for {sku}")
    # A real call passes ctx.idempotency_key: each line's key is its own and stable.
    return {"id": f"ch-{order_id}-{sku}", "cents": cents, "key": ctx.idempotency_key}


@wp.activity(name="orders.ship")
def ship(ctx: wp.ActivityContext, order_id: str, charges: list[Any]) -> str:
    return f"parcel-{order_id}"


@wp.activity(name="orders.tell_customer")
def tell_customer(ctx: wp.ActivityContext, order_id: str, reason: str) -> None:
    print(f"    told the customer of {order_id}: {reason}")


def main(url: str) -> None:
    engine = wp.Engine(url)
    engine.register(charge, ship, tell_customer)
    with engine.running():
        engine.publish((HERE / "order_lines.yaml").read_text(), by="example")
        lines = [{"sku": f"book-{i}", "cents": 100 * i} for i in range(1, 5)]
        run = engine.start("order_lines", {"order_id": "A1", "lines": lines})
        result = engine.result(run.run_id, timeout=60)
        print(f"order A1 -> total {result['total']}, shipped as {result['shipment']}")
        for line in result["charges"]:
            print(f"    {line['receipt']['id']}: {line['receipt']['cents']}")

        lines[1]["sku"] = "stolen-card"
        run = engine.start("order_lines", {"order_id": "B2", "lines": lines})
        result = engine.result(run.run_id, timeout=60)
        print(f"order B2 -> shipped as {result['shipment']}; line 2: {result['charges'][1]}")

        lines[2]["sku"] = "stolen-card-again"
        run = engine.start("order_lines", {"order_id": "C3", "lines": lines})
        try:
            engine.result(run.run_id, timeout=60)
        except wp.WorkflowFailed as failed:
            print(f"order C3 -> {failed.type}: {failed.message}")
    engine.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(f"sqlite:///{Path(tmp) / 'order_lines.db'}")
