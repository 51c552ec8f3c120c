"""Read a running workflow's state (a query) and change it with an answer (an update).

A shopping cart: `items` is a query, `add` an update whose validator refuses an
item twice (nothing is recorded then) and whose handler reserves stock with an
activity before answering the cart's size; `checkout` ends the run. Run it from
the repository root:
    .venv/bin/python examples/queries_and_updates.py
"""

from __future__ import annotations

import sys

import waypost as wp


@wp.activity
def reserve(ctx: wp.ActivityContext, sku: str) -> str:
    return f"reservation-{sku}"


@wp.workflow(name="cart")
async def cart(ctx: wp.WorkflowContext, customer: str) -> dict[str, object]:
    items: list[str] = []
    checked_out = False

    def refuse_twice(sku: str) -> None:
        if sku in items:
            raise ValueError(f"{sku} is in the cart already")

    async def add(sku: str) -> int:
        await ctx.run(reserve, sku)  # an update's handler may run activities
        items.append(sku)
        return len(items)

    def checkout() -> int:
        nonlocal checked_out
        checked_out = True
        return len(items)

    ctx.set_query("items", lambda: list(items))
    ctx.set_update("add", add, validator=refuse_twice)
    ctx.set_update("checkout", checkout)
    await ctx.wait_condition(lambda: checked_out)
    return {"customer": customer, "items": items}


def main() -> int:
    with wp.Engine("sqlite:///cart-example.db") as engine:
        engine.register(cart, reserve)
        with engine.running():
            run = engine.start(cart, "ada")
            print("add book ->", engine.update(run.run_id, "add", "book", update_id="add-book"))
            print(
                "again, same id ->", engine.update(run.run_id, "add", "book", update_id="add-book")
            )
            try:
                engine.update(run.run_id, "add", "book")
            except wp.UpdateRejected as exc:
                print("rejected ->", exc)
            print("add pen ->", engine.update(run.run_id, "add", "pen"))
            print("items ->", engine.query(run.run_id, "items"))
            print("checkout ->", engine.update(run.run_id, "checkout"))
            print(run.run_id, "->", run.result(timeout=30))
            print("items after the end ->", engine.query(run.run_id, "items"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
